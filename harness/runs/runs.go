// Package runs owns the run directory: it creates one per run (never reusing a name), writes
// its files atomically and never over an existing one, and loads a finished run back for the
// commands that read it (verify, compare, report, summarize, accounting): run.json decoded
// into its Go type, and every repetition's step artifacts, each checked against the sha256
// the record lists. The artifacts are the source of truth: what those commands print is
// recomputed from them, so a summary can never drift from the measurements.
package runs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// RunFile is the run record's name in its run directory.
const RunFile = "run.json"

// ErrNotRun means a directory holds no readable kvbench run record.
var ErrNotRun = errors.New("not a kvbench run directory")

// ErrArtifactChanged means an artifact's bytes no longer match the sha256 in run.json.
var ErrArtifactChanged = errors.New("artifact changed after the run")

// Run is one loaded run directory: its record (run.json, whose fields it promotes), with
// every part the steps decide derived anew from the step artifacts (derive.Run.Derive):
// Repetitions holds every pass over the steps, repetition 0 first, with their sections.
type Run struct {
	Dir string
	*derive.Run
	// Files are run.json and every artifact (absolute paths) with their sha256, in the
	// record's order; artifacts carry their step id.
	Files []record.ArtifactRef
}

// Load reads dir's run.json and every artifact it lists, checking each sha256, and derives
// the run's view from the artifacts: the sections, measured bytes per token and repeats
// every reader uses are computed once here, from the measurements, never taken from
// run.json's copy.
//
// A run that did not finish is loaded with what it holds. run.json that still says running
// means no process finished it (killed, or still going: a reader cannot tell), so its
// status is reported as incomplete. For any run not completed, step files written after
// run.json was last replaced are added with the sha256 they have now, and a step whose
// file was never written is rebuilt, marked interrupted, from its request journal.
func Load(dir string) (*Run, error) {
	path := filepath.Join(dir, "run.json")
	r, err := readRecord(dir, path)
	if err != nil {
		// Without a readable run.json, the step files and journals still hold the run.
		var rerr error
		if r, rerr = withoutRecord(dir, err); rerr != nil {
			return nil, err
		}
	}
	if r.Status == record.StatusRunning {
		r.Status = record.StatusIncomplete
		r.StopReason = joinReason("the run did not finish: run.json still says running (its process was killed, or is still going)", r.StopReason)
	}
	seeds := map[int]int64{}
	if r.Repeats != nil {
		for _, rep := range r.Repeats.Repetitions {
			seeds[rep.Index] = rep.Seed
		}
	}
	byRep := map[int]*derive.Repetition{}
	add := func(k int, art record.StepArtifact, ref record.ArtifactRef) {
		rep := byRep[k]
		if rep == nil {
			seed, ok := seeds[k]
			if !ok {
				seed = r.Scenario.RepetitionSeed(k)
			}
			rep = &derive.Repetition{Repetition: record.Repetition{Index: k, Seed: seed, Status: record.StatusCompleted}}
			byRep[k] = rep
		}
		rep.Steps = append(rep.Steps, derive.Assemble(art))
		rep.Artifacts = append(rep.Artifacts, ref.Path)
		if art.Interrupted {
			rep.Status = record.StatusInterrupted
		}
		r.Files = append(r.Files, record.ArtifactRef{Step: art.Step, Path: filepath.Join(dir, ref.Path), SHA256: ref.SHA256, Repetition: k})
	}
	for i, a := range r.Artifacts {
		art, err := loadArtifact(dir, a)
		if err != nil {
			return nil, err
		}
		r.Artifacts[i].Step = art.Step
		add(a.Repetition, art, a)
	}
	if r.Status != record.StatusCompleted {
		recovered, err := r.recover()
		if err != nil {
			return nil, err
		}
		for _, rc := range recovered {
			add(rc.ref.Repetition, rc.art, rc.ref)
		}
		r.Artifacts = append(r.Artifacts, refsOf(recovered)...)
		if len(byRep) == 0 {
			byRep[0] = &derive.Repetition{Repetition: record.Repetition{Index: 0, Seed: r.Scenario.RepetitionSeed(0), Status: record.StatusInterrupted}}
		}
	}
	if len(byRep) == 0 {
		return nil, fmt.Errorf("%s: %w: sources list no step artifacts", path, ErrNotRun)
	}
	var reps []derive.Repetition
	for _, rep := range byRep {
		reps = append(reps, *rep)
	}
	sort.Slice(reps, func(i, j int) bool { return reps[i].Index < reps[j].Index })
	if r.Status == record.StatusCompleted {
		if err := checkCompleted(r.Scenario, reps); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if r.Status != record.StatusCompleted {
		reps[len(reps)-1].Status = record.StatusInterrupted
	}
	written := r.Sections
	r.Derive(reps)
	if err := checkVerdicts(written, r.Sections); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// LoadAll loads each of dirs in order, stopping at the first that does not load.
func LoadAll(dirs []string) ([]*Run, error) {
	var out []*Run
	for _, d := range dirs {
		r, err := Load(d)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// ErrStatusContradicted means run.json says completed but its artifacts hold less than the
// scenario asks for: an edited status, which no reader may take for a finished run.
var ErrStatusContradicted = errors.New("run.json's status contradicts its artifacts")

// checkCompleted holds a completed status to the artifacts and the scenario: every
// repetition asked for, each with every step of the scenario in order, none interrupted,
// and every sequence and replay with all its planned requests (a conversation's users stop
// at a failed turn, so its count is not fixed).
func checkCompleted(sc *scenarios.Scenario, reps []derive.Repetition) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("status: %q, but %s: %w", record.StatusCompleted, fmt.Sprintf(format, args...), ErrStatusContradicted)
	}
	want := max(sc.Repeat, 1)
	var got []int
	for _, rep := range reps {
		got = append(got, rep.Index)
	}
	if len(reps) != want || reps[len(reps)-1].Index != want-1 {
		return fail("the scenario asks for %d repetition(s) and the artifacts hold repetitions %v", want, got)
	}
	var ids []string
	for i := range sc.Steps {
		ids = append(ids, sc.Steps[i].ID)
	}
	for _, rep := range reps {
		var have, missing []string
		for _, st := range rep.Steps {
			have = append(have, st.Step)
		}
		for _, id := range ids {
			if !slices.Contains(have, id) {
				missing = append(missing, id)
			}
		}
		if !slices.Equal(have, ids) {
			return fail("repetition %d holds steps %v of the scenario's %v (missing %v)", rep.Index, have, ids, missing)
		}
		for i, st := range rep.Steps {
			file := ""
			if i < len(rep.Artifacts) {
				file = " (" + rep.Artifacts[i] + ")"
			}
			if st.Interrupted {
				return fail("step %s%s of repetition %d says interrupted", st.Step, file, rep.Index)
			}
			sst := &sc.Steps[i]
			if sst.IsTrace() {
				// A trace step's requests are its window's, which its artifact counts.
				planned := -1
				if st.Trace != nil {
					planned = st.Trace.PlannedRequests
				}
				if len(st.Requests) != planned {
					return fail("trace step %s%s of repetition %d holds %d of its window's %d requests", st.Step, file, rep.Index, len(st.Requests), planned)
				}
				continue
			}
			if !sst.IsConversation() {
				sent := 0 // the planned requests; a replay's cold twin is kvbench's own
				for _, q := range st.Requests {
					if q.ColdTwin == nil {
						sent++
					}
				}
				if n := len(sc.StepRequests(sst)); sent != n {
					return fail("step %s%s of repetition %d holds %d of its %d requests", st.Step, file, rep.Index, sent, n)
				}
			}
		}
	}
	return nil
}

// checkVerdicts holds run.json to its artifacts: a replay section's verdict must be the one
// derived from its step artifact (whose sha256 was checked), so an edited run.json cannot
// pass a verdict the measurements do not carry.
func checkVerdicts(written, derived []record.Section) error {
	for _, d := range derived {
		if d.Replay == nil {
			continue
		}
		for _, w := range written {
			if w.Step == d.Step && w.Replay != nil && w.Replay.Verdict != d.Replay.Verdict {
				return fmt.Errorf("%w: step %s's verdict is %q in run.json but %q in its artifact", ErrArtifactChanged, d.Step, w.Replay.Verdict, d.Replay.Verdict)
			}
		}
	}
	return nil
}

// readRecord reads and checks run.json.
func readRecord(dir, path string) (*Run, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", dir, ErrNotRun, err)
	}
	r := &Run{Dir: dir, Run: derive.Of(&record.Run{}, nil)}
	r.Files = append(r.Files, record.ArtifactRef{Path: path, SHA256: sha256Hex(data)})
	if err := json.Unmarshal(data, r.Run); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrNotRun, err)
	}
	if r.Schema != record.RunSchema {
		return nil, fmt.Errorf("%s: %w: schema %q, want %q", path, ErrNotRun, r.Schema, record.RunSchema)
	}
	if r.Scenario == nil {
		return nil, fmt.Errorf("%s: %w: no %q", path, ErrNotRun, "scenario")
	}
	return r, nil
}

