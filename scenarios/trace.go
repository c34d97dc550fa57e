package scenarios

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-serving/kvbench/harness/trace"
)

// KindTrace is the step kind that replays a KV-cache trace block for block (docs/traces.md):
// Mooncake's format, AIPerf's extensions of it, Bailian's, BurstGPT's or Azure's.
const KindTrace = "trace"

// Trace step defaults and ceilings.
const (
	// DefaultTraceBlockTokens is the block size of the public Mooncake traces.
	DefaultTraceBlockTokens = 512
	// MaxTraceBlockTokens bounds block_tokens.
	MaxTraceBlockTokens = 1 << 16
	// MinTimeScale and MaxTimeScale bound time_scale: 0.001 replays an hour in 3.6 s.
	MinTimeScale = 0.001
	MaxTimeScale = 1000.0
	// MaxTraceRequests bounds a trace window's request count.
	MaxTraceRequests = 10_000_000
)

// Prompt forms of a trace step.
const (
	// PromptFormAuto sends token ids where the engine's completions endpoint takes them,
	// text blocks elsewhere.
	PromptFormAuto = "auto"
	// PromptFormTokenIDs sends each prompt as a list of token ids: exact block for block.
	PromptFormTokenIDs = "token_ids"
	// PromptFormText sends each prompt as text blocks, checked with /tokenize at preflight.
	PromptFormText = "text"
)

// TraceStep holds the fields of a [[step]] with kind = "trace": replay a trace's requests,
// each prompt built block for block from its hash ids, at the trace's timestamps scaled by
// TimeScale (open loop) or, when concurrency is set, in trace order with that many in flight
// (closed loop). A window (Start, then Duration or the step's requests) selects the part
// replayed. Its fields sit directly in the [[step]] table; requests is the step's own field.
type TraceStep struct {
	// File is the trace (any format kvbench reads, gzip-compressed or not), relative to the scenario file's directory and
	// inside it (a scenario may come from a stranger: it reads nothing else). The user names
	// any other file with kvbench's --trace flag.
	File string `toml:"file" json:"file,omitempty"`
	// Format is the trace's format: "auto" (told from its content; the default), "mooncake",
	// "bailian", "burstgpt" or "azure" (docs/traces.md, section 1).
	Format string `toml:"format" json:"format,omitempty"`
	// BlockTokens is the tokens each hash id names (when unset: 16 for a Bailian trace, 512
	// for any other).
	BlockTokens int `toml:"block_tokens" json:"block_tokens,omitempty"`
	// Start skips the requests before this trace time; Duration keeps the requests up to
	// Start+Duration (exclusive with requests).
	Start    Duration `toml:"start" json:"start,omitzero"`
	Duration Duration `toml:"duration" json:"duration,omitzero"`
	// TimeScale multiplies the gaps between the trace's timestamps (0.1 replays ten times
	// faster; 1 when unset). Open loop only.
	TimeScale float64 `toml:"time_scale" json:"time_scale,omitempty"`
	// MaxInputTokens drops the requests whose input_length exceeds it (0: none dropped);
	// the record says how many.
	MaxInputTokens int `toml:"max_input_tokens" json:"max_input_tokens,omitempty"`
	// PromptForm is "auto" (default), "token_ids" or "text".
	PromptForm string `toml:"prompt_form" json:"prompt_form,omitempty"`

	// Source is where the trace is read from (set by Load, or by the user's --trace).
	Source TraceSource `toml:"-" json:"-"`
	// Shard is the part of the window this client replays (the user's --shard; zero: all).
	Shard trace.Shard `toml:"-" json:"-"`
}

// IsTrace reports whether st is a trace step.
func (st *Step) IsTrace() bool { return st.Kind == KindTrace }

// traceFieldsSet reports whether any field only a trace step takes is set.
func (st *Step) traceFieldsSet() bool {
	return st.File != "" || st.Format != "" || st.BlockTokens != 0 || st.Start.Duration != 0 || st.Duration.Duration != 0 ||
		st.TimeScale != 0 || st.MaxInputTokens != 0 || st.PromptForm != ""
}

// ClosedLoop reports whether a trace step sends in trace order with Concurrency requests in
// flight, rather than at the trace's timestamps.
func (st *Step) ClosedLoop() bool { return st.Concurrency > 0 }

// TraceSource is where a trace step's file is read from: the file the scenario names, inside
// the scenario file's directory, or the path the user named on the command line.
type TraceSource struct {
	// Dir is the scenario file's directory; "" for a built-in scenario.
	Dir string
	// File is the scenario's file key, relative to Dir.
	File string
	// UserPath is the trace the user named (kvbench's --trace): read as given, anywhere.
	UserPath string
}

// ErrTraceOutside is a trace a scenario names that lies outside the scenario's directory.
var ErrTraceOutside = errors.New("outside the scenario file's directory")

// Name is the trace's path as errors and records cite it.
func (t TraceSource) Name() string {
	if t.UserPath != "" {
		return t.UserPath
	}
	if t.Dir == "" {
		return t.File
	}
	return filepath.Join(t.Dir, t.File)
}

// NamedByUser reports whether the user named the trace on the command line.
func (t TraceSource) NamedByUser() bool { return t.UserPath != "" }

