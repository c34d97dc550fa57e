// Package scenarios defines kvbench's TOML scenario format, loads and validates scenario
// files strictly, and embeds the built-in scenarios. The format is documented with a
// commented example in README.md beside this file.
package scenarios

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
)

// Scenario is one benchmark: where to send requests, what the server is expected to be, how
// to build prompts, and the ordered steps whose records prove store, eviction and reload.
type Scenario struct {
	Name        string         `toml:"name" json:"name"`
	Description string         `toml:"description" json:"description,omitempty"`
	Target      Target         `toml:"target" json:"target"`
	Server      Server         `toml:"server" json:"server"`
	Prompt      PromptConfig   `toml:"prompt" json:"prompt"`
	Request     Request        `toml:"request" json:"request"`
	Steps       []Step         `toml:"step" json:"steps"`
	Gates       []Gate         `toml:"gate" json:"gates,omitempty"`
	Probes      []Probe        `toml:"probe" json:"probes,omitempty"`
	Study       Study          `toml:"study" json:"study"`
	Model       Model          `toml:"model" json:"model"`
	Runtime     Runtime        `toml:"runtime" json:"runtime"`
	Topology    map[string]any `toml:"topology" json:"topology,omitempty"`
	Sources     []Source       `toml:"source" json:"sources,omitempty"`
	// Repeat runs the steps this many times on the same server (0 or 1: once); repetition k
	// builds its prompts with seed = prompt.seed + k so every repetition starts cold.
	Repeat int `toml:"repeat" json:"repeat,omitempty"`
	// Curves are the reload curves its reload-curve steps were expanded into (curve.go).
	Curves []Curve `toml:"-" json:"curves,omitempty"`

	// Path is where the scenario came from: a file path, or "builtin:NAME".
	Path  string         `toml:"-" json:"path"`
	lines map[string]int // key path ("step[1].concurrency") -> line, for errors
}

// Target is the server under test. Command-line flags override these fields.
type Target struct {
	// Endpoint is the OpenAI-compatible base URL, ending in /v1.
	Endpoint string `toml:"endpoint" json:"endpoint"`
	// Metrics are the Prometheus /metrics URLs; counters are summed across them.
	// Empty means the endpoint's server root + /metrics.
	Metrics []string `toml:"metrics" json:"metrics"`
	// Model is the served model name; empty means the first model /v1/models lists.
	Model string `toml:"model" json:"model"`
	// APIKeyEnv names the environment variable that holds the API key; the key itself never
	// appears in a file or a record.
	APIKeyEnv string `toml:"api_key_env" json:"api_key_env,omitempty"`
	// Backend names the engine family (vllm by default, lmcache, llamacpp): its metric names,
	// KV topology, tokenize dialect and evidence (see harness/engine).
	Backend string `toml:"backend" json:"backend"`
	// MetricNames overrides the source metric of kvbench counters, e.g.
	// external_prefix_hits = "myfork:ext_hits_total".
	MetricNames map[string]string `toml:"metric_names" json:"metric_names,omitempty"`
	// SampleInterval is how often the KV usage and running gauges are sampled during a request.
	SampleInterval Duration `toml:"sample_interval" json:"sample_interval"`
	// IdleTimeout bounds the wait for the server to have no running or waiting requests.
	IdleTimeout Duration `toml:"idle_timeout" json:"idle_timeout"`
}

// MarshalJSON writes the target with the credentials of its URLs redacted (user info,
// secret query values): a scenario lands in records and plans that are shared.
func (t Target) MarshalJSON() ([]byte, error) {
	type plain Target // without this method
	p := plain(t)
	p.Endpoint = redact.URL(t.Endpoint)
	if t.Metrics != nil {
		p.Metrics = make([]string, len(t.Metrics))
		for i, m := range t.Metrics {
			p.Metrics[i] = redact.URL(m)
		}
	}
	return json.Marshal(p)
}