func joinReason(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

func loadArtifact(dir string, s record.ArtifactRef) (record.StepArtifact, error) {
	var art record.StepArtifact
	if filepath.IsAbs(s.Path) || s.Path != filepath.Base(s.Path) {
		return art, fmt.Errorf("%s: artifact path %q is not a file of the run directory", dir, s.Path)
	}
	file := filepath.Join(dir, s.Path)
	sum, err := FileSHA256(file)
	if err != nil {
		return art, fmt.Errorf("reading artifact: %w", err)
	}
	if sum != s.SHA256 {
		return art, fmt.Errorf("%s: %w (sha256 %s, run.json lists %s)", file, ErrArtifactChanged, sum, s.SHA256)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return art, fmt.Errorf("reading artifact: %w", err)
	}
	if err := json.Unmarshal(data, &art); err != nil {
		return art, fmt.Errorf("%s: %w", file, err)
	}
	if err := art.Check(); err != nil {
		return art, fmt.Errorf("%s: %w", file, err)
	}
	return art, nil
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// StepIDs lists the steps of repetition 0 in order.
func (r *Run) StepIDs() []string {
	var ids []string
	for _, st := range r.Repetitions[0].Steps {
		ids = append(ids, st.Step)
	}
	return ids
}

// LocalID is the id r's steps carry for step id, which may be named as another run names
// it: a curve point's steps were named by exact size before they were named by size class
// (scenarios.StableStepID), so an old run and a new one match by the stable name. It is id
// itself where r has no such step.
func (r *Run) LocalID(id string) string {
	if len(r.Repetitions) == 0 {
		return id
	}
	want := r.Scenario.StableStepID(id)
	for _, st := range r.Repetitions[0].Steps {
		if st.Step == id {
			return id
		}
		if r.Scenario.StableStepID(st.Step) == want {
			return st.Step
		}
	}
	return id
}

// Step returns repetition k's step id (matched as LocalID matches), or nil.
func (r *Run) Step(k int, id string) *derive.Step {
	if k >= len(r.Repetitions) {
		return nil
	}
	id = r.LocalID(id)
	for i := range r.Repetitions[k].Steps {
		if r.Repetitions[k].Steps[i].Step == id {
			return &r.Repetitions[k].Steps[i]
		}
	}
	return nil
}

// RequestValues collects a per-request metric (derive.RequestMetrics) of step id's request
// position i across every repetition: nil where it was not measured.
func (r *Run) RequestValues(id string, i int, metric string) []*float64 {
	f := derive.RequestMetrics[metric]
	var out []*float64
	for k := range r.Repetitions {
		st := r.Step(k, id)
		if f == nil || st == nil || i >= len(st.Requests) {
			out = append(out, nil)
			continue
		}
		out = append(out, f(st.Requests[i]))
	}
	return out
}

// Verdicts lists step id's replay verdict in every repetition (derive.Missing where not
// measured).
func (r *Run) Verdicts(id string) []verdict.Verdict {
	id = r.LocalID(id)
	var out []verdict.Verdict
	for k := range r.Repetitions {
		out = append(out, r.Repetitions[k].Verdict(id))
	}
	return out
}

// RepSection returns repetition k's section of step id (matched as LocalID matches), or nil.
func (r *Run) RepSection(k int, id string) *record.Section {
	if k >= len(r.Repetitions) {
		return nil
	}
	id = r.LocalID(id)
	for i := range r.Repetitions[k].Sections {
		if s := &r.Repetitions[k].Sections[i]; s.Step == id {
			return s
		}
	}
	return nil
}

// ReplayStepIDs lists the replay steps in order.
func (r *Run) ReplayStepIDs() []string {
	var ids []string
	for _, st := range r.Repetitions[0].Steps {
		if st.Kind == record.KindReplay {
			ids = append(ids, st.Step)
		}
	}
	return ids
}

// Identity is what makes two runs comparable: the scenario, the model and the prompts.
type Identity struct {
	Scenario string
	Model    string
	// Salt is the run's prompt salt ("" when none).
	Salt string
	// Prompts are repetition 0's prompt identities, "step[index]" -> sha256 identity, and
	// Shapes their shape identities (what the bytes depend on but the salt).
	Prompts map[string]string
	Shapes  map[string]string
	Order   []string
	// Traces are the sha256 of each trace step's trace, by step: two traces differ in every
	// prompt, which Mismatches says once.
	Traces map[string]string
}

// Identify returns r's identity. A prompt recorded before shapes were (its record has no
// shape) gets the shape its recorded seed, plan, prefix, mode and counting give.
func (r *Run) Identify() Identity {
	id := Identity{Scenario: r.Scenario.Name, Model: r.Model.ServedName, Salt: r.Scenario.Prompt.Salt, Prompts: map[string]string{}, Shapes: map[string]string{}, Traces: map[string]string{}}
	if r.Model.Repo != "" {
		id.Model = r.Model.Repo + " (" + r.Model.ServedName + ")"
	}
	rep := r.Repetitions[0]
	for _, st := range rep.Steps {
		if st.Trace != nil {
			id.Traces[st.Step] = st.Trace.SHA256
		}
		for _, q := range st.Requests {
			if q.ColdTwin != nil {
				continue // a replay's twin resends the replay's prompt: no prompt of its own
			}
			key := fmt.Sprintf("%s[%d]", r.Scenario.StableStepID(st.Step), q.IndexInStep)
			id.Prompts[key] = q.Prompt.Identity
			shape := q.Prompt.Shape
			if shape == "" && st.Kind != record.KindConversation {
				shape = prompts.ShapeOf(uint64(rep.Seed), q.Ordinal, q.PlannedTokens, r.Scenario.Prompt.SharedPrefixTokens, prompts.Mode(r.Scenario.Prompt.Mode), q.Prompt.TokenCounting)
			}
			id.Shapes[key] = shape
			id.Order = append(id.Order, key)
		}
	}
	return id
}

// Mismatch is one field two runs differ in.
type Mismatch struct {
	Field     string `json:"field"`
	Baseline  string `json:"baseline"`
	Candidate string `json:"candidate"`
}

// Mismatches lists where b and c differ in scenario, model or prompts. Runs of the same salt
// (or none) must have sent the same bytes; runs of different salts sent different bytes on
// purpose, and must have sent the same shapes: the same plan, sizes, seeds and modes.
func Mismatches(b, c Identity) []Mismatch {
	var out []Mismatch
	if b.Scenario != c.Scenario {
		out = append(out, Mismatch{"scenario", b.Scenario, c.Scenario})
	}
	if b.Model != c.Model {
		out = append(out, Mismatch{"model", b.Model, c.Model})
	}
	// A step that replayed another trace differs in every prompt: say so once.
	otherTrace := map[string]bool{}
	for _, step := range slices.Sorted(maps.Keys(b.Traces)) {
		if ct, ok := c.Traces[step]; ok && ct != b.Traces[step] {
			otherTrace[step] = true
			out = append(out, Mismatch{"trace of step " + step + " (sha256)", b.Traces[step], ct})
		}
	}
	stepOf := func(k string) string { return k[:strings.LastIndexByte(k, '[')] }
	what, bp, cp := "prompt identity of ", b.Prompts, c.Prompts
	if b.Salt != c.Salt {
		what, bp, cp = "prompt shape (salts differ) of ", b.Shapes, c.Shapes
	}
	for _, k := range b.Order {
		if otherTrace[stepOf(k)] {
			continue
		}
		if cv, ok := cp[k]; !ok {
			out = append(out, Mismatch{what + k, bp[k], "(no such request)"})
		} else if cv != bp[k] || cv == "" {
			out = append(out, Mismatch{what + k, orUnknown(bp[k]), orUnknown(cv)})
		}
	}
	for _, k := range c.Order {
		if _, ok := bp[k]; !ok && !otherTrace[stepOf(k)] {
			out = append(out, Mismatch{what + k, "(no such request)", cp[k]})
		}
	}
	return out
}

// orUnknown names an identity a record does not hold (a conversation turn recorded before
// shapes): it matches nothing.
func orUnknown(s string) string {
	if s == "" {
		return "(not recorded)"
	}
	return s
}
