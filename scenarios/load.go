package scenarios

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/redact"
)

//go:embed *.toml
var builtinFiles embed.FS

// ErrInvalid marks a scenario that failed to parse or validate.
var ErrInvalid = errors.New("invalid scenario")

// ErrUnknownScenario means a name is neither a file nor a built-in scenario.
var ErrUnknownScenario = errors.New("no such scenario")

// Problem is one thing wrong with a scenario file.
type Problem struct {
	Line int
	Key  string
	Msg  string
}

// InvalidError lists every problem of one file; its message is one line.
type InvalidError struct {
	Path     string
	Problems []Problem
}

func (e *InvalidError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		loc := e.Path
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", e.Path, p.Line)
		}
		if p.Key != "" {
			parts[i] = fmt.Sprintf("%s: %s: %s", loc, p.Key, p.Msg)
		} else {
			parts[i] = fmt.Sprintf("%s: %s", loc, p.Msg)
		}
	}
	// A TOML parser quotes the offending input, which may hold a newline: keep one line.
	return strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(strings.Join(parts, "; "))
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Resolve loads nameOrPath: a file when it exists or looks like a path, else a built-in.
func Resolve(nameOrPath string) (*Scenario, error) {
	if _, err := os.Stat(nameOrPath); err == nil || strings.ContainsAny(nameOrPath, "/\\") || strings.HasSuffix(nameOrPath, ".toml") {
		return Load(nameOrPath)
	}
	return Builtin(nameOrPath)
}

// Load reads and validates a scenario file.
func Load(file string) (*Scenario, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading scenario: %w", err)
	}
	return Parse(data, file)
}

// Builtin returns the embedded scenario called name.
func Builtin(name string) (*Scenario, error) {
	data, err := builtinFiles.ReadFile(name + ".toml")
	if err != nil {
		return nil, fmt.Errorf("%w %q: not a file and not a built-in (built-ins: %s)", ErrUnknownScenario, name, strings.Join(BuiltinNames(), ", "))
	}
	return Parse(data, "builtin:"+name)
}

// BuiltinNames lists the embedded scenarios.
func BuiltinNames() []string {
	entries, _ := fs.Glob(builtinFiles, "*.toml")
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = strings.TrimSuffix(e, ".toml")
	}
	sort.Strings(names)
	return names
}

// Parse decodes and validates a scenario; every problem of the file is reported at once.
func Parse(data []byte, file string) (*Scenario, error) {
	s := &Scenario{Path: file}
	// topology is free metadata; extra_body tables are sent as they are
	pos, problems, decoded := DecodeStrict(data, s, "topology", "request.extra_body", "step.extra_body")
	if !decoded {
		return nil, &InvalidError{Path: file, Problems: problems}
	}
	s.lines = pos
	s.applyDefaults(file)
	problems = append(problems, s.validate()...)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
		return nil, &InvalidError{Path: file, Problems: problems}
	}
	return s, nil
}