// Server is the expected server setup, used for the validity math before and after a run.
type Server struct {
	// GPUKVTokens is the GPU KV pool in tokens, or "server" to read num_gpu_blocks x block_size
	// from vllm:cache_config_info.
	GPUKVTokens AutoInt `toml:"gpu_kv_tokens" json:"gpu_kv_tokens"`
	BlockSize   AutoInt `toml:"block_size" json:"block_size"`
	MaxModelLen AutoInt `toml:"max_model_len" json:"max_model_len"`
	// CPUOffloadGiB is the CPU offload tier's size (vLLM's --kv-offloading-size).
	CPUOffloadGiB float64 `toml:"cpu_offload_gib" json:"cpu_offload_gib"`
	// StoreBytesPerToken is what one computed token takes in the CPU tier; 0 = unknown
	// (measured from the store counters during a run).
	StoreBytesPerToken float64 `toml:"store_bytes_per_token" json:"store_bytes_per_token,omitempty"`
	// LoadBytesPerToken is what a reload moves per hit token; 0 = unknown or as stored.
	LoadBytesPerToken float64 `toml:"load_bytes_per_token" json:"load_bytes_per_token,omitempty"`
	// HostLinkGBps is the bandwidth of one GPU's link to host memory, in GB/s (10^9 bytes
	// per second, one direction; PCIe 5.0 x16 is about 63): a reload's achieved bandwidth is
	// reported as a share of it. 0 = not stated.
	HostLinkGBps float64 `toml:"host_link_gbps" json:"host_link_gbps,omitempty"`
}

// PromptConfig drives the prompt constructor.
type PromptConfig struct {
	Seed int64 `toml:"seed" json:"seed"`
	// Salt gives the run fresh bytes of the same shapes (see prompts.Config.Salt): a server
	// whose caches still hold an earlier run's prompts holds nothing of these beyond the
	// shared prefix. "random" draws a
	// new salt when the run starts (ResolveSalt); the record keeps the one drawn. kvbench
	// compare compares runs of equal shapes whatever their salts.
	Salt               string `toml:"salt" json:"salt,omitempty"`
	SharedPrefixTokens int    `toml:"shared_prefix_tokens" json:"shared_prefix_tokens"`
	TokenCounting      string `toml:"token_counting" json:"token_counting"` // "server" or "estimate"
	Mode               string `toml:"mode" json:"mode"`                     // "shared-prefix" or "nested"
}

// Request holds the defaults of every request.
type Request struct {
	MaxTokens   int      `toml:"max_tokens" json:"max_tokens"`
	Temperature float64  `toml:"temperature" json:"temperature"`
	Timeout     Duration `toml:"timeout" json:"timeout"`
	// IgnoreEOS asks the server for exactly max_tokens output tokens (vLLM, SGLang and the
	// embedded engine honour it), so decode rates do not depend on when the model stops.
	IgnoreEOS bool `toml:"ignore_eos" json:"ignore_eos,omitempty"`
	// MinTokens asks for at least this many output tokens before a stop; 0 sends nothing.
	MinTokens int `toml:"min_tokens" json:"min_tokens,omitempty"`
	// ExtraBody is merged into every request's JSON body as it is, e.g. top_k = 1 or
	// chat_template_kwargs = { enable_thinking = false }; keys kvbench sets are refused.
	ExtraBody map[string]any `toml:"extra_body" json:"extra_body,omitempty"`
}

