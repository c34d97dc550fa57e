package scenarios

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
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

// Place is where the first problem is: the file, and its line when known.
func (e *InvalidError) Place() string {
	if len(e.Problems) > 0 && e.Problems[0].Line > 0 {
		return fmt.Sprintf("%s:%d", e.Path, e.Problems[0].Line)
	}
	return e.Path
}

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

// defined reports whether key itself appears in the file.
func (s *Scenario) defined(key string) bool { return s.lines[key] > 0 }

// lineOf finds key, or the nearest enclosing key that has a line.
func (s *Scenario) lineOf(key string) int { return Positions(s.lines).Line(key) }

// lineOfUnindexed finds a key given without array indices (as toml's MetaData names them).
func (s *Scenario) lineOfUnindexed(key string) int { return Positions(s.lines).LineUnindexed(key) }

var indexPattern = regexp.MustCompile(`\[\d+\]`)

func stripIndices(k string) string { return indexPattern.ReplaceAllString(k, "") }
