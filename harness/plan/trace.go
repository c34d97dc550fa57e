package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/scenarios"
)

// TracePlan is what a trace step will send, read from its trace before anything is sent:
// the window's requests, how many were dropped, their tokens, and how the prompts go on the
// wire. Reading it checks the window's every line, so a bad trace stops the run before it
// starts, with the file and line.
type TracePlan struct {
	// File is the trace as read; NamedBy says who named it ("scenario" or "command line").
	File    string `json:"file"`
	NamedBy string `json:"named_by"`
	// SHA256 is the whole file's.
	SHA256      string `json:"sha256"`
	BlockTokens int    `json:"block_tokens"`
	// Format is the trace's format and the fields the window's lines carried (a format
	// without prefix information has no ideal).
	Format   *trace.Info  `json:"trace_format"`
	Window   trace.Window `json:"window"`
	Requests int          `json:"requests"`
	// Dropped counts the window's requests over max_input_tokens.
	Dropped      int   `json:"dropped_requests"`
	PromptTokens int64 `json:"prompt_tokens"`
	// OutputTokens is what the requests ask for: max(output_length, 1) each (a completion
	// generates at least one token).
	OutputTokens int64 `json:"output_tokens"`
	// LongestRequestTokens is the largest input_length plus the output it asks for.
	LongestRequestTokens int `json:"longest_request_tokens"`
	// SpanSeconds is the trace time from the first request kept to the last; an open loop
	// replays it in SpanSeconds x time_scale.
	SpanSeconds float64 `json:"span_seconds"`
	// PromptForm is how the prompts go on the wire: token_ids or text (the step's "auto"
	// resolved for the engine).
	PromptForm string `json:"prompt_form"`
	// First is the trace time of the window's first request (of every shard: a shard's
	// open loop counts from it, so each request leaves at its time in the window).
	First time.Duration `json:"-"`
	// SampleIDs are the first distinct hash ids of the window, the blocks preflight measures
	// a text prompt form on.
	SampleIDs []uint64 `json:"-"`
}

// sampleBlocks is how many blocks a text prompt form is measured on.
const sampleBlocks = 16

// TraceWindow is the window a trace step replays.
func TraceWindow(st *scenarios.Step) trace.Window {
	return trace.Window{Start: st.Start.Duration, Duration: st.Duration.Duration, Requests: st.Requests, MaxInputTokens: st.MaxInputTokens, Shard: st.Shard}
}

// OutputTokens is what a trace request asks for: its output_length, at least 1.
func OutputTokens(r *trace.Request) int { return max(r.OutputLength, 1) }

// PromptForm resolves a trace step's prompt form for the engine: "auto" is token ids unless
// the engine's completions endpoint takes none.
func PromptForm(st *scenarios.Step, def *engine.Definition) string {
	if st.PromptForm != scenarios.PromptFormAuto {
		return st.PromptForm
	}
	if def.TextPromptsOnly {
		return scenarios.PromptFormText
	}
	return scenarios.PromptFormTokenIDs
}

// OpenTrace opens a trace step's window for reading: the requests it keeps (Select), the
// file to close, and the file's sha256 once read to its end (call sum after the selection's
// end: it reads the rest of the file).
func OpenTrace(st *scenarios.Step) (sel *trace.Selection, closeFile func() error, sum func() (string, error), err error) {
	f, err := st.Source.Open()
	if err != nil {
		return nil, nil, nil, err
	}
	h := sha256.New()
	tee := io.TeeReader(f, h)
	r, err := trace.NewFormatReader(tee, st.Source.Name(), trace.Format(st.Format), st.BlockTokens)
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	sel = trace.Select(r, TraceWindow(st))
	sum = func() (string, error) {
		if _, err := io.Copy(io.Discard, tee); err != nil {
			return "", fmt.Errorf("%s: %w", st.Source.Name(), err)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	return sel, f.Close, sum, nil
}

// ScanTrace reads trace step st's window to its end and plans it. A bad trace, an empty
// window or a file it may not read is an error naming the scenario's line and the trace's.
func ScanTrace(sc *scenarios.Scenario, i int, def *engine.Definition) (*TracePlan, error) {
	st := &sc.Steps[i]
	fail := func(err error) error {
		key := fmt.Sprintf("step[%d].file", i)
		return &ScenarioError{Position: sc.Position(key), Key: key, Err: err}
	}
	sel, closeFile, sum, err := OpenTrace(st)
	if err != nil {
		return nil, fail(err)
	}
	defer closeFile()
	p := &TracePlan{File: st.Source.Name(), NamedBy: "scenario", BlockTokens: st.BlockTokens, Window: TraceWindow(st), PromptForm: PromptForm(st, def)}
	if st.Source.NamedByUser() {
		p.NamedBy = "command line"
	}
	seen := map[uint64]bool{}
	var first, last time.Duration
	var req trace.Request
	for {
		err := sel.Next(&req)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fail(err)
		}
		if p.Requests == 0 {
			first = req.Timestamp
		}
		last = req.Timestamp
		p.Requests++
		p.PromptTokens += int64(req.InputLength)
		out := OutputTokens(&req)
		p.OutputTokens += int64(out)
		p.LongestRequestTokens = max(p.LongestRequestTokens, req.InputLength+out)
		for _, id := range req.HashIDs {
			if len(p.SampleIDs) >= sampleBlocks {
				break
			}
			if !seen[id] {
				seen[id] = true
				p.SampleIDs = append(p.SampleIDs, id)
			}
		}
	}
	p.Dropped = sel.Dropped()
	p.First = sel.First()
	if info, ok := sel.Info(); ok {
		p.Format = &info
	}
	p.SpanSeconds = (last - first).Seconds()
	if p.SHA256, err = sum(); err != nil {
		return nil, fail(err)
	}
	return p, nil
}

// Schema is the schema of a plan as kvbench plan --format json prints it.
const Schema = "anvil-serving.kvbench-plan/v1"

// ScenarioError is a scenario that cannot be planned: the scenario's line and key at fault,
// and why (for a trace step's trace, the trace's own file and line when a line breaks the
// format).
type ScenarioError struct {
	Position string
	Key      string
	Err      error
}

func (e *ScenarioError) Error() string { return fmt.Sprintf("%s: %s: %v", e.Position, e.Key, e.Err) }

func (e *ScenarioError) Unwrap() error { return e.Err }

// Place is the scenario's line at fault.
func (e *ScenarioError) Place() string { return e.Position }
