package scenarios

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// kinds is a set of step kinds; a rule on step keys runs on the steps of its kinds.
type kinds uint8

const (
	kSequence kinds = 1 << iota // no kind, no replay
	kReplay                     // no kind, replay set
	kConversation
	kTrace
	kCurve

	kPlain   = kSequence | kReplay
	kAnyStep = kSequence | kReplay | kConversation | kTrace | kCurve
)

// stepKinds is the kind st is checked as; an unknown kind is checked as a sequence or a
// replay (and refused by the kind rule).
func stepKinds(st *Step) kinds {
	switch {
	case st.IsConversation():
		return kConversation
	case st.IsTrace():
		return kTrace
	case st.IsCurve():
		return kCurve
	case st.Replay != nil:
		return kReplay
	}
	return kSequence
}

// rule is one row of the key table: a key of the scenario format and what is checked of it.
// Rows without a check document a key that takes any value of its type. scenarios/README.md
// documents every key of the table, with the words of says (TestRulesMatchReadme).
type rule struct {
	// key is the key path with [] for each array index: "step[].users". A key under
	// step[], gate[] or probe[] is checked once per step, gate or probe.
	key string
	// on are the step kinds the rule runs on (step keys only).
	on kinds
	// excludes are the keys (under the same table) the kinds of on refuse, reported at key.
	excludes []string
	// says are phrases the README's line for the key must hold: its range or choices.
	says []string
	// free marks a table whose keys are the user's own (sent or copied as they are).
	free  bool
	check func(c *checker)
}

// scope is the array a rule's key lies in ("step", "gate", "probe", "source"), or "".
func (r *rule) scope() string {
	if i := strings.Index(r.key, "[]"); i > 0 {
		return r.key[:i]
	}
	return ""
}

// name is the key's last part, under its table: "users" for "step[].users".
func (r *rule) name() string {
	if sc := r.scope(); sc != "" {
		return strings.TrimPrefix(r.key, sc+"[].")
	}
	return r.key
}

// checker is the state of one validation pass: the problems so far and what the rules of
// later keys need from earlier ones (the step ids, the probe names, the planned tokens).
type checker struct {
	s       *Scenario
	ps      []Problem
	i       int    // index of the step, gate or probe checked
	at      string // its key path, "step[2]"; "" at the top
	seen    map[string]int
	probes  map[string]bool
	planned int
}