func (s *Scenario) applyDefaults(file string) {
	if s.Name == "" {
		s.Name = strings.TrimSuffix(path.Base(strings.TrimPrefix(file, "builtin:")), ".toml")
	}
	if s.Target.Backend == "" {
		s.Target.Backend = "vllm"
	}
	if s.Target.SampleInterval.Duration == 0 {
		s.Target.SampleInterval.Duration = 100 * time.Millisecond
	}
	if s.Target.IdleTimeout.Duration == 0 {
		s.Target.IdleTimeout.Duration = 60 * time.Second
	}
	if s.Prompt.TokenCounting == "" {
		s.Prompt.TokenCounting = "server"
	}
	if s.Prompt.Mode == "" {
		s.Prompt.Mode = "shared-prefix"
	}
	if s.Request.MaxTokens == 0 && !s.defined("request.max_tokens") {
		s.Request.MaxTokens = 256
	}
	if s.Request.Timeout.Duration == 0 {
		s.Request.Timeout.Duration = 10 * time.Minute
	}
	if s.Study.Role == "" {
		s.Study.Role = "primary"
	}
	ordinal := 0
	for i := range s.Steps {
		st := &s.Steps[i]
		if st.IsConversation() {
			s.conversationDefaults(st)
			continue
		}
		if st.IsTrace() {
			s.traceDefaults(i, st)
			continue
		}
		if st.IsCurve() {
			s.curveDefaults(i, st)
			continue
		}
		if st.Concurrency == 0 && !s.defined(fmt.Sprintf("step[%d].concurrency", i)) {
			st.Concurrency = 1
		}
		if st.Replay != nil {
			continue
		}
		if st.Requests == 0 && !s.defined(fmt.Sprintf("step[%d].requests", i)) {
			st.Requests = len(st.PlannedContextTokens)
		}
		st.FirstOrdinal = ordinal
		ordinal += max(st.Requests, 0)
	}
	for i := range s.Probes {
		if s.Probes[i].Timeout.Duration == 0 {
			s.Probes[i].Timeout.Duration = 5 * time.Minute
		}
	}
}

