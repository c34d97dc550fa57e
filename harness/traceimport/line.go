package traceimport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/prompts"
)

// Errors a log line can give; each comes wrapped in a *trace.FormatError naming file and line.
var (
	ErrNotRequest   = errors.New("not an OpenAI request")
	ErrBadTimestamp = errors.New("bad timestamp")
)

// logged is one line of the log as the import uses it. Its text lives only as long as the
// line's batch: it goes to the tokenizer and nowhere else.
type logged struct {
	model string
	chat  []prompts.Message // a chat request; nil for a completions one
	text  string            // a completions prompt given as text
	ids   []int             // a completions prompt given as token ids: no tokenizer run
	// approximate: tools, tool calls or non-text parts the tokenizer is not given.
	approximate bool
	// at is the logged arrival (ns since the epoch, or since the log's own origin for a
	// number); stamp says which kind: "" (none), "ms" or "rfc3339".
	at    int64
	stamp string
	// output is the output length; outputFrom says from which field ("usage", "limit", "").
	output     int
	outputFrom string
}

type wireBody struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Tools               json.RawMessage `json:"tools"`
	Usage               *wireUsage      `json:"usage"`
}

// wireLine is a request body, or an OpenAI Batch API line ({custom_id, method, url, body})
// optionally carrying its Batch output's response.
type wireLine struct {
	wireBody
	CustomID  *string         `json:"custom_id"`
	Method    string          `json:"method"`
	URL       string          `json:"url"`
	Body      *wireBody       `json:"body"`
	Timestamp json.RawMessage `json:"timestamp"`
	Response  *struct {
		Body struct {
			Usage *wireUsage `json:"usage"`
		} `json:"body"`
	} `json:"response"`
}

type wireUsage struct {
	CompletionTokens *int `json:"completion_tokens"`
}

type wireMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

// batchURLs are the Batch API endpoints whose bodies are prompts.
var batchURLs = []string{"/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions"}

// parseLine reads one non-blank log line.
func parseLine(b []byte) (logged, error) {
	var w wireLine
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return logged{}, trace.ErrNotJSON
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return logged{}, fmt.Errorf("%w: %v", ErrNotRequest, err)
	}
	body := w.wireBody
	if w.CustomID != nil || w.Body != nil {
		if w.Body == nil {
			return logged{}, fmt.Errorf("%w: a Batch API line without a body", ErrNotRequest)
		}
		if w.Method != "" && !strings.EqualFold(w.Method, "POST") {
			return logged{}, fmt.Errorf("%w: a Batch API line with method %q, not POST", ErrNotRequest, w.Method)
		}
		if w.URL != "" && !slices.Contains(batchURLs, w.URL) {
			return logged{}, fmt.Errorf("%w: a Batch API line for %q (only chat completions and completions carry prompts)", ErrNotRequest, w.URL)
		}
		body = *w.Body
	}
	var l logged
	l.model = body.Model
	hasPrompt := len(body.Prompt) > 0 && !bytes.Equal(body.Prompt, []byte("null"))
	switch {
	case body.Messages != nil && hasPrompt:
		return logged{}, fmt.Errorf("%w: both messages and prompt", ErrNotRequest)
	case body.Messages != nil:
		if len(body.Messages) == 0 {
			return logged{}, fmt.Errorf("%w: messages is empty", ErrNotRequest)
		}
		msgs, approx, err := flatten(body.Messages)
		if err != nil {
			return logged{}, err
		}
		l.chat, l.approximate = msgs, approx || hasJSON(body.Tools)
	case hasPrompt:
		if err := l.readPrompt(body.Prompt); err != nil {
			return logged{}, err
		}
	default:
		return logged{}, fmt.Errorf("%w: no messages or prompt", ErrNotRequest)
	}
	if err := l.readOutput(body, w); err != nil {
		return logged{}, err
	}
	return l, l.readTimestamp(w.Timestamp)
}

