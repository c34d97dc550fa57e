package scenarios

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
)

// KindReloadCurve is the step kind of a reload curve: for prompt sizes from from_tokens up
// to to_tokens in log steps, store a prompt, evict it from GPU memory, replay it (a reload)
// and recompute it (the replay's cold twin), so the record holds reload time against
// recompute time by size. Its sizes and the eviction it needs depend on the server (its
// max_model_len and GPU KV pool), so planning expands the step into ordinary steps once
// those are known: at preflight, or at plan time when the scenario states both (package
// plan).
const KindReloadCurve = "reload-curve"

// Defaults of a reload-curve step.
const (
	DefaultCurveFromTokens = 1024
	DefaultCurveFactor     = 2.0
	// MaxCurvePoints bounds a curve's sizes.
	MaxCurvePoints = 64
)

// CurveStep holds the fields of a [[step]] with kind = "reload-curve"; they sit directly in
// the [[step]] table.
type CurveStep struct {
	// FromTokens is the smallest prompt (default 1024).
	FromTokens int `toml:"from_tokens" json:"from_tokens,omitempty"`
	// ToTokens is the largest prompt: a number, or "max_model_len" (the default) for the
	// server's, less max_tokens and a counting margin.
	ToTokens CurveTop `toml:"to_tokens" json:"to_tokens,omitzero"`
	// Factor is the ratio of one size to the one before it (default 2).
	Factor float64 `toml:"factor" json:"factor,omitempty"`
}

// CurveTop is a curve's largest size: a number of tokens, or the server's max_model_len.
type CurveTop struct {
	Tokens      int
	MaxModelLen bool
}

// UnmarshalTOML implements toml.Unmarshaler.
func (c *CurveTop) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		*c = CurveTop{Tokens: int(v)}
	case string:
		if v != "max_model_len" {
			return fmt.Errorf("want a number of tokens or \"max_model_len\", got %q", v)
		}
		*c = CurveTop{MaxModelLen: true}
	default:
		return fmt.Errorf("want a number of tokens or \"max_model_len\", got %T", v)
	}
	return nil
}

func (c CurveTop) MarshalJSON() ([]byte, error) {
	if c.MaxModelLen {
		return []byte(`"max_model_len"`), nil
	}
	return []byte(strconv.Itoa(c.Tokens)), nil
}

func (c *CurveTop) UnmarshalJSON(b []byte) error {
	if string(b) == `"max_model_len"` {
		*c = CurveTop{MaxModelLen: true}
		return nil
	}
	return json.Unmarshal(b, &c.Tokens)
}

// IsZero reports an unset top (omitzero).
func (c CurveTop) IsZero() bool { return c == CurveTop{} }

// IsCurve reports whether st is a reload-curve step not yet expanded.
func (st *Step) IsCurve() bool { return st.Kind == KindReloadCurve }

// CurvePoint marks a step made by expanding a reload curve: the curve's id and the size of
// the point's prompt.
type CurvePoint struct {
	Curve  string `json:"curve"`
	Tokens int    `json:"tokens"`
}

// CurveClass is the size class of a curve point's prompt of tokens: tokens rounded to the
// nearest power of two (on a log scale), written in k from 1024 up ("256k") and in tokens
// below ("512"). It names the point's steps, so a curve's steps carry the same names on
// every server although the exact sizes (which the record keeps) follow max_model_len.
func CurveClass(tokens int) string {
	p := 1 << max(0, int(math.Round(math.Log2(float64(max(tokens, 1))))))
	if p >= 1024 {
		return strconv.Itoa(p/1024) + "k"
	}
	return strconv.Itoa(p)
}

// CurvePointNames names the sequence steps of curve id's points of sizes (ascending):
// "<id>_<class>" (CurveClass), and a point whose class an earlier point of the curve took
// gets "_2", "_3", ... after it. A point's replay step is its name and "_replay".
func CurvePointNames(id string, sizes []int) []string {
	names := make([]string, len(sizes))
	seen := map[string]int{}
	for i, size := range sizes {
		class := CurveClass(size)
		seen[class]++
		names[i] = id + "_" + class
		if n := seen[class]; n > 1 {
			names[i] += "_" + strconv.Itoa(n)
		}
	}
	return names
}

// StableStepID is the name step id has under the naming by size class: kvbench named a
// curve point's steps by its exact size before ("curve_261604", "curve_261604_replay"),
// and those map to its class ("curve_256k", "curve_256k_replay"); every other id is
// itself. Readers match steps across runs, and claims to steps, by it.
func (s *Scenario) StableStepID(id string) string {
	if s == nil {
		return id
	}
	for _, c := range s.Curves {
		tokens := make([]int, len(c.Points))
		for i, p := range c.Points {
			tokens[i] = p.Tokens
		}
		names := CurvePointNames(c.ID, tokens)
		for i, p := range c.Points {
			switch id {
			case p.Sequence:
				return names[i]
			case p.Replay:
				return names[i] + "_replay"
			}
		}
	}
	for _, c := range s.Curves { // an old name this run's curve did not plan (a claim's)
		rest, ok := strings.CutPrefix(id, c.ID+"_")
		digits, replay := strings.CutSuffix(rest, "_replay")
		if n, err := strconv.Atoi(digits); ok && err == nil && n > 0 && strconv.Itoa(n) == digits {
			if replay {
				return c.ID + "_" + CurveClass(n) + "_replay"
			}
			return c.ID + "_" + CurveClass(n)
		}
	}
	return id
}

// Curve is the record's type (see there).
type Curve = record.Curve

// CurveSteps is the record's type (see there).
type CurveSteps = record.CurveSteps

// curveDefaults fills reload-curve step i's unset fields; a concurrency set to 0 stays 0,
// for validateCurve to refuse.
func (s *Scenario) curveDefaults(i int, st *Step) {
	if st.FromTokens == 0 {
		st.FromTokens = DefaultCurveFromTokens
	}
	if st.ToTokens.IsZero() {
		st.ToTokens.MaxModelLen = true
	}
	if st.Factor == 0 {
		st.Factor = DefaultCurveFactor
	}
	if st.Concurrency == 0 && !s.defined(fmt.Sprintf("step[%d].concurrency", i)) {
		st.Concurrency = 1
	}
}

// HasCurves reports whether s has reload-curve steps not yet expanded.
func (s *Scenario) HasCurves() bool {
	for i := range s.Steps {
		if s.Steps[i].IsCurve() {
			return true
		}
	}
	return false
}
