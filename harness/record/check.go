package record

import (
	"errors"
	"fmt"
	"math"
)

// ErrImpossible means a record holds a value no measurement gives (a negative duration, rate
// or count): the file was edited or corrupted, and nothing computed from it can be trusted.
var ErrImpossible = errors.New("impossible value")

// Check names the first value of q that kvbench can never have measured, as its JSON path
// ("result.time_to_first_output_ms is -5: ..."), wrapping ErrImpossible; nil when there is
// none. It checks what kvbench measures itself and the counts the client accepts from a
// server (never negative), not the server's counter readings, which are kept as read.
func (q *Request) Check() error {
	var c checker
	c.count("index_in_step", q.IndexInStep)
	c.count("ordinal", q.Ordinal)
	c.count("planned_tokens", q.PlannedTokens)
	p := q.Prompt
	c.count("prompt.tokens", p.Tokens)
	c.count("prompt.count_calls", p.CountCalls)
	c.count("prompt.tolerance_tokens", p.ToleranceTokens)
	c.count("prompt.shared_prefix_tokens", p.SharedPrefixTokens)
	r := q.Result
	c.amount("result.time_to_first_output_ms", r.TimeToFirstOutputMS)
	c.amount("result.time_to_first_visible_token_ms", r.TimeToFirstVisibleTokenMS)
	c.amount("result.end_to_end_ms", r.EndToEndMS)
	c.amount("result.stream_ms", &r.StreamMS)
	c.amount("result.decode_tokens_per_second", r.DecodeTokensPerSecond)
	c.amount("result.effective_prefill_tokens_per_second", r.EffectivePrefillTokensPerSecond)
	c.count("result.output_tokens", r.OutputTokens)
	c.countPtr("result.prompt_tokens", r.PromptTokens)
	c.countPtr("result.cached_prompt_tokens", r.CachedPromptTokens)
	c.countPtr("result.reasoning_tokens", r.ReasoningTokens)
	if d := r.CachedTokensDetails; d != nil {
		c.count("result.cached_tokens_details.device", d.Device)
		c.count("result.cached_tokens_details.host", d.Host)
		c.count("result.cached_tokens_details.storage", d.Storage)
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"generated_chunks", r.GeneratedChunks}, {"batched_chunks", r.BatchedChunks}, {"reasoning_chunks", r.ReasoningChunks},
		{"reasoning_bytes", r.ReasoningBytes}, {"content_chunks", r.ContentChunks}, {"content_bytes", r.ContentBytes}, {"http_status", r.HTTPStatus}} {
		c.count("result."+n.field, n.v)
	}
	if s := r.InterTokenMS; s != nil {
		c.count("result.inter_token_ms.n", s.N)
		for _, v := range []struct {
			field string
			v     float64
		}{{"median", s.Median}, {"p90", s.P90}, {"p99", s.P99}, {"max", s.Max}} {
			c.amount("result.inter_token_ms."+v.field, &v.v)
		}
	}
	if i := q.Isolation; i != nil {
		c.amount("isolation.wait_before_ms", &i.WaitBeforeMS)
		c.amount("isolation.wait_after_ms", &i.WaitAfterMS)
	}
	if t := q.Turn; t != nil {
		c.count("turn.user", t.User)
		c.count("turn.turn", t.Turn)
	}
	return c.err
}

// Check names the first impossible value of the step's own fields and of each request
// ("requests[2].result.end_to_end_ms is -1: ..."); nil when there is none.
func (a *StepArtifact) Check() error {
	var c checker
	c.count("concurrency", a.Concurrency)
	if cc := a.Client; cc != nil {
		c.amount("client.cpu_ms", &cc.CPUMS)
		c.amount("client.cores", &cc.Cores)
		c.amount("client.cpu_ms_per_1k_output_tokens", cc.CPUMSPer1kOutputTokens)
	}
	if c.err != nil {
		return c.err
	}
	for i := range a.Requests {
		if err := a.Requests[i].Check(); err != nil {
			return fmt.Errorf("requests[%d].%w", i, err)
		}
	}
	return nil
}

// checker keeps the first impossible value it is shown.
type checker struct{ err error }

func (c *checker) fail(field, value, why string) {
	if c.err == nil {
		c.err = fmt.Errorf("%s is %s: %s: %w", field, value, why, ErrImpossible)
	}
}

// amount checks a duration or rate: absent (nil) is fine, a measured one is finite and not
// negative.
func (c *checker) amount(field string, v *float64) {
	switch {
	case v == nil:
	case math.IsNaN(*v) || math.IsInf(*v, 0):
		c.fail(field, fmt.Sprint(*v), "not a number any measurement gives")
	case *v < 0:
		c.fail(field, fmt.Sprint(*v), "no duration, rate or count is negative")
	}
}

func (c *checker) count(field string, v int) {
	if v < 0 {
		c.fail(field, fmt.Sprint(v), "no count is negative")
	}
}

func (c *checker) countPtr(field string, v *int) {
	if v != nil {
		c.count(field, *v)
	}
}