// flatten turns chat messages into what the tokenizer is sent: a string content as it is,
// a list of parts as its text parts joined by newlines (as vLLM joins them for a string
// template). Tool calls and non-text parts are not sent, which the report counts.
func flatten(in []wireMessage) ([]prompts.Message, bool, error) {
	out := make([]prompts.Message, len(in))
	approx := false
	for i, m := range in {
		if m.Role == "" {
			return nil, false, fmt.Errorf("%w: message %d has no role", ErrNotRequest, i+1)
		}
		out[i].Role = m.Role
		approx = approx || hasJSON(m.ToolCalls)
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) == 0 || bytes.Equal(c, []byte("null")):
		case c[0] == '"':
			if err := json.Unmarshal(c, &out[i].Content); err != nil {
				return nil, false, fmt.Errorf("%w: message %d: %v", ErrNotRequest, i+1, err)
			}
		case c[0] == '[':
			var parts []struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			}
			if err := json.Unmarshal(c, &parts); err != nil {
				return nil, false, fmt.Errorf("%w: message %d: content: %v", ErrNotRequest, i+1, err)
			}
			var texts []string
			for _, p := range parts {
				if p.Type == "text" && p.Text != nil {
					texts = append(texts, *p.Text)
				} else {
					approx = true
				}
			}
			out[i].Content = strings.Join(texts, "\n")
		default:
			return nil, false, fmt.Errorf("%w: message %d: content is neither text nor a list of parts", ErrNotRequest, i+1)
		}
	}
	return out, approx, nil
}

// readPrompt reads a completions prompt: a string, token ids, or a list of one of either
// (a list of several is a batch of requests, which one log line is not).
func (l *logged) readPrompt(raw json.RawMessage) error {
	if err := json.Unmarshal(raw, &l.text); err == nil {
		return nil
	}
	if err := json.Unmarshal(raw, &l.ids); err == nil {
		if len(l.ids) == 0 {
			return fmt.Errorf("%w: prompt is empty", ErrNotRequest)
		}
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || len(list) != 1 {
		return fmt.Errorf("%w: prompt is neither text, token ids nor a list of one of them", ErrNotRequest)
	}
	return l.readPrompt(list[0])
}

// readOutput takes the output length from the response's usage, else the request's limit.
func (l *logged) readOutput(body wireBody, w wireLine) error {
	var usage *wireUsage
	switch {
	case w.Response != nil && w.Response.Body.Usage != nil:
		usage = w.Response.Body.Usage
	case body.Usage != nil:
		usage = body.Usage
	case w.Usage != nil:
		usage = w.Usage
	}
	var n *int
	switch {
	case usage != nil && usage.CompletionTokens != nil:
		n, l.outputFrom = usage.CompletionTokens, "usage"
	case body.MaxCompletionTokens != nil:
		n, l.outputFrom = body.MaxCompletionTokens, "limit"
	case body.MaxTokens != nil:
		n, l.outputFrom = body.MaxTokens, "limit"
	default:
		return nil
	}
	if *n < 0 || *n > trace.MaxLengthTokens {
		return fmt.Errorf("%w: output length %d", trace.ErrBadValue, *n)
	}
	l.output = *n
	return nil
}

// readTimestamp reads the optional timestamp: a number of ms, or an RFC 3339 time.
func (l *logged) readTimestamp(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("%w: %v", ErrBadTimestamp, err)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("%w: %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05.123Z) nor a number of ms", ErrBadTimestamp, s)
		}
		if t.Year() < 1970 || t.Year() > 2261 { // where ns since the epoch fit an int64
			return fmt.Errorf("%w: %q is outside 1970 to 2261", ErrBadTimestamp, s)
		}
		l.at, l.stamp = t.UnixNano(), "rfc3339"
		return nil
	}
	var ms float64
	if err := json.Unmarshal(raw, &ms); err != nil || ms < 0 || math.IsInf(ms, 0) || ms > float64(math.MaxInt64)/1e6 {
		return fmt.Errorf("%w: %s is not a non-negative number of ms nor an RFC 3339 time", ErrBadTimestamp, raw)
	}
	l.at, l.stamp = int64(ms*1e6), "ms"
	return nil
}

func hasJSON(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) && !bytes.Equal(raw, []byte("[]"))
}
