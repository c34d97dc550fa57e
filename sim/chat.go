package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []wireMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int     `json:"max_tokens"`
	MaxCompletionTokens *int     `json:"max_completion_tokens"`
	Temperature         *float64 `json:"temperature"` // accepted, ignored: output is deterministic
	// IgnoreEOS generates exactly max_tokens tokens; MinTokens keeps a natural stop from
	// ending the output before that many (vLLM's sampling parameters).
	IgnoreEOS bool `json:"ignore_eos"`
	MinTokens *int `json:"min_tokens"`
	// ReturnCachedTokensDetails is SGLang's ask for the cached tokens per tier (sglext).
	ReturnCachedTokensDetails bool `json:"return_cached_tokens_details"`
	// CacheSalt isolates the request's blocks from every other prompt's (vLLM's cache_salt).
	CacheSalt *string `json:"cache_salt"`
	// ReturnTokenIDs adds each chunk's generated token ids (vLLM's return_token_ids).
	ReturnTokenIDs bool `json:"return_token_ids"`
}

// outputPlan is what one request generates: total tokens, of which the first reasoning
// ones are reasoning, ending with finish.
type outputPlan struct {
	total     int
	reasoning int
	finish    FinishReason
}

// planOutput draws the natural reasoning and answer lengths from the prompt's digest, so a
// replayed prompt produces the same output, and cuts them at maxTokens. minTokens extends a
// shorter natural output with answer tokens; ignoreEOS runs it to maxTokens.
func planOutput(p Profile, digest uint64, maxTokens, minTokens int, ignoreEOS bool) outputPlan {
	reasoning := drawRange(p.ReasoningTokensMin, p.ReasoningTokensMax, mix64(digest^p.OutputSeed^0x5245))
	answer := drawRange(p.AnswerTokensMin, p.AnswerTokensMax, mix64(digest^p.OutputSeed^0x414e))
	plan := outputPlan{total: max(reasoning+answer, minTokens), reasoning: reasoning, finish: FinishStop}
	if ignoreEOS || plan.total > maxTokens {
		plan.total, plan.finish = maxTokens, FinishLength
	}
	plan.reasoning = min(plan.reasoning, plan.total)
	return plan
}

func drawRange(lo, hi int, h uint64) int {
	if hi <= lo {
		return lo
	}
	return lo + int(h%uint64(hi-lo+1))
}

// outputWords are the simulator's output vocabulary: each is one token under the
// tokenizer rule when preceded by a space.
var outputWords = strings.Fields(`the KV cache holds blocks of tokens and the server keeps
	them on the GPU until memory runs short then older blocks move to host RAM where a later
	request with the same prefix can load them back instead of paying for prefill again so
	long prompts return fast when offload works and slow when it does not`)

func outputToken(digest uint64, i int) string {
	return " " + outputWords[outputWord(digest, i)]
}

// errStreamCut ends a stream on the cut_stream_after_tokens fault.
var errStreamCut = errors.New("stream cut by fault injection")

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	if !s.passFaults(w, r) {
		return
	}
	var req chatRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	if !s.knownModel(req.Model) {
		writeUnknownModel(w, req.Model)
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "messages must not be empty", "messages")
		return
	}
	msgs, err := flattenMessages(req.Messages)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "messages")
		return
	}
	maxTokens := s.profile.DefaultMaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	salt, ok := cacheSalt(w, req.CacheSalt)
	if !ok {
		return
	}
	g, ok := s.startGeneration(w, r, generationRequest{
		arrival:   arrival,
		prompt:    Tokenize(RenderChat(msgs, true)),
		promptIn:  "messages",
		maxTokens: maxTokens,
		minTokens: req.MinTokens,
		ignoreEOS: req.IgnoreEOS,
		idPrefix:  "chatcmpl-",
		cacheSalt: salt,
	})
	if !ok {
		return
	}
	g.cachedDetails = req.ReturnCachedTokensDetails
	g.tokenIDs = req.ReturnTokenIDs
	if req.Stream {
		g.stream(r.Context(), w, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		g.complete(r.Context(), w)
	}
}

// passFaults numbers a generation request (chat or completions) and applies the request
// faults; it returns false when a fault answered the request.
func (s *Server) passFaults(w http.ResponseWriter, r *http.Request) bool {
	p := s.profile
	n := s.chatRequests.Add(1)
	if p.RestartAtRequest > 0 && n == int64(p.RestartAtRequest) {
		s.replicas.restart()
		s.markStarted()
	}
	if p.FailEveryNthRequest > 0 && n%int64(p.FailEveryNthRequest) == 0 {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("simulated failure of generation request %d", n), "")
		return false
	}
	if p.HangEveryNthRequest > 0 && n%int64(p.HangEveryNthRequest) == 0 {
		hang(r)
		return false
	}
	return true
}

// generationRequest is what the chat and completions endpoints hand the engine.
type generationRequest struct {
	arrival   time.Time
	prompt    []int32
	promptIn  string // where the prompt came from, for the context-length error
	maxTokens int
	minTokens *int
	ignoreEOS bool
	idPrefix  string // "chatcmpl-" or "cmpl-"
	cacheSalt string // "" for none
}

