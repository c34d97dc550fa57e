package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// defaultCompletionTokens is max_tokens when a completions request gives none, as in
// vLLM's (and OpenAI's) completions API.
const defaultCompletionTokens = 16

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens   *int     `json:"max_tokens"`
	Temperature *float64 `json:"temperature"` // accepted, ignored: output is deterministic
	IgnoreEOS   bool     `json:"ignore_eos"`
	MinTokens   *int     `json:"min_tokens"`
	// ReturnCachedTokensDetails is SGLang's ask for the cached tokens per tier (sglext).
	ReturnCachedTokensDetails bool `json:"return_cached_tokens_details"`
	// CacheSalt and ReturnTokenIDs work as for chat (vLLM's fields); TensorRT-LLM takes no
	// cache_salt on completions.
	CacheSalt      *string `json:"cache_salt"`
	ReturnTokenIDs bool    `json:"return_token_ids"`
}

// completionPrompt reads a completions prompt: a string (tokenized as it is, no template
// and no added tokens), a list of token ids (taken as they are), or a list holding one of
// those. It returns the tokens, or an error message for a 400.
func completionPrompt(raw json.RawMessage) ([]int32, string) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		if text == "" {
			return nil, "prompt must not be empty"
		}
		return Tokenize(text), ""
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return nil, "prompt must not be empty"
		}
		tokens := make([]int32, len(ids))
		for i, id := range ids {
			if id < 0 || id >= VocabSize {
				return nil, fmt.Sprintf("Token id %d is out of vocabulary (%d tokens)", id, VocabSize)
			}
			tokens[i] = int32(id)
		}
		return tokens, ""
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(raw, &batch); err == nil && len(batch) > 0 {
		switch first := batch[0]; {
		case len(first) > 0 && (first[0] == '-' || first[0] >= '0' && first[0] <= '9'):
			return nil, fmt.Sprintf("token ids must be integers in [0, %d)", VocabSize)
		case len(batch) > 1:
			return nil, fmt.Sprintf("%d prompts in one request: the simulator serves one prompt per request", len(batch))
		case len(first) > 0 && (first[0] == '[' || first[0] == '"'):
			return completionPrompt(first)
		}
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, "prompt is required"
	}
	return nil, "prompt must be a string, a list of token ids, or a list of one of those"
}

// handleCompletions serves vLLM's OpenAI completions endpoint on the same engine as chat:
// the prompt's tokens go to a replica's KV engine as they are, so a token-id prompt reaches
// the prefix cache exactly as sent.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	if !s.passFaults(w, r) {
		return
	}
	var req completionRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	if !s.knownModel(req.Model) {
		writeUnknownModel(w, req.Model)
		return
	}
	prompt, problem := completionPrompt(req.Prompt)
	if problem != "" {
		writeError(w, http.StatusBadRequest, problem, "prompt")
		return
	}
	maxTokens := defaultCompletionTokens
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if req.CacheSalt != nil && s.profile.Dialect == DialectTRTLLM {
		// trtllm-serve's CompletionRequest has no cache_salt and forbids unknown fields.
		writeError(w, http.StatusBadRequest, "cache_salt: Extra inputs are not permitted", "cache_salt")
		return
	}
	salt, ok := cacheSalt(w, req.CacheSalt)
	if !ok {
		return
	}
	g, ok := s.startGeneration(w, r, generationRequest{
		arrival:   arrival,
		prompt:    prompt,
		promptIn:  "prompt",
		maxTokens: maxTokens,
		minTokens: req.MinTokens,
		ignoreEOS: req.IgnoreEOS,
		idPrefix:  "cmpl-",
		cacheSalt: salt,
	})
	if !ok {
		return
	}
	g.cachedDetails = req.ReturnCachedTokensDetails
	g.tokenIDs = req.ReturnTokenIDs
	if req.Stream {
		g.streamText(r.Context(), w, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		g.completeText(r.Context(), w)
	}
}

// textChoice is a completions choice; its text carries every generated token (a completion
// has no reasoning field).
type textChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
	TokenIDs     []int32 `json:"token_ids,omitempty"`
}

// streamText streams a completion as vLLM does: one text_completion chunk per token, the
// usage chunk (choices empty) when asked for, then [DONE]. The stream faults apply.
func (g *generation) streamText(ctx context.Context, w http.ResponseWriter, includeUsage bool) {
	streamEvents(ctx, g, w, includeUsage, "text_completion", func(i int, last bool) [][]textChoice {
		choice := textChoice{Text: outputToken(g.seq.OutputDigest(), i), TokenIDs: g.tokenIDsAt(i)}
		if last {
			reason := string(g.plan.finish)
			choice.FinishReason = &reason
		}
		return [][]textChoice{{choice}}
	})
}

// completeText answers a non-streaming completion once its last token is due.
func (g *generation) completeText(ctx context.Context, w http.ResponseWriter) {
	var text strings.Builder
	var ids []int32
	err := g.run(ctx, func(i int, _ bool) error {
		text.WriteString(outputToken(g.seq.OutputDigest(), i))
		ids = append(ids, g.tokenIDsAt(i)...)
		return nil
	})
	if err != nil {
		g.engine.Finish(g.seq, FinishAbort)
		return
	}
	finish := string(g.plan.finish)
	writeJSON(w, http.StatusOK, streamChunk[textChoice]{ // a whole text completion has a chunk's fields
		ID:      g.id,
		Object:  "text_completion",
		Created: time.Now().Unix(),
		Model:   g.server.profile.ServedModelName,
		Choices: []textChoice{{Text: text.String(), FinishReason: &finish, TokenIDs: ids}},
		Usage:   g.usage(),
		SGLExt:  g.sglext(),
	})
}
