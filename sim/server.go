package sim

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options selects a profile and overrides.
type Options struct {
	Profile string // name of an embedded profile; "tiny" when empty
	// ProfileFile is a profile TOML file to run instead of an embedded profile.
	ProfileFile string
	Addr        string  // listen address; "127.0.0.1:0" (a free port) when empty
	Speed       float64 // time scale factor: 10 runs everything 10x faster; 0 keeps the profile's
	APIKey      string  // when non-empty, /v1 requests need "Authorization: Bearer <key>"
	// Override tweaks any profile field after loading (faults, legacy names, DP engines...).
	Override func(*Profile)
}

// Server is a running simulator.
type Server struct {
	profile  Profile
	engine   *Engine // the first replica's
	replicas *replicaSet
	apiKey   string
	listener net.Listener
	http     *http.Server
	cancel   context.CancelFunc
	done     chan struct{}
	created  int64
	// chatRequests numbers generation requests (chat and completions) for the faults; it
	// survives simulated restarts.
	chatRequests atomic.Int64
	scrapes      atomic.Int64 // /metrics requests, for metrics_fault_after
	// startedAt is the simulated process's start time in hundredths of a second (the clock
	// tick prometheus_client reads it in); a simulated restart moves it forward.
	startedAt atomic.Int64
	// handlers counts requests in flight; closed (under closing) stops new ones counting.
	handlers sync.WaitGroup
	closing  sync.Mutex
	closed   bool
	inFlight atomic.Int64 // handlers running, for tests that a hang ends with its client
}

// Start loads the profile, listens on opts.Addr and serves in the background.
func Start(opts Options) (*Server, error) {
	name := opts.Profile
	if name == "" {
		name = "tiny"
	}
	var p Profile
	var err error
	if opts.ProfileFile != "" {
		p, err = LoadProfileFile(opts.ProfileFile)
	} else {
		p, err = LoadProfile(name)
	}
	if err != nil {
		return nil, err
	}
	if opts.Speed < 0 {
		return nil, fmt.Errorf("speed %g must be >= 0", opts.Speed)
	}
	if opts.Speed > 0 {
		p.Speed = opts.Speed
	}
	if opts.Override != nil {
		opts.Override(&p)
		if err := p.Validate(); err != nil {
			return nil, err
		}
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	replicas := newReplicaSet(p)
	s := &Server{
		profile:  p,
		engine:   replicas.engines[0],
		replicas: replicas,
		apiKey:   opts.APIKey,
		listener: ln,
		cancel:   cancel,
		done:     make(chan struct{}),
		created:  time.Now().Unix(),
	}
	s.http = &http.Server{
		Handler:           s.track(s.routes()),
		ReadHeaderTimeout: 30 * time.Second,
		// Handlers see this context cancelled on Close, so in-flight streams end.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	s.markStarted()
	go func() {
		defer close(s.done)
		_ = s.http.Serve(ln)
	}()
	return s, nil
}

// URL is the server's base URL, "http://HOST:PORT" without a trailing slash or /v1.
func (s *Server) URL() string { return "http://" + s.listener.Addr().String() }

// Profile is the profile the server runs, overrides applied.
func (s *Server) Profile() Profile { return s.profile }

// Engine is the server's KV engine (the first replica's), for tests that check counters
// directly.
func (s *Server) Engine() *Engine { return s.engine }

// Close stops serving and returns once in-flight requests (hung ones included) have ended.
func (s *Server) Close() error {
	s.cancel()
	err := s.http.Close()
	<-s.done
	s.closing.Lock()
	s.closed = true
	s.closing.Unlock()
	s.handlers.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.requireKey(s.handleChat))
	mux.HandleFunc("POST /v1/completions", s.requireKey(s.handleCompletions))
	mux.HandleFunc("GET /v1/models", s.requireKey(s.handleModels))
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": s.profile.Version})
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	s.dialectRoutes(mux)
	if len(s.profile.HangPaths) == 0 {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(s.profile.HangPaths, r.URL.Path) {
			hang(r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// hang is the hang faults: the request is read and gets no answer, until the client goes
// away or the server closes (the request context ends in both cases).
func hang(r *http.Request) {
	_, _ = io.Copy(io.Discard, http.MaxBytesReader(nil, r.Body, maxRequestBytes))
	<-r.Context().Done()
	// Never answer, also when the hang ends on shutdown: a handler that returns would send
	// net/http's empty 200. Dropping the connection is what a hung server looks like.
	panic(http.ErrAbortHandler)
}

// track counts handlers in flight so that Close can wait for them.
func (s *Server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.closing.Lock()
		if s.closed {
			s.closing.Unlock()
			panic(http.ErrAbortHandler) // a request that raced Close: drop the connection
		}
		s.handlers.Add(1)
		s.closing.Unlock()
		s.inFlight.Add(1)
		defer func() {
			s.inFlight.Add(-1)
			s.handlers.Done()
		}()
		next.ServeHTTP(w, r)
	})
}

// requireKey checks the bearer token the way vLLM's --api-key does for /v1 routes.
func (s *Server) requireKey(next http.HandlerFunc) http.HandlerFunc {
	if s.apiKey == "" {
		return next
	}
	want := []byte("Bearer " + s.apiKey)
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeError(w, http.StatusUnauthorized, "Unauthorized", "")
			return
		}
		next(w, r)
	}
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if p := s.profile; p.MetricsFault != "" && s.scrapes.Add(1) > int64(p.MetricsFaultAfter) {
		if p.MetricsFault == MetricsFaultHang {
			hang(r)
			return
		}
		http.Error(w, "simulated /metrics failure", http.StatusInternalServerError)
		return
	}
	if d := s.profile.MetricsDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	s.serveMetrics(w, r.URL.Path)
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id":            s.profile.ServedModelName,
			"object":        "model",
			"created":       s.created,
			"owned_by":      "vllm",
			"root":          s.profile.Model,
			"parent":        nil,
			"max_model_len": s.profile.MaxModelLen,
		}},
	})
}