// startGeneration checks the sampling limits and the context length, submits the prompt to
// a replica and waits for its admission. It answers the request itself and returns false
// when the request cannot run.
func (s *Server) startGeneration(w http.ResponseWriter, r *http.Request, req generationRequest) (*generation, bool) {
	p := s.profile
	maxTokens := req.maxTokens
	if maxTokens < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("max_tokens must be at least 1, got %d.", maxTokens), "max_tokens")
		return nil, false
	}
	minTokens := 0
	if req.minTokens != nil {
		minTokens = *req.minTokens
	}
	if minTokens < 0 || minTokens > maxTokens {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("min_tokens must be in [0, max_tokens], got %d.", minTokens), "min_tokens")
		return nil, false
	}
	prompt := req.prompt
	if len(prompt)+maxTokens > p.MaxModelLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
			p.MaxModelLen, len(prompt)+maxTokens, len(prompt), req.promptIn, maxTokens, req.promptIn), "")
		return nil, false
	}
	engine := s.replicas.pick(prompt, p.BlockSize)
	seq, err := engine.SubmitWith(prompt, SubmitOptions{CacheSalt: req.cacheSalt})
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return nil, false
	}
	first, err := engine.WaitAdmitted(r.Context(), seq)
	if err != nil {
		engine.Finish(seq, FinishAbort)
		if errors.Is(err, ErrRestarted) {
			writeError(w, http.StatusInternalServerError, "server restarted", "")
		}
		return nil, false
	}
	return &generation{
		server:  s,
		engine:  engine,
		seq:     seq,
		plan:    planOutput(p, seq.Digest, maxTokens, minTokens, req.ignoreEOS),
		first:   first,
		arrival: req.arrival,
		id:      fmt.Sprintf("%s%016x%04x", req.idPrefix, seq.Digest, seq.ID&0xffff),
	}, true
}

// generation is one request's decode, paced on the engine's schedule.
type generation struct {
	server  *Server
	engine  *Engine // the replica serving it
	seq     *Sequence
	plan    outputPlan
	first   PrefillResult
	arrival time.Time
	id      string
	// cachedDetails: the request asked for SGLang's per-tier cached tokens.
	cachedDetails bool
	// tokenIDs: the request asked for the generated token ids (return_token_ids).
	tokenIDs bool
}

// run calls emit for each output token at its due time. It finishes the sequence in the
// engine before emitting the last token, so a client that has seen the end of the output
// finds the running gauge already down. On error the caller aborts the sequence.
func (g *generation) run(ctx context.Context, emit func(i int, last bool) error) error {
	e := g.engine
	timer := time.NewTimer(0)
	defer timer.Stop()
	due := time.Now().Add(g.first.Duration)
	var ttft time.Duration
	var previous time.Time
	for i := 0; i < g.plan.total; {
		if err := sleepUntil(ctx, timer, due); err != nil {
			return err
		}
		if !e.AppendToken(g.seq) { // preempted: wait for readmission, then recompute
			again, err := e.WaitAdmitted(ctx, g.seq)
			if err != nil {
				return err
			}
			due = time.Now().Add(again.Duration)
			continue
		}
		now := time.Now()
		if i == 0 {
			ttft = now.Sub(g.arrival)
		} else {
			e.ObserveInterTokenLatency(now.Sub(previous))
		}
		previous = now
		last := i == g.plan.total-1
		if last {
			e.Finish(g.seq, g.plan.finish)
			e.ObserveLatency(ttft, now.Sub(g.arrival))
		}
		if err := emit(i, last); err != nil {
			return err
		}
		i++
		due = due.Add(e.InterTokenDelay(g.seq))
	}
	return nil
}

// sleepUntil waits for t on a reused timer; a late schedule catches up without waiting.
func sleepUntil(ctx context.Context, timer *time.Timer, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer.Reset(d)
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *generation) usage() *chatUsage {
	u := &chatUsage{
		PromptTokens:     g.seq.PromptTokens(),
		CompletionTokens: g.plan.total,
		TotalTokens:      g.seq.PromptTokens() + g.plan.total,
	}
	if cached := g.first.GPUHitTokens + g.first.ExternalHitTokens; cached > 0 && g.server.profile.EnablePromptTokensDetails {
		u.PromptTokensDetails = &promptTokensDetails{CachedTokens: cached}
	}
	return u
}