// Step is an ordered group of requests whose id keys its section in the record.
type Step struct {
	ID string `toml:"id" json:"id"`
	// Kind is "" (a sequence, or a replay when Replay is set), "conversation" or "trace".
	Kind string `toml:"kind" json:"kind,omitempty"`
	// Conversation holds a conversation step's fields (users, turns, ...).
	Conversation
	// TraceStep holds a trace step's fields (file, block_tokens, window, time_scale, ...).
	TraceStep
	// CurveStep holds a reload-curve step's fields (from_tokens, to_tokens, factor).
	CurveStep
	// Requests is the request count; it defaults to len(PlannedContextTokens). A trace
	// step's requests ends its window after that many requests (0: no limit).
	Requests int `toml:"requests" json:"requests"`
	// PlannedContextTokens holds one value for all requests or one per request.
	PlannedContextTokens []int `toml:"planned_context_tokens" json:"planned_context_tokens"`
	// Concurrency is the requests in flight at once; on a trace step, setting it makes a
	// closed loop (unset: open loop at the trace's timestamps).
	Concurrency int `toml:"concurrency" json:"concurrency"`
	// Replay sends one earlier request again with the exact same prompt.
	Replay *ReplayRef `toml:"replay" json:"replay,omitempty"`
	// ColdTwin, on a replay step, turns its cold twin (the same prompt sent right after it
	// as a guaranteed miss, to time a recompute of exactly those tokens) off with false; on by
	// default where the engine has a way to force the miss.
	ColdTwin *bool `toml:"cold_twin" json:"cold_twin,omitempty"`
	// CurvePoint marks a step a reload curve was expanded into.
	CurvePoint *CurvePoint `toml:"-" json:"curve_point,omitempty"`
	// MaxTokens overrides the request default for this step.
	MaxTokens int `toml:"max_tokens" json:"max_tokens,omitempty"`
	// IgnoreEOS and MinTokens override the request defaults for this step; ExtraBody's
	// keys are merged over the request's extra_body.
	IgnoreEOS *bool          `toml:"ignore_eos" json:"ignore_eos,omitempty"`
	MinTokens *int           `toml:"min_tokens" json:"min_tokens,omitempty"`
	ExtraBody map[string]any `toml:"extra_body" json:"extra_body,omitempty"`

	// FirstOrdinal is the run-wide prompt index of the step's first request (set by Load).
	FirstOrdinal int `toml:"-" json:"first_ordinal"`
}

// ReplayRef is the record's type (see there).
type ReplayRef = record.ReplayRef

// Gate is the record's type (see there).
type Gate = record.Gate

// Probe is a command run before or after the run; its JSON stdout lands in the record.
type Probe struct {
	Name    string   `toml:"name" json:"name"`
	When    string   `toml:"when" json:"when"` // "before" or "after"
	Command []string `toml:"command" json:"command"`
	Timeout Duration `toml:"timeout" json:"timeout"`
}

// Study says how this run enters a merged study record (kvbench summarize).
type Study struct {
	// Key is the section the run takes in a merged study when Role is "control"
	// (e.g. "offload8_control"); primary runs contribute their step sections directly.
	Key  string `toml:"key" json:"key,omitempty"`
	Role string `toml:"role" json:"role"` // "primary" or "control"
	// Sequence describes the run in words, e.g. "70K, 80K, 100K, then 70K replay".
	Sequence string `toml:"sequence" json:"sequence,omitempty"`
}

// Model, Runtime and Source are free metadata copied into the record: the record's types.
type (
	Model   = record.Model
	Runtime = record.Runtime
	Source  = record.Source
)

// Duration is a time.Duration written as "30s" in TOML and JSON.
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want e.g. \"30s\")", b)
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// AutoInt is an integer, or the string "server" meaning "read it from the server".
type AutoInt struct {
	Value      int
	FromServer bool
}

// UnmarshalTOML implements toml.Unmarshaler.
func (a *AutoInt) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		*a = AutoInt{Value: int(v)}
	case string:
		if v != "server" {
			return fmt.Errorf("want an integer or \"server\", got %q", v)
		}
		*a = AutoInt{FromServer: true}
	default:
		return fmt.Errorf("want an integer or \"server\", got %T", v)
	}
	return nil
}

func (a AutoInt) MarshalJSON() ([]byte, error) {
	if a.FromServer {
		return []byte(`"server"`), nil
	}
	return []byte(strconv.Itoa(a.Value)), nil
}

func (a *AutoInt) UnmarshalJSON(b []byte) error {
	if string(b) == `"server"` {
		*a = AutoInt{FromServer: true}
		return nil
	}
	return json.Unmarshal(b, &a.Value)
}

// Known reports whether the value is set in the scenario (not "server", not 0).
func (a AutoInt) Known() bool { return !a.FromServer && a.Value > 0 }