var (
	stepIDPattern  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	namePattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (s *Scenario) validate() []Problem {
	var ps []Problem
	bad := func(key, format string, args ...any) {
		ps = append(ps, Problem{Line: s.lineOf(key), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	oneOf := func(key, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad(key, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}

	// The name becomes the run directory's, whether the file gives it or it is taken from
	// the file's name (a 245-byte file name, or "..toml", which would name a hidden ".").
	derived := ""
	if !s.defined("name") {
		derived = " (taken from the file name: set name = \"...\" in the file, or rename it)"
	}
	switch {
	case len(s.Name) > MaxNameBytes:
		bad("name", "is %d bytes long; at most %d (it becomes a directory name)%s", len(s.Name), MaxNameBytes, derived)
	case !namePattern.MatchString(s.Name):
		bad("name", "%q must be letters, digits, '.', '-' and '_', starting with a letter or digit (it becomes a directory name)%s", s.Name, derived)
	}
	nonNegative := func(key string, d Duration) {
		if d.Duration < 0 {
			bad(key, "must be positive (got %s)", d)
		}
	}
	nonNegative("target.idle_timeout", s.Target.IdleTimeout)
	nonNegative("request.timeout", s.Request.Timeout)
	if e := s.Target.Endpoint; e != "" && !IsHTTPURL(e) {
		bad("target.endpoint", "%q is not an http(s) URL", redact.URL(e))
	}
	for i, m := range s.Target.Metrics {
		if !IsHTTPURL(m) {
			bad(fmt.Sprintf("target.metrics[%d]", i), "%q is not an http(s) URL", redact.URL(m))
		}
	}
	if k := s.Target.APIKeyEnv; k != "" && !envNamePattern.MatchString(k) {
		bad("target.api_key_env", "%q is not an environment variable's name (letters, digits and _, not starting with a digit)", k)
	}
	if s.Target.SampleInterval.Duration < 10*time.Millisecond {
		bad("target.sample_interval", "must be at least 10ms")
	}
	positiveAuto := func(key string, a AutoInt) {
		if !a.FromServer && a.Value < 0 {
			bad(key, "must be positive or \"server\" (got %d)", a.Value)
		}
	}
	positiveAuto("server.gpu_kv_tokens", s.Server.GPUKVTokens)
	positiveAuto("server.block_size", s.Server.BlockSize)
	positiveAuto("server.max_model_len", s.Server.MaxModelLen)
	if s.Server.CPUOffloadGiB < 0 {
		bad("server.cpu_offload_gib", "must not be negative")
	}
	if s.Server.StoreBytesPerToken < 0 {
		bad("server.store_bytes_per_token", "must not be negative")
	}
	if s.Server.LoadBytesPerToken < 0 {
		bad("server.load_bytes_per_token", "must not be negative")
	}
	if s.Server.HostLinkGBps < 0 || s.Server.HostLinkGBps > 10000 {
		bad("server.host_link_gbps", "must be between 0 and 10000 GB/s (got %g)", s.Server.HostLinkGBps)
	}

	if s.Repeat < 0 || s.Repeat > MaxRepeat {
		bad("repeat", "must be between 1 and %d, or 0 for once (got %d)", MaxRepeat, s.Repeat)
	}
	if s.Prompt.Seed < 0 {
		bad("prompt.seed", "must not be negative")
	}
	if s.Prompt.SharedPrefixTokens < 0 {
		bad("prompt.shared_prefix_tokens", "must not be negative")
	} else if s.Prompt.SharedPrefixTokens > MaxPromptTokens {
		bad("prompt.shared_prefix_tokens", "%d is above the ceiling of %d tokens per prompt", s.Prompt.SharedPrefixTokens, MaxPromptTokens)
	}
	if err := CheckSalt(s.Prompt.Salt); err != nil {
		bad("prompt.salt", "%v", err)
	}
	oneOf("prompt.token_counting", s.Prompt.TokenCounting, "server", "estimate")
	oneOf("prompt.mode", s.Prompt.Mode, "shared-prefix", "nested")

	if s.Request.MaxTokens < 1 {
		bad("request.max_tokens", "must be at least 1 (got %d)", s.Request.MaxTokens)
	} else if s.Request.MaxTokens > MaxPromptTokens {
		bad("request.max_tokens", "%d is above the ceiling of %d", s.Request.MaxTokens, MaxPromptTokens)
	}
	if t := s.Request.Temperature; t < 0 || math.IsNaN(t) || math.IsInf(t, 0) {
		bad("request.temperature", "must be 0 or more (got %g)", t)
	}
	minTokens := func(key string, v, maxTokens int) {
		switch {
		case v < 0:
			bad(key, "must not be negative (got %d)", v)
		case maxTokens > 0 && v > maxTokens:
			bad(key, "%d is above max_tokens (%d)", v, maxTokens)
		}
	}
	minTokens("request.min_tokens", s.Request.MinTokens, s.Request.MaxTokens)
	extraBody := func(key string, body map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(body)) {
			if slices.Contains(client.ReservedBodyKeys, k) {
				bad(key+"."+k, "kvbench sets %q itself (it may not be overridden: %s)", k, strings.Join(client.ReservedBodyKeys, ", "))
			}
		}
		if _, err := json.Marshal(body); err != nil {
			bad(key, "cannot be sent as JSON: %v", err)
		}
	}
	extraBody("request.extra_body", s.Request.ExtraBody)

	if len(s.Steps) == 0 {
		ps = append(ps, Problem{Key: "step", Msg: "a scenario needs at least one [[step]]"})
	}
	seen := map[string]int{}
	planned := 0
	for i, st := range s.Steps {
		key := fmt.Sprintf("step[%d]", i)
		if len(st.ID) > MaxNameBytes {
			bad(key+".id", "is %d bytes long; at most %d (it becomes a file name)", len(st.ID), MaxNameBytes)
		} else if !stepIDPattern.MatchString(st.ID) {
			bad(key+".id", "%q must be lowercase letters, digits and _ (it becomes a record key)", st.ID)
		} else if j, dup := seen[st.ID]; dup {
			bad(key+".id", "%q repeats the id of step[%d]", st.ID, j)
		}
		seen[st.ID] = i
		if st.IsConversation() {
			s.validateConversation(i, bad)
			continue
		}
		if st.IsTrace() {
			s.validateTrace(i, bad)
			continue
		}
		if st.IsCurve() {
			s.validateCurve(i, bad)
			continue
		}
		if st.Kind != "" {
			bad(key+".kind", "%q is not a step kind (want %q, %q or %q, or no kind for a sequence or replay)", st.Kind, KindConversation, KindTrace, KindReloadCurve)
		}
		if st.traceFieldsSet() {
			bad(key+".file", "file, block_tokens, start, duration, time_scale, max_input_tokens and prompt_form need kind = %q", KindTrace)
		}
		if st.FromTokens != 0 || !st.ToTokens.IsZero() || st.Factor != 0 {
			bad(key+".from_tokens", "from_tokens, to_tokens and factor need kind = %q", KindReloadCurve)
		}
		if st.ColdTwin != nil && st.Replay == nil {
			bad(key+".cold_twin", "only a replay step has a cold twin")
		}
		if st.Users != 0 || st.Turns != 0 || st.TurnTokens != 0 || st.SystemPromptTokens != 0 {
			bad(key+".users", "users, turns, turn_tokens and system_prompt_tokens need kind = %q", KindConversation)
		}
		if st.Concurrency < 1 {
			bad(key+".concurrency", "must be at least 1 (got %d)", st.Concurrency)
		} else if st.Concurrency > MaxConcurrency {
			bad(key+".concurrency", "%d is above the ceiling of %d", st.Concurrency, MaxConcurrency)
		}
		if st.MaxTokens < 0 {
			bad(key+".max_tokens", "must not be negative")
		} else if st.MaxTokens > MaxPromptTokens {
			bad(key+".max_tokens", "%d is above the ceiling of %d", st.MaxTokens, MaxPromptTokens)
		}
		if st.MinTokens != nil {
			minTokens(key+".min_tokens", *st.MinTokens, s.MaxTokensFor(&s.Steps[i]))
		} else if st.MaxTokens > 0 && s.Request.MinTokens > st.MaxTokens {
			bad(key+".max_tokens", "%d is below request.min_tokens (%d)", st.MaxTokens, s.Request.MinTokens)
		}
		extraBody(key+".extra_body", st.ExtraBody)
		if st.Replay != nil {
			if len(st.PlannedContextTokens) > 0 || st.Requests > 1 {
				bad(key+".replay", "a replay step takes its prompt from the replayed request: drop requests and planned_context_tokens")
			}
			src, ok := seen[st.Replay.Step]
			switch {
			case !ok || src == i:
				bad(key+".replay.step", "%q is not an earlier step", st.Replay.Step)
			case s.Steps[src].IsConversation():
				bad(key+".replay.step", "%q is a conversation: its prompts are built as it runs", st.Replay.Step)
			case s.Steps[src].IsTrace():
				bad(key+".replay.step", "%q is a trace step: its prompts are built from the trace as it runs", st.Replay.Step)
			case s.Steps[src].IsCurve():
				bad(key+".replay.step", "%q is a reload curve: it replays its own prompts", st.Replay.Step)
			case s.Steps[src].Replay != nil:
				bad(key+".replay.step", "%q is itself a replay: name the original step", st.Replay.Step)
			case st.Replay.Request < 0 || st.Replay.Request >= s.Steps[src].Requests:
				bad(key+".replay.request", "step %q has no request %d (it has %d, numbered from 0)", st.Replay.Step, st.Replay.Request, s.Steps[src].Requests)
			}
			continue
		}
		if st.Requests < 1 {
			bad(key+".requests", "must be at least 1 (got %d)", st.Requests)
		} else if st.Requests > MaxRequestsPerStep {
			bad(key+".requests", "%d is above the ceiling of %d requests per step", st.Requests, MaxRequestsPerStep)
		}
		switch n := len(st.PlannedContextTokens); {
		case n == 0:
			bad(key+".planned_context_tokens", "missing: give one value for all requests or one per request")
		case n != 1 && n != st.Requests:
			bad(key+".planned_context_tokens", "has %d values for %d requests (give 1 or %d)", n, st.Requests, st.Requests)
		}
		for j, p := range st.PlannedContextTokens {
			if p > MaxPromptTokens {
				bad(key+".planned_context_tokens", "value %d (%d) is above the ceiling of %d tokens per prompt", j, p, MaxPromptTokens)
				continue
			}
			if p <= s.Prompt.SharedPrefixTokens {
				bad(key+".planned_context_tokens", "value %d (%d) is not larger than prompt.shared_prefix_tokens (%d)", j, p, s.Prompt.SharedPrefixTokens)
			}
			if s.Server.MaxModelLen.Known() && p > s.Server.MaxModelLen.Value {
				bad(key+".planned_context_tokens", "value %d (%d) exceeds server.max_model_len (%d)", j, p, s.Server.MaxModelLen.Value)
			}
		}
		if st.Requests > 0 && st.Requests <= MaxRequestsPerStep {
			for r := range st.Requests {
				planned += min(max(st.Planned(r), 0), MaxPromptTokens)
			}
		}
	}
	if planned > MaxPlannedTokens {
		ps = append(ps, Problem{Line: s.lineOf("step"), Key: "step", Msg: fmt.Sprintf("the steps plan %d tokens in all, above the ceiling of %d per pass (every prompt is built before sending)", planned, MaxPlannedTokens)})
	}

	for i, g := range s.Gates {
		key := fmt.Sprintf("gate[%d]", i)
		if _, ok := seen[g.Step]; !ok {
			bad(key+".step", "%q is not a step of this scenario", g.Step)
		}
		if _, ok := verdict.Parse(string(g.Verdict)); g.Verdict != "" && (!ok || g.Verdict == verdict.Invalid) {
			var words []string
			for _, v := range verdict.Expectable {
				words = append(words, string(v))
			}
			bad(key+".verdict", "%q is not one of %s", g.Verdict, strings.Join(words, ", "))
		}
		if g.MinCachedFraction < 0 || g.MinCachedFraction > 1 {
			bad(key+".min_cached_fraction", "must be between 0 and 1")
		}
		if g.MaxTimeToFirstOutputMS < 0 || g.MinDecodeTokensPerSec < 0 {
			bad(key, "thresholds must not be negative")
		}
		if g.MaxFailedRequests != nil && *g.MaxFailedRequests < 0 {
			bad(key+".max_failed_requests", "must not be negative")
		}
		// Sampled output differs run to run: the gate would fail only after the whole run.
		if t := s.Request.Temperature; g.RequireIdenticalOutput && t > 0 {
			bad(key+".require_identical_output", "needs request.temperature = 0 (got %g): a sampled output need not repeat its original", t)
		}
	}

	probes := map[string]bool{}
	for i, p := range s.Probes {
		key := fmt.Sprintf("probe[%d]", i)
		nonNegative(key+".timeout", p.Timeout)
		if len(p.Name) > MaxNameBytes {
			bad(key+".name", "is %d bytes long; at most %d", len(p.Name), MaxNameBytes)
		} else if !stepIDPattern.MatchString(p.Name) {
			bad(key+".name", "%q must be lowercase letters, digits and _ (it becomes a record key)", p.Name)
		} else if probes[p.Name] {
			bad(key+".name", "%q is used by another probe", p.Name)
		}
		probes[p.Name] = true
		oneOf(key+".when", p.When, "before", "after")
		if len(p.Command) == 0 || p.Command[0] == "" {
			bad(key+".command", "must name a program, e.g. [\"sh\", \"-c\", \"...\"]")
		}
	}

	oneOf("study.role", s.Study.Role, "primary", "control")
	if s.Study.Role == "control" && !stepIDPattern.MatchString(s.Study.Key) {
		bad("study.key", "a control run needs a key for its section in the merged study, e.g. \"offload8_control\"")
	}
	return ps
}

// defined reports whether key itself appears in the file.
func (s *Scenario) defined(key string) bool { return s.lines[key] > 0 }

// lineOf finds key, or the nearest enclosing key that has a line.
func (s *Scenario) lineOf(key string) int { return Positions(s.lines).Line(key) }

// lineOfUnindexed finds a key given without array indices (as toml's MetaData names them).
func (s *Scenario) lineOfUnindexed(key string) int { return Positions(s.lines).LineUnindexed(key) }

var indexPattern = regexp.MustCompile(`\[\d+\]`)

func stripIndices(k string) string { return indexPattern.ReplaceAllString(k, "") }