type chatUsage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// chatText carries content and the two spellings of reasoning; the profile picks one.
type chatText struct {
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
	Reasoning        *string `json:"reasoning,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

func (g *generation) setReasoning(t *chatText, text string) {
	if g.server.profile.ReasoningField == "reasoning_content" {
		t.ReasoningContent = &text
	} else {
		t.Reasoning = &text
	}
}

type chunkChoice struct {
	Index        int      `json:"index"`
	Delta        chatText `json:"delta"`
	Logprobs     any      `json:"logprobs"`
	FinishReason *string  `json:"finish_reason"`
	// TokenIDs are the chunk's generated token ids when asked for (vLLM's return_token_ids).
	TokenIDs []int32 `json:"token_ids,omitempty"`
}

// streamChunk is one server-sent event of a streamed chat (C = chunkChoice) or text
// (C = textChoice) completion.
type streamChunk[C any] struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []C        `json:"choices"`
	Usage   *chatUsage `json:"usage,omitempty"`
	SGLExt  *sglext    `json:"sglext,omitempty"`
}

// stream streams a chat completion as vLLM does: the role once the first token exists, one
// chat.completion.chunk per token, the usage chunk when asked for, then [DONE].
func (g *generation) stream(ctx context.Context, w http.ResponseWriter, includeUsage bool) {
	streamEvents(ctx, g, w, includeUsage, "chat.completion.chunk", func(i int, last bool) [][]chunkChoice {
		var events [][]chunkChoice
		if i == 0 {
			empty := ""
			events = append(events, []chunkChoice{{Delta: chatText{Role: "assistant", Content: &empty}}})
		}
		var delta chatText
		text := outputToken(g.seq.OutputDigest(), i)
		if i < g.plan.reasoning {
			g.setReasoning(&delta, text)
		} else {
			delta.Content = &text
		}
		choice := chunkChoice{Delta: delta, TokenIDs: g.tokenIDsAt(i)}
		if last {
			reason := string(g.plan.finish)
			choice.FinishReason = &reason
		}
		return append(events, []chunkChoice{choice})
	})
}

// streamEvents streams g as server-sent events of object chunks, the form chat and text
// completions share: events(i, last) are token i's events, the token's own the last of
// them; then the usage event (choices empty) when asked for, and [DONE]. The profile's
// stream faults apply: a malformed event before a token's own, a cut after a token.
func streamEvents[C any](ctx context.Context, g *generation, w http.ResponseWriter, includeUsage bool, object string, events func(i int, last bool) [][]C) {
	p := g.server.profile
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush() // clients see the stream open at once, as with vLLM
	created := time.Now().Unix()
	write := func(choices []C, u *chatUsage) error {
		chunk := streamChunk[C]{ID: g.id, Object: object, Created: created, Model: p.ServedModelName, Choices: choices, Usage: u}
		if u != nil {
			chunk.SGLExt = g.sglext()
		}
		data, err := json.Marshal(chunk)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "data: %s\n\n", data)
		return err
	}
	err := g.run(ctx, func(i int, last bool) error {
		evs := events(i, last)
		for k, choices := range evs {
			if k == len(evs)-1 && p.MalformedSSEAtToken > 0 && i+1 == p.MalformedSSEAtToken {
				if _, err := fmt.Fprintf(w, "data: {\"id\": \"%s\", \"choices\": [\n\n", g.id); err != nil {
					return err
				}
			}
			if err := write(choices, nil); err != nil {
				return err
			}
		}
		if err := rc.Flush(); err != nil {
			return err
		}
		if p.CutStreamAfterTokens > 0 && i+1 == p.CutStreamAfterTokens {
			return errStreamCut
		}
		return nil
	})
	if err != nil {
		// A cut, a server Close or a gone client: drop the connection mid-body so the
		// client sees a broken stream, never a clean end without [DONE].
		g.engine.Finish(g.seq, FinishAbort)
		panic(http.ErrAbortHandler)
	}
	if includeUsage {
		if write([]C{}, g.usage()) != nil {
			return
		}
	}
	if _, err := fmt.Fprint(w, "data: [DONE]\n\n"); err == nil {
		_ = rc.Flush()
	}
}

func (g *generation) complete(ctx context.Context, w http.ResponseWriter) {
	var content, reasoning strings.Builder
	var ids []int32
	err := g.run(ctx, func(i int, _ bool) error {
		if i < g.plan.reasoning {
			reasoning.WriteString(outputToken(g.seq.OutputDigest(), i))
		} else {
			content.WriteString(outputToken(g.seq.OutputDigest(), i))
		}
		ids = append(ids, g.tokenIDsAt(i)...)
		return nil
	})
	if err != nil {
		g.engine.Finish(g.seq, FinishAbort)
		return
	}
	message := chatText{Role: "assistant"}
	if content.Len() > 0 {
		text := content.String()
		message.Content = &text
	}
	if reasoning.Len() > 0 {
		g.setReasoning(&message, reasoning.String())
	}
	finish := string(g.plan.finish)
	choice := map[string]any{
		"index":         0,
		"message":       message,
		"logprobs":      nil,
		"finish_reason": finish,
	}
	if g.tokenIDs {
		choice["token_ids"] = ids
	}
	body := map[string]any{
		"id":      g.id,
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   g.server.profile.ServedModelName,
		"choices": []map[string]any{choice},
		"usage":   g.usage(),
	}
	if x := g.sglext(); x != nil {
		body["sglext"] = x
	}
	writeJSON(w, http.StatusOK, body)
}