// PlannedRequest is one request of the run in order, as the runner sends it.
type PlannedRequest struct {
	Step          string `json:"step"`
	IndexInStep   int    `json:"index_in_step"`
	Ordinal       int    `json:"ordinal"` // prompt index: a replay has the original's
	PlannedTokens int    `json:"planned_tokens"`
	Replay        bool   `json:"replay,omitempty"`
}

// StepRequests lists step's requests in order.
func (s *Scenario) StepRequests(step *Step) []PlannedRequest {
	if step.IsConversation() || step.IsTrace() {
		return nil // built turn by turn as the answers arrive, or from the trace as it is read
	}
	if step.IsCurve() {
		return nil // expanded into its points once the server's sizes are known
	}
	if step.Replay != nil {
		src := s.StepByID(step.Replay.Step)
		return []PlannedRequest{{
			Step: step.ID, Ordinal: src.FirstOrdinal + step.Replay.Request,
			PlannedTokens: src.Planned(step.Replay.Request), Replay: true,
		}}
	}
	out := make([]PlannedRequest, step.Requests)
	for i := range out {
		out[i] = PlannedRequest{Step: step.ID, IndexInStep: i, Ordinal: step.FirstOrdinal + i, PlannedTokens: step.Planned(i)}
	}
	return out
}

// Planned returns the planned context tokens of the step's request i.
func (st *Step) Planned(i int) int {
	if len(st.PlannedContextTokens) == 1 {
		return st.PlannedContextTokens[0]
	}
	if i < len(st.PlannedContextTokens) {
		return st.PlannedContextTokens[i]
	}
	return 0
}

// StepByID returns the step with id, or nil.
// MaxTokensFor is the max_tokens of step's requests: the step's own, else the request
// default.
func (s *Scenario) MaxTokensFor(step *Step) int {
	if step != nil && step.MaxTokens > 0 {
		return step.MaxTokens
	}
	return s.Request.MaxTokens
}

// RequestFields are the body fields of a step's requests besides model and messages.
type RequestFields struct {
	MaxTokens   int
	Temperature float64
	IgnoreEOS   bool
	MinTokens   int
	ExtraBody   map[string]any
}

// RequestFor resolves the body fields of step's requests: the step's own, else the
// [request] defaults; extra_body tables are merged key by key, the step's winning.
func (s *Scenario) RequestFor(step *Step) RequestFields {
	f := RequestFields{MaxTokens: s.MaxTokensFor(step), Temperature: s.Request.Temperature,
		IgnoreEOS: s.Request.IgnoreEOS, MinTokens: s.Request.MinTokens, ExtraBody: s.Request.ExtraBody}
	if step == nil {
		return f
	}
	if step.IgnoreEOS != nil {
		f.IgnoreEOS = *step.IgnoreEOS
	}
	if step.MinTokens != nil {
		f.MinTokens = *step.MinTokens
	}
	if len(step.ExtraBody) > 0 {
		merged := make(map[string]any, len(f.ExtraBody)+len(step.ExtraBody))
		maps.Copy(merged, f.ExtraBody)
		maps.Copy(merged, step.ExtraBody)
		f.ExtraBody = merged
	}
	return f
}

// IsHTTPURL reports whether s is an http:// or https:// URL, the only kind of endpoint and
// metrics URL kvbench talks to.
func IsHTTPURL(s string) bool {
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// RepetitionSeed is the prompt seed of repetition k: prompt.seed + k, the same shapes with
// fresh bytes. A server's caches cannot be reset, so the same bytes again would turn the
// cold sequence into cache hits.
func (s *Scenario) RepetitionSeed(k int) int64 { return s.Prompt.Seed + int64(k) }

func (s *Scenario) StepByID(id string) *Step {
	for i := range s.Steps {
		if s.Steps[i].ID == id {
			return &s.Steps[i]
		}
	}
	return nil
}

// Position names where key is defined, as "file:line", or the file alone when unknown.
func (s *Scenario) Position(key string) string {
	if line := s.lines[key]; line > 0 {
		return fmt.Sprintf("%s:%d", s.Path, line)
	}
	return s.Path
}