func (s *Server) knownModel(name string) bool {
	return name == "" || name == s.profile.ServedModelName
}

// wireMessage is a chat message as clients send it: content is a string or a list of parts.
type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func flattenMessages(in []wireMessage) ([]ChatMessage, error) {
	out := make([]ChatMessage, len(in))
	for i, m := range in {
		out[i].Role = m.Role
		if len(m.Content) == 0 || string(m.Content) == "null" {
			continue
		}
		if m.Content[0] == '"' {
			if err := json.Unmarshal(m.Content, &out[i].Content); err != nil {
				return nil, fmt.Errorf("messages[%d].content: %w", i, err)
			}
			continue
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		out[i].Content = b.String()
	}
	return out, nil
}

type tokenizeRequest struct {
	Model               string        `json:"model"`
	Prompt              *string       `json:"prompt"`
	Content             *string       `json:"content"` // llama-server's field for the text
	Messages            []wireMessage `json:"messages"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	if !s.knownModel(req.Model) {
		writeUnknownModel(w, req.Model)
		return
	}
	var text string
	switch {
	case req.Prompt != nil:
		text = *req.Prompt
	case req.Content != nil:
		text = *req.Content
	case req.Messages != nil:
		msgs, err := flattenMessages(req.Messages)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error(), "messages")
			return
		}
		text = RenderChat(msgs, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	default:
		writeError(w, http.StatusBadRequest, "either prompt or messages is required", "")
		return
	}
	tokens := Tokenize(text)
	writeJSON(w, http.StatusOK, struct {
		Count       int     `json:"count"`
		MaxModelLen int     `json:"max_model_len"`
		Tokens      []int32 `json:"tokens"`
	}{len(tokens), s.profile.MaxModelLen, tokens})
}

// maxRequestBytes bounds a request body: a max_model_len prompt is a few MB of JSON.
const maxRequestBytes = 64 << 20

func decodeBody(r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxRequestBytes)).Decode(v); err != nil {
		return fmt.Errorf("malformed JSON request body: %v", err)
	}
	return nil
}

// apiError is the OpenAI error object in vLLM's shape.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

var errorTypes = map[int]string{
	http.StatusBadRequest:          "BadRequestError",
	http.StatusUnauthorized:        "AuthenticationError",
	http.StatusNotFound:            "NotFoundError",
	http.StatusInternalServerError: "InternalServerError",
}

func writeError(w http.ResponseWriter, status int, message, param string) {
	e := apiError{Message: message, Type: errorTypes[status], Code: status}
	if param != "" {
		e.Param = &param
	}
	writeJSON(w, status, map[string]apiError{"error": e})
}

func writeUnknownModel(w http.ResponseWriter, model string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", model), "model")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