var (
	stepIDPattern  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	namePattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// validate runs the rules in table order, each on every step, gate or probe of its scope,
// so every problem of the file is reported at once.
func (s *Scenario) validate() []Problem {
	c := &checker{s: s, seen: map[string]int{}, probes: map[string]bool{}}
	for lo := 0; lo < len(rules); {
		hi := lo + 1
		for hi < len(rules) && rules[hi].scope() == rules[lo].scope() {
			hi++
		}
		c.run(rules[lo].scope(), rules[lo:hi])
		lo = hi
	}
	return c.ps
}

// run checks a run of rules of one scope on each element of that scope.
func (c *checker) run(scope string, rs []rule) {
	n := map[string]int{"": 1, "step": len(c.s.Steps), "gate": len(c.s.Gates), "probe": len(c.s.Probes)}[scope]
	for i := range n {
		c.i, c.at = i, ""
		if scope != "" {
			c.at = fmt.Sprintf("%s[%d]", scope, i)
		}
		for _, r := range rs {
			if r.check != nil && (scope != "step" || r.on&stepKinds(c.step()) != 0) {
				r.check(c)
			}
		}
	}
}

func (c *checker) step() *Step   { return &c.s.Steps[c.i] }
func (c *checker) gate() *Gate   { return &c.s.Gates[c.i] }
func (c *checker) probe() *Probe { return &c.s.Probes[c.i] }

// k is the key path of name in the element checked: "step[2].users".
func (c *checker) k(name string) string {
	if c.at == "" {
		return name
	}
	return c.at + "." + name
}

func (c *checker) bad(key, format string, args ...any) {
	c.ps = append(c.ps, Problem{Line: c.s.lineOf(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) oneOf(key, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		c.bad(key, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

func (c *checker) nonNegative(key string, d Duration) {
	if d.Duration < 0 {
		c.bad(key, "must be positive (got %s)", d)
	}
}

func (c *checker) positiveAuto(key string, a AutoInt) {
	if !a.FromServer && a.Value < 0 {
		c.bad(key, "must be positive or \"server\" (got %d)", a.Value)
	}
}

func (c *checker) notNegative(key string, v float64) {
	if v < 0 {
		c.bad(key, "must not be negative")
	}
}

func (c *checker) between(key string, v, lo, hi int) {
	if v < lo || v > hi {
		c.bad(key, "must be between %d and %d (got %d)", lo, hi, v)
	}
}

func (c *checker) minTokens(key string, v, maxTokens int) {
	switch {
	case v < 0:
		c.bad(key, "must not be negative (got %d)", v)
	case maxTokens > 0 && v > maxTokens:
		c.bad(key, "%d is above max_tokens (%d)", v, maxTokens)
	}
}

func (c *checker) extraBody(key string, body map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(body)) {
		if slices.Contains(client.ReservedBodyKeys, k) {
			c.bad(key+"."+k, "kvbench sets %q itself (it may not be overridden: %s)", k, strings.Join(client.ReservedBodyKeys, ", "))
		}
	}
	if _, err := json.Marshal(body); err != nil {
		c.bad(key, "cannot be sent as JSON: %v", err)
	}
}

func (c *checker) scrapeInterval(st *Step) {
	if st.ScrapeInterval.Duration < 10*time.Millisecond {
		c.bad(c.k("scrape_interval"), "must be at least 10ms (got %s)", st.ScrapeInterval)
	}
}

// The keys a step kind takes alone, refused on the others.
var (
	traceKeys        = []string{"file", "format", "block_tokens", "start", "duration", "time_scale", "max_input_tokens", "prompt_form"}
	curveKeys        = []string{"from_tokens", "to_tokens", "factor"}
	conversationKeys = []string{"users", "turns", "turn_tokens", "system_prompt_tokens"}
	timingKeys       = []string{"think_time", "arrival", "ramp"}
)

// traceFormats are the formats a trace step's format key takes, as written.
func traceFormats() []string {
	out := make([]string, len(trace.Formats))
	for i, f := range trace.Formats {
		out[i] = string(f)
	}
	return out
}

func quoted(words ...string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = fmt.Sprintf("%q", w)
	}
	return out
}

func expectable() []string {
	var words []string
	for _, v := range verdict.Expectable {
		words = append(words, string(v))
	}
	return words
}

// rules is the key table, in the order its problems are reported (sorted by line after).
var rules = []rule{
	{key: "name", says: []string{"default: the file name"}, check: checkName},
	{key: "description"},
	{key: "target.idle_timeout", check: func(c *checker) { c.nonNegative("target.idle_timeout", c.s.Target.IdleTimeout) }},
	{key: "request.timeout", check: func(c *checker) { c.nonNegative("request.timeout", c.s.Request.Timeout) }},
	{key: "target.endpoint", check: func(c *checker) {
		if e := c.s.Target.Endpoint; e != "" && !IsHTTPURL(e) {
			c.bad("target.endpoint", "%q is not an http(s) URL", redact.URL(e))
		}
	}},
	{key: "target.metrics", check: func(c *checker) {
		for i, m := range c.s.Target.Metrics {
			if !IsHTTPURL(m) {
				c.bad(fmt.Sprintf("target.metrics[%d]", i), "%q is not an http(s) URL", redact.URL(m))
			}
		}
	}},
	{key: "target.model"},
	{key: "target.api_key_env", check: func(c *checker) {
		if k := c.s.Target.APIKeyEnv; k != "" && !envNamePattern.MatchString(k) {
			c.bad("target.api_key_env", "%q is not an environment variable's name (letters, digits and _, not starting with a digit)", k)
		}
	}},
	{key: "target.backend"}, // checked against the engines when the target is resolved
	{key: "target.metric_names", free: true},
	{key: "target.sample_interval", says: []string{"at least 10ms"}, check: func(c *checker) {
		if c.s.Target.SampleInterval.Duration < 10*time.Millisecond {
			c.bad("target.sample_interval", "must be at least 10ms")
		}
	}},
	{key: "server.gpu_kv_tokens", says: quoted("server"), check: func(c *checker) { c.positiveAuto("server.gpu_kv_tokens", c.s.Server.GPUKVTokens) }},
	{key: "server.block_size", says: quoted("server"), check: func(c *checker) { c.positiveAuto("server.block_size", c.s.Server.BlockSize) }},
	{key: "server.max_model_len", says: quoted("server"), check: func(c *checker) { c.positiveAuto("server.max_model_len", c.s.Server.MaxModelLen) }},
	{key: "server.cpu_offload_gib", check: func(c *checker) { c.notNegative("server.cpu_offload_gib", c.s.Server.CPUOffloadGiB) }},
	{key: "server.store_bytes_per_token", check: func(c *checker) {
		c.notNegative("server.store_bytes_per_token", c.s.Server.StoreBytesPerToken)
	}},
	{key: "server.load_bytes_per_token", check: func(c *checker) {
		c.notNegative("server.load_bytes_per_token", c.s.Server.LoadBytesPerToken)
	}},
	{key: "server.host_link_gbps", says: []string{"0 to 10000"}, check: func(c *checker) {
		if v := c.s.Server.HostLinkGBps; v < 0 || v > 10000 {
			c.bad("server.host_link_gbps", "must be between 0 and 10000 GB/s (got %g)", v)
		}
	}},
	{key: "repeat", says: []string{fmt.Sprintf("at most %d", MaxRepeat)}, check: func(c *checker) {
		if c.s.Repeat < 0 || c.s.Repeat > MaxRepeat {
			c.bad("repeat", "must be between 1 and %d, or 0 for once (got %d)", MaxRepeat, c.s.Repeat)
		}
	}},
	{key: "prompt.seed", check: func(c *checker) {
		if c.s.Prompt.Seed < 0 {
			c.bad("prompt.seed", "must not be negative")
		}
	}},
	{key: "prompt.shared_prefix_tokens", check: func(c *checker) {
		if v := c.s.Prompt.SharedPrefixTokens; v < 0 {
			c.bad("prompt.shared_prefix_tokens", "must not be negative")
		} else if v > MaxPromptTokens {
			c.bad("prompt.shared_prefix_tokens", "%d is above the ceiling of %d tokens per prompt", v, MaxPromptTokens)
		}
	}},
	{key: "prompt.salt", says: quoted("random"), check: func(c *checker) {
		if err := CheckSalt(c.s.Prompt.Salt); err != nil {
			c.bad("prompt.salt", "%v", err)
		}
	}},
	{key: "prompt.token_counting", says: quoted("server", "estimate"), check: func(c *checker) {
		c.oneOf("prompt.token_counting", c.s.Prompt.TokenCounting, "server", "estimate")
	}},
	{key: "prompt.mode", says: quoted("shared-prefix", "nested"), check: func(c *checker) {
		c.oneOf("prompt.mode", c.s.Prompt.Mode, "shared-prefix", "nested")
	}},
	{key: "request.max_tokens", check: func(c *checker) {
		if v := c.s.Request.MaxTokens; v < 1 {
			c.bad("request.max_tokens", "must be at least 1 (got %d)", v)
		} else if v > MaxPromptTokens {
			c.bad("request.max_tokens", "%d is above the ceiling of %d", v, MaxPromptTokens)
		}
	}},
	{key: "request.temperature", check: func(c *checker) {
		if t := c.s.Request.Temperature; t < 0 || math.IsNaN(t) || math.IsInf(t, 0) {
			c.bad("request.temperature", "must be 0 or more (got %g)", t)
		}
	}},
	{key: "request.ignore_eos"},
	{key: "request.min_tokens", check: func(c *checker) {
		c.minTokens("request.min_tokens", c.s.Request.MinTokens, c.s.Request.MaxTokens)
	}},
	{key: "request.extra_body", free: true, check: func(c *checker) { c.extraBody("request.extra_body", c.s.Request.ExtraBody) }},
	{key: "step", check: checkHasSteps},

	// Steps: the rows of each kind run in this order.
	{key: "step[].id", on: kAnyStep, check: checkStepID},
	{key: "step[].kind", on: kConversation, excludes: []string{"requests", "planned_context_tokens", "replay"}, check: func(c *checker) {
		if st := c.step(); st.Replay != nil || len(st.PlannedContextTokens) > 0 || st.Requests != 0 || c.s.defined(c.k("requests")) {
			c.bad(c.k("kind"), "a conversation step builds its prompts from users and turns: drop requests, planned_context_tokens and replay")
		}
	}},
	{key: "step[].concurrency", on: kConversation, excludes: []string{"concurrency"}, check: func(c *checker) {
		if c.s.defined(c.k("concurrency")) {
			c.bad(c.k("concurrency"), "a conversation step runs one request per user at a time: set users instead")
		}
	}},
	{key: "step[].kind", on: kPlain, check: func(c *checker) {
		if st := c.step(); st.Kind != "" {
			c.bad(c.k("kind"), "%q is not a step kind (want %q, %q or %q, or no kind for a sequence or replay)", st.Kind, KindConversation, KindTrace, KindReloadCurve)
		}
	}},
	{key: "step[].file", on: kPlain | kConversation, excludes: traceKeys, check: func(c *checker) {
		if c.step().traceFieldsSet() {
			c.bad(c.k("file"), "file, format, block_tokens, start, duration, time_scale, max_input_tokens and prompt_form need kind = %q", KindTrace)
		}
	}},
	{key: "step[].from_tokens", on: kPlain, excludes: curveKeys, check: func(c *checker) {
		if st := c.step(); st.FromTokens != 0 || !st.ToTokens.IsZero() || st.Factor != 0 {
			c.bad(c.k("from_tokens"), "from_tokens, to_tokens and factor need kind = %q", KindReloadCurve)
		}
	}},
	{key: "step[].cold_twin", on: kSequence, excludes: []string{"cold_twin"}, check: func(c *checker) {
		if c.step().ColdTwin != nil {
			c.bad(c.k("cold_twin"), "only a replay step has a cold twin")
		}
	}},
	{key: "step[].cold_twin", on: kReplay},
	{key: "step[].kind", on: kCurve, excludes: []string{"requests", "planned_context_tokens", "replay"}, check: func(c *checker) {
		if st := c.step(); st.Replay != nil || len(st.PlannedContextTokens) > 0 || st.Requests != 0 || c.s.defined(c.k("requests")) {
			c.bad(c.k("kind"), "a reload-curve step makes its own prompts and replays: drop requests, planned_context_tokens and replay")
		}
	}},
	{key: "step[].concurrency", on: kCurve, says: []string{"concurrency 1"}, check: func(c *checker) {
		if c.step().Concurrency != 1 {
			c.bad(c.k("concurrency"), "a reload curve times isolated requests: concurrency must be 1")
		}
	}},
	{key: "step[].users", on: kPlain | kCurve, excludes: conversationKeys, check: func(c *checker) {
		if st := c.step(); st.Users != 0 || st.Turns != 0 || st.TurnTokens != 0 || st.SystemPromptTokens != 0 {
			c.bad(c.k("users"), "users, turns, turn_tokens and system_prompt_tokens need kind = %q", KindConversation)
		}
	}},
	{key: "step[].concurrency", on: kPlain, says: []string{fmt.Sprintf("1..%d", MaxConcurrency)}, check: func(c *checker) {
		if v := c.step().Concurrency; v < 1 {
			c.bad(c.k("concurrency"), "must be at least 1 (got %d)", v)
		} else if v > MaxConcurrency {
			c.bad(c.k("concurrency"), "%d is above the ceiling of %d", v, MaxConcurrency)
		}
	}},
	{key: "step[].max_tokens", on: kPlain, check: func(c *checker) {
		if v := c.step().MaxTokens; v < 0 {
			c.bad(c.k("max_tokens"), "must not be negative")
		} else if v > MaxPromptTokens {
			c.bad(c.k("max_tokens"), "%d is above the ceiling of %d", v, MaxPromptTokens)
		}
	}},
	{key: "step[].min_tokens", on: kPlain, check: func(c *checker) {
		if st := c.step(); st.MinTokens != nil {
			c.minTokens(c.k("min_tokens"), *st.MinTokens, c.s.MaxTokensFor(st))
		} else if st.MaxTokens > 0 && c.s.Request.MinTokens > st.MaxTokens {
			c.bad(c.k("max_tokens"), "%d is below request.min_tokens (%d)", st.MaxTokens, c.s.Request.MinTokens)
		}
	}},
	{key: "step[].extra_body", on: kPlain, free: true, check: func(c *checker) { c.extraBody(c.k("extra_body"), c.step().ExtraBody) }},
	{key: "step[].ignore_eos", on: kAnyStep &^ kTrace},
	// Taken and sent, but not range-checked on these kinds (nor extra_body's reserved keys):
	// a gap the table makes visible, kept so that no scenario accepted today is refused.
	{key: "step[].max_tokens", on: kConversation | kCurve},
	{key: "step[].min_tokens", on: kConversation | kCurve},
	{key: "step[].extra_body", on: kConversation | kTrace | kCurve, free: true},
	{key: "step[].replay", on: kReplay, excludes: []string{"planned_context_tokens"}, check: func(c *checker) {
		if st := c.step(); len(st.PlannedContextTokens) > 0 || st.Requests > 1 {
			c.bad(c.k("replay"), "a replay step takes its prompt from the replayed request: drop requests and planned_context_tokens")
		}
	}},
	{key: "step[].replay.step", on: kReplay, check: checkReplaySource},
	{key: "step[].replay.request", on: kReplay}, // checked with replay.step
	{key: "step[].requests", on: kSequence, check: func(c *checker) {
		if v := c.step().Requests; v < 1 {
			c.bad(c.k("requests"), "must be at least 1 (got %d)", v)
		} else if v > MaxRequestsPerStep {
			c.bad(c.k("requests"), "%d is above the ceiling of %d requests per step", v, MaxRequestsPerStep)
		}
	}},
	{key: "step[].planned_context_tokens", on: kSequence, says: []string{"one value for all, or one per request"}, check: checkPlanned},

	{key: "step[].users", on: kConversation, says: []string{fmt.Sprintf("1..%d", MaxUsers)}, check: func(c *checker) {
		c.between(c.k("users"), c.step().Users, 1, MaxUsers)
	}},
	{key: "step[].turns", on: kConversation, says: []string{fmt.Sprintf("1..%d", MaxTurns)}, check: func(c *checker) {
		c.between(c.k("turns"), c.step().Turns, 1, MaxTurns)
	}},
	{key: "step[].turn_tokens", on: kConversation, check: func(c *checker) {
		c.between(c.k("turn_tokens"), c.step().TurnTokens, 1, MaxPromptTokens)
	}},
	{key: "step[].system_prompt_tokens", on: kConversation, check: func(c *checker) {
		c.between(c.k("system_prompt_tokens"), c.step().SystemPromptTokens, 0, MaxPromptTokens)
	}},
	{key: "step[].think_time", on: kConversation, says: []string{"at most 1h"}, check: func(c *checker) {
		if st := c.step(); st.ThinkTime.Duration < 0 || st.ThinkTime.Duration > MaxThinkTime {
			c.bad(c.k("think_time"), "must be between 0s and %s (got %s)", MaxThinkTime, st.ThinkTime)
		}
	}},
	{key: "step[].arrival", on: kConversation, says: quoted(ArrivalAll, ArrivalRamp), check: checkArrival},
	{key: "step[].ramp", on: kConversation, says: []string{"at most 24h"}}, // checked with arrival
	{key: "step[].scrape_interval", on: kConversation, says: []string{"target.sample_interval"}, check: func(c *checker) { c.scrapeInterval(c.step()) }},
	{key: "step[].turns", on: kConversation, check: checkLongestTurn},

	{key: "step[].kind", on: kTrace, excludes: []string{"planned_context_tokens", "replay"}, check: func(c *checker) {
		if st := c.step(); st.Replay != nil || len(st.PlannedContextTokens) > 0 {
			c.bad(c.k("kind"), "a trace step builds its prompts from the trace: drop planned_context_tokens and replay")
		}
	}},
	{key: "step[].users", on: kTrace, excludes: append(slices.Clone(conversationKeys), timingKeys...), check: func(c *checker) {
		st := c.step()
		if st.Users != 0 || st.Turns != 0 || st.TurnTokens != 0 || st.SystemPromptTokens != 0 || st.ThinkTime.Duration != 0 || st.Arrival != "" || st.Ramp.Duration != 0 {
			c.bad(c.k("users"), "users, turns, turn_tokens, system_prompt_tokens, think_time, arrival and ramp belong to conversation steps")
		}
	}},
	{key: "step[].max_tokens", on: kTrace, excludes: []string{"max_tokens", "min_tokens"}, check: func(c *checker) {
		if st := c.step(); st.MaxTokens != 0 || st.MinTokens != nil {
			c.bad(c.k("max_tokens"), "a trace step asks each request for its trace's output_length tokens: drop max_tokens and min_tokens")
		}
	}},
	{key: "step[].file", on: kTrace, check: func(c *checker) {
		// A file outside the scenario's directory is refused when it is opened, unless the
		// user names the trace (--trace): then the scenario's choice does not matter.
		if c.step().File == "" && !strings.HasPrefix(c.s.Path, "builtin:") {
			c.bad(c.k("file"), "missing: the trace to replay, relative to this file")
		}
	}},
	{key: "step[].format", on: kTrace, says: quoted(traceFormats()...), check: func(c *checker) {
		c.oneOf(c.k("format"), c.step().Format, traceFormats()...)
	}},
	{key: "step[].block_tokens", on: kTrace, says: []string{fmt.Sprintf("1 to %d", MaxTraceBlockTokens)}, check: func(c *checker) {
		if v := c.step().BlockTokens; v < 1 || v > MaxTraceBlockTokens {
			c.bad(c.k("block_tokens"), "must be between 1 and %d (got %d)", MaxTraceBlockTokens, v)
		}
	}},
	{key: "step[].start", on: kTrace, check: func(c *checker) {
		if st := c.step(); st.Start.Duration < 0 {
			c.bad(c.k("start"), "must not be negative (got %s)", st.Start)
		}
	}},
	{key: "step[].duration", on: kTrace, check: func(c *checker) {
		if st := c.step(); st.Duration.Duration < 0 {
			c.bad(c.k("duration"), "must not be negative (got %s)", st.Duration)
		}
	}},
	{key: "step[].requests", on: kTrace, check: func(c *checker) {
		// 0 written in the file is not "unset": it would silently replay the whole window.
		if v := c.step().Requests; v < 0 || v > MaxTraceRequests || (v == 0 && c.s.defined(c.k("requests"))) {
			c.bad(c.k("requests"), "must be between 1 and %d, or unset for the whole window (got %d)", MaxTraceRequests, v)
		}
	}},
	{key: "step[].duration", on: kTrace, check: checkTraceWindow},
	{key: "step[].max_input_tokens", on: kTrace, check: func(c *checker) {
		if v := c.step().MaxInputTokens; v < 0 || v > MaxPromptTokens {
			c.bad(c.k("max_input_tokens"), "must be between 0 and %d (got %d)", MaxPromptTokens, v)
		}
	}},
	{key: "step[].time_scale", on: kTrace, says: []string{fmt.Sprintf("%g to %g", MinTimeScale, MaxTimeScale)}, check: func(c *checker) {
		if ts := c.step().TimeScale; math.IsNaN(ts) || ts < MinTimeScale || ts > MaxTimeScale {
			c.bad(c.k("time_scale"), "must be between %g and %g (got %g)", MinTimeScale, MaxTimeScale, ts)
		}
	}},
	{key: "step[].concurrency", on: kTrace, says: []string{"closed loop"}, check: func(c *checker) {
		// 0 written in the file is not "unset": it would silently run an open loop.
		if v := c.step().Concurrency; v < 0 || v > MaxConcurrency || (v == 0 && c.s.defined(c.k("concurrency"))) {
			c.bad(c.k("concurrency"), "must be between 1 and %d for a closed loop, or unset for an open loop at the trace's timestamps (got %d)", MaxConcurrency, v)
		}
	}},
	{key: "step[].time_scale", on: kTrace, check: checkOpenLoopScale},
	{key: "step[].prompt_form", on: kTrace, says: quoted(PromptFormAuto, PromptFormTokenIDs, PromptFormText), check: func(c *checker) {
		c.oneOf(c.k("prompt_form"), c.step().PromptForm, PromptFormAuto, PromptFormTokenIDs, PromptFormText)
	}},
	{key: "step[].scrape_interval", on: kTrace, check: func(c *checker) { c.scrapeInterval(c.step()) }},

	{key: "step[].kind", on: kCurve, check: checkCurvePrompts},
	{key: "step[].from_tokens", on: kCurve, says: []string{fmt.Sprintf("default %d", DefaultCurveFromTokens)}, check: func(c *checker) {
		if v := c.step().FromTokens; v <= c.s.Prompt.SharedPrefixTokens || v > MaxPromptTokens {
			c.bad(c.k("from_tokens"), "must be larger than prompt.shared_prefix_tokens (%d) and at most %d (got %d)", c.s.Prompt.SharedPrefixTokens, MaxPromptTokens, v)
		}
	}},
	{key: "step[].to_tokens", on: kCurve, says: quoted("max_model_len"), check: func(c *checker) {
		if st := c.step(); !st.ToTokens.MaxModelLen && (st.ToTokens.Tokens < st.FromTokens || st.ToTokens.Tokens > MaxPromptTokens) {
			c.bad(c.k("to_tokens"), "must be \"max_model_len\" or between from_tokens (%d) and %d (got %d)", st.FromTokens, MaxPromptTokens, st.ToTokens.Tokens)
		}
	}},
	{key: "step[].factor", on: kCurve, says: []string{fmt.Sprintf("default %g", DefaultCurveFactor), "1.1 to 100"}, check: func(c *checker) {
		if f := c.step().Factor; f < 1.1 || f > 100 || math.IsNaN(f) {
			c.bad(c.k("factor"), "must be between 1.1 and 100 (got %g)", f)
		}
	}},
	{key: "step[].cold_twin", on: kCurve, check: func(c *checker) {
		if st := c.step(); st.ColdTwin != nil && !*st.ColdTwin {
			c.bad(c.k("cold_twin"), "a reload curve compares each reload with its cold twin: it cannot be turned off")
		}
	}},
	{key: "step", check: checkPlannedTotal},

	{key: "gate[].step", check: func(c *checker) {
		if g := c.gate(); !c.hasStep(g.Step) {
			c.bad(c.k("step"), "%q is not a step of this scenario", g.Step)
		}
	}},
	{key: "gate[].verdict", says: []string{strings.Join(expectable(), ", ")}, check: func(c *checker) {
		if v := c.gate().Verdict; v != "" {
			if _, ok := verdict.Parse(string(v)); !ok || v == verdict.Invalid {
				c.bad(c.k("verdict"), "%q is not one of %s", v, strings.Join(expectable(), ", "))
			}
		}
	}},
	{key: "gate[].min_cached_fraction", says: []string{"0 to 1"}, check: func(c *checker) {
		if f := c.gate().MinCachedFraction; f < 0 || f > 1 {
			c.bad(c.k("min_cached_fraction"), "must be between 0 and 1")
		}
	}},
	{key: "gate[].max_time_to_first_output_ms", check: func(c *checker) {
		if g := c.gate(); g.MaxTimeToFirstOutputMS < 0 || g.MinDecodeTokensPerSec < 0 {
			c.bad(c.at, "thresholds must not be negative")
		}
	}},
	{key: "gate[].min_decode_tokens_per_second"}, // checked with max_time_to_first_output_ms
	{key: "gate[].require_valid_setup"},
	{key: "gate[].require_identical_output", check: func(c *checker) {
		// Sampled output differs run to run: the gate would fail only after the whole run.
		if t := c.s.Request.Temperature; c.gate().RequireIdenticalOutput && t > 0 {
			c.bad(c.k("require_identical_output"), "needs request.temperature = 0 (got %g): a sampled output need not repeat its original", t)
		}
	}},
	{key: "gate[].require_store"},
	{key: "gate[].max_failed_requests", check: func(c *checker) {
		if m := c.gate().MaxFailedRequests; m != nil && *m < 0 {
			c.bad(c.k("max_failed_requests"), "must not be negative")
		}
	}},
	{key: "gate[].require_on_time", check: func(c *checker) {
		g := c.gate()
		if !g.RequireOnTime {
			return
		}
		for _, st := range c.s.Steps {
			if st.ID == g.Step && (st.Kind != KindTrace || st.ClosedLoop()) {
				c.bad(c.k("require_on_time"), "applies to an open-loop trace step (kind = %q, no concurrency); step %q is not one", KindTrace, g.Step)
			}
		}
	}},

	{key: "probe[].timeout", check: func(c *checker) { c.nonNegative(c.k("timeout"), c.probe().Timeout) }},
	{key: "probe[].name", check: func(c *checker) {
		p := c.probe()
		switch {
		case len(p.Name) > MaxNameBytes:
			c.bad(c.k("name"), "is %d bytes long; at most %d", len(p.Name), MaxNameBytes)
		case !stepIDPattern.MatchString(p.Name):
			c.bad(c.k("name"), "%q must be lowercase letters, digits and _ (it becomes a record key)", p.Name)
		case c.probes[p.Name]:
			c.bad(c.k("name"), "%q is used by another probe", p.Name)
		}
		c.probes[p.Name] = true
	}},
	{key: "probe[].when", says: quoted("before", "after"), check: func(c *checker) { c.oneOf(c.k("when"), c.probe().When, "before", "after") }},
	{key: "probe[].command", check: func(c *checker) {
		if p := c.probe(); len(p.Command) == 0 || p.Command[0] == "" {
			c.bad(c.k("command"), "must name a program, e.g. [\"sh\", \"-c\", \"...\"]")
		}
	}},

	{key: "study.role", says: quoted("primary", "control"), check: func(c *checker) {
		c.oneOf("study.role", c.s.Study.Role, "primary", "control")
	}},
	{key: "study.key", check: func(c *checker) {
		if c.s.Study.Role == "control" && !stepIDPattern.MatchString(c.s.Study.Key) {
			c.bad("study.key", "a control run needs a key for its section in the merged study, e.g. \"offload8_control\"")
		}
	}},
	{key: "study.sequence"},

	// Free metadata, copied into the record.
	{key: "model.repo"}, {key: "model.revision"}, {key: "model.served_name"},
	{key: "runtime.image"}, {key: "runtime.engine"}, {key: "runtime.recipe"},
	{key: "topology", free: true},
	{key: "source[].url"}, {key: "source[].observed_date"}, {key: "source[].evidence_type"}, {key: "source[].decision_impact"},
}

// checkName: the name becomes the run directory's, whether the file gives it or it is taken
// from the file's name (a 245-byte file name, or "..toml", which would name a hidden ".").
func checkName(c *checker) {
	derived := ""
	if !c.s.defined("name") {
		derived = " (taken from the file name: set name = \"...\" in the file, or rename it)"
	}
	switch n := c.s.Name; {
	case len(n) > MaxNameBytes:
		c.bad("name", "is %d bytes long; at most %d (it becomes a directory name)%s", len(n), MaxNameBytes, derived)
	case !namePattern.MatchString(n):
		c.bad("name", "%q must be letters, digits, '.', '-' and '_', starting with a letter or digit (it becomes a directory name)%s", n, derived)
	}
}

func checkHasSteps(c *checker) {
	if len(c.s.Steps) == 0 {
		c.ps = append(c.ps, Problem{Key: "step", Msg: "a scenario needs at least one [[step]]"})
	}
}

// checkStepID also records the id, for the replays and gates that name it.
func checkStepID(c *checker) {
	st := c.step()
	if len(st.ID) > MaxNameBytes {
		c.bad(c.k("id"), "is %d bytes long; at most %d (it becomes a file name)", len(st.ID), MaxNameBytes)
	} else if !stepIDPattern.MatchString(st.ID) {
		c.bad(c.k("id"), "%q must be lowercase letters, digits and _ (it becomes a record key)", st.ID)
	} else if j, dup := c.seen[st.ID]; dup {
		c.bad(c.k("id"), "%q repeats the id of step[%d]", st.ID, j)
	}
	c.seen[st.ID] = c.i
}

func (c *checker) hasStep(id string) bool {
	_, ok := c.seen[id]
	return ok
}

// checkReplaySource: a replay names an earlier sequence step and one of its requests.
func checkReplaySource(c *checker) {
	st := c.step()
	ref := st.Replay
	src, ok := c.seen[ref.Step]
	switch {
	case !ok || src == c.i:
		c.bad(c.k("replay.step"), "%q is not an earlier step", ref.Step)
	case c.s.Steps[src].IsConversation():
		c.bad(c.k("replay.step"), "%q is a conversation: its prompts are built as it runs", ref.Step)
	case c.s.Steps[src].IsTrace():
		c.bad(c.k("replay.step"), "%q is a trace step: its prompts are built from the trace as it runs", ref.Step)
	case c.s.Steps[src].IsCurve():
		c.bad(c.k("replay.step"), "%q is a reload curve: it replays its own prompts", ref.Step)
	case c.s.Steps[src].Replay != nil:
		c.bad(c.k("replay.step"), "%q is itself a replay: name the original step", ref.Step)
	case ref.Request < 0 || ref.Request >= c.s.Steps[src].Requests:
		c.bad(c.k("replay.request"), "step %q has no request %d (it has %d, numbered from 0)", ref.Step, ref.Request, c.s.Steps[src].Requests)
	}
}

// checkPlanned checks a sequence's planned sizes and adds them to the pass's total.
func checkPlanned(c *checker) {
	st, key := c.step(), c.k("planned_context_tokens")
	switch n := len(st.PlannedContextTokens); {
	case n == 0:
		c.bad(key, "missing: give one value for all requests or one per request")
	case n != 1 && n != st.Requests:
		c.bad(key, "has %d values for %d requests (give 1 or %d)", n, st.Requests, st.Requests)
	}
	for j, p := range st.PlannedContextTokens {
		if p > MaxPromptTokens {
			c.bad(key, "value %d (%d) is above the ceiling of %d tokens per prompt", j, p, MaxPromptTokens)
			continue
		}
		if p <= c.s.Prompt.SharedPrefixTokens {
			c.bad(key, "value %d (%d) is not larger than prompt.shared_prefix_tokens (%d)", j, p, c.s.Prompt.SharedPrefixTokens)
		}
		if c.s.Server.MaxModelLen.Known() && p > c.s.Server.MaxModelLen.Value {
			c.bad(key, "value %d (%d) exceeds server.max_model_len (%d)", j, p, c.s.Server.MaxModelLen.Value)
		}
	}
	if st.Requests > 0 && st.Requests <= MaxRequestsPerStep {
		for r := range st.Requests {
			c.planned += min(max(st.Planned(r), 0), MaxPromptTokens)
		}
	}
}

func checkPlannedTotal(c *checker) {
	if c.planned > MaxPlannedTokens {
		c.ps = append(c.ps, Problem{Line: c.s.lineOf("step"), Key: "step", Msg: fmt.Sprintf("the steps plan %d tokens in all, above the ceiling of %d per pass (every prompt is built before sending)", c.planned, MaxPlannedTokens)})
	}
}

func checkArrival(c *checker) {
	st := c.step()
	switch st.Arrival {
	case ArrivalAll:
		if st.Ramp.Duration != 0 {
			c.bad(c.k("ramp"), "only applies to arrival = \"ramp\"")
		}
	case ArrivalRamp:
		if d := st.Ramp.Duration; d <= 0 || d > MaxRamp {
			c.bad(c.k("ramp"), "arrival = \"ramp\" needs a ramp between 0s and %s (got %s)", MaxRamp, st.Ramp)
		}
	default:
		c.bad(c.k("arrival"), "%q is not one of %s, %s", st.Arrival, ArrivalAll, ArrivalRamp)
	}
}

// checkLongestTurn: a conversation's last turn, its whole history, must fit a prompt and the
// server's context (checked once users, turns and sizes are each in range).
func checkLongestTurn(c *checker) {
	st := c.step()
	inRange := st.Users >= 1 && st.Users <= MaxUsers && st.Turns >= 1 && st.Turns <= MaxTurns &&
		st.TurnTokens >= 1 && st.TurnTokens <= MaxPromptTokens && st.SystemPromptTokens >= 0 && st.SystemPromptTokens <= MaxPromptTokens
	if !inRange {
		return
	}
	longest := c.s.ConversationTokens(st)
	switch {
	case longest > MaxPromptTokens:
		c.bad(c.k("turns"), "the last turn's history reaches %d tokens, above the ceiling of %d tokens per prompt", longest, MaxPromptTokens)
	case c.s.Server.MaxModelLen.Known() && longest+c.s.MaxTokensFor(st) > c.s.Server.MaxModelLen.Value:
		c.bad(c.k("turns"), "the last turn's history (%d tokens) plus max_tokens (%d) exceeds server.max_model_len (%d)", longest, c.s.MaxTokensFor(st), c.s.Server.MaxModelLen.Value)
	}
}

// checkTraceWindow: a trace window ends at a duration or after a request count.
func checkTraceWindow(c *checker) {
	if st := c.step(); st.Duration.Duration > 0 && st.Requests > 0 {
		c.bad(c.k("duration"), "a window has a duration or a request count (requests), not both")
	}
}

// checkOpenLoopScale: time_scale stretches the trace's timestamps, which a closed loop ignores.
func checkOpenLoopScale(c *checker) {
	if st := c.step(); st.ClosedLoop() && c.s.defined(c.k("time_scale")) {
		c.bad(c.k("time_scale"), "a closed loop (concurrency set) sends in trace order as requests finish: time_scale applies to the open loop only")
	}
}

// checkCurvePrompts: a reload curve's sizes and evictions are counted on the server, and its
// points must share no blocks.
func checkCurvePrompts(c *checker) {
	if c.s.Prompt.TokenCounting != "server" {
		c.bad("prompt.token_counting", "a reload curve needs \"server\": its sizes and the eviction of each point are counted on the server (an estimate misses by a quarter)")
	}
	if c.s.Prompt.Mode != "shared-prefix" {
		c.bad("prompt.mode", "a reload curve needs \"shared-prefix\": nested prompts would share their blocks across points")
	}
}