// Open opens the trace for reading. A trace the scenario names is opened through the
// scenario's directory as a root, so neither "..", an absolute path nor a symbolic link can
// lead outside it; either way only a regular file is read (not a device or a pipe, whose
// open could block), checked before it is opened and again once it is.
func (t TraceSource) Open() (*os.File, error) {
	var f *os.File
	var err error
	switch {
	case t.UserPath != "":
		if err = regular(t.UserPath, os.Stat); err == nil {
			f, err = os.Open(t.UserPath)
		}
	case t.File == "":
		return nil, errors.New("the trace step names no file: give file = \"...\" or pass --trace FILE")
	case t.Dir == "":
		return nil, fmt.Errorf("%s: a built-in scenario's trace is named with --trace FILE", t.File)
	case !filepath.IsLocal(t.File):
		return nil, fmt.Errorf("%q is %w: a scenario may name only a trace beside it or below it; name any other trace yourself with --trace FILE", t.File, ErrTraceOutside)
	default:
		var root *os.Root
		if root, err = os.OpenRoot(t.Dir); errors.Is(err, os.ErrNotExist) {
			break // named below by the trace's whole path
		} else if err != nil {
			return nil, err
		}
		defer root.Close()
		if err = regular(t.File, root.Stat); err == nil {
			f, err = root.Open(t.File)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errNotRegular) {
			// os.Root refuses a path that leaves the directory, symbolic links included.
			return nil, fmt.Errorf("%s: %w (%v): name the trace yourself with --trace FILE", t.Name(), ErrTraceOutside, err)
		}
	}
	if err == nil {
		err = regular("", func(string) (os.FileInfo, error) { return f.Stat() })
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		if errors.Is(err, errNotRegular) {
			return nil, fmt.Errorf("%s: %w", t.Name(), err)
		}
		if errors.Is(err, os.ErrNotExist) { // the whole path, not an os.Root call's relative one
			return nil, &missingTrace{t.Name(), t.walked(), err}
		}
		return nil, err
	}
	return f, nil
}

// walked is the trace's path as the system walks it: Name without the cleaning that drops
// "adir/.." (the walk fails where adir is missing).
func (t TraceSource) walked() string {
	if t.UserPath != "" || t.Dir == "" {
		return t.Name()
	}
	return t.Dir + string(filepath.Separator) + t.File
}

// missingTrace is a trace that is not there, named by its whole path (an os.Root call's
// error names it relative to the root, as "statat FILE").
type missingTrace struct {
	name, walked string
	err          error
}

func (e *missingTrace) Error() string {
	if dir := trace.MissingDir(e.walked); dir != "" {
		return fmt.Sprintf("%s: no such file (the directory %s on the way does not exist)", e.walked, dir)
	}
	return e.name + ": no such file"
}
func (e *missingTrace) Unwrap() error { return e.err }

var errNotRegular = errors.New("not a regular file: a trace is a JSONL file")

// regular checks that stat finds a regular file at name.
func regular(name string, stat func(string) (os.FileInfo, error)) error {
	fi, err := stat(name)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w (%s)", errNotRegular, fi.Mode().Type())
	}
	return nil
}

// traceDefaults fills trace step i's unset fields and its source; a field set to 0 stays 0,
// for validateTrace to refuse.
func (s *Scenario) traceDefaults(i int, st *Step) {
	if st.Format == "" {
		st.Format = string(trace.FormatAuto)
	}
	if st.BlockTokens == 0 {
		st.BlockTokens = DefaultTraceBlockTokens
		if st.Format == string(trace.FormatBailian) {
			st.BlockTokens = trace.BailianBlockTokens
		}
	}
	if st.TimeScale == 0 && !s.defined(fmt.Sprintf("step[%d].time_scale", i)) {
		st.TimeScale = 1
	}
	if st.PromptForm == "" {
		st.PromptForm = PromptFormAuto
	}
	if st.ScrapeInterval.Duration == 0 {
		st.ScrapeInterval = s.Target.SampleInterval
	}
	st.Source = TraceSource{File: st.File}
	if !strings.HasPrefix(s.Path, "builtin:") {
		st.Source.Dir = filepath.Dir(s.Path)
	}
}

// UseTrace makes every trace step of s replay the file at path, which the user named on the
// command line: it is read as given, wherever it lies.
func (s *Scenario) UseTrace(path string) {
	for i := range s.Steps {
		if st := &s.Steps[i]; st.IsTrace() {
			st.Source.UserPath = path
		}
	}
}

// UseShard makes every trace step of s replay shard sh of its window (--shard).
func (s *Scenario) UseShard(sh trace.Shard) {
	for i := range s.Steps {
		if st := &s.Steps[i]; st.IsTrace() {
			st.Shard = sh
		}
	}
}

// UseTraceFormat makes every trace step of s read its trace in format, which the user named
// on the command line (--trace-format); a step whose block_tokens the scenario leaves unset
// takes the format's block size.
func (s *Scenario) UseTraceFormat(format trace.Format) {
	for i := range s.Steps {
		if st := &s.Steps[i]; st.IsTrace() {
			st.Format = string(format)
			if !s.defined(fmt.Sprintf("step[%d].block_tokens", i)) {
				st.BlockTokens = DefaultTraceBlockTokens
				if format == trace.FormatBailian {
					st.BlockTokens = trace.BailianBlockTokens
				}
			}
		}
	}
}

// HasTrace reports whether s has a trace step.
func (s *Scenario) HasTrace() bool {
	for i := range s.Steps {
		if s.Steps[i].IsTrace() {
			return true
		}
	}
	return false
}
