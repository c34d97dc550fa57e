package runs

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// threeSteps is a scenario of three steps: two sequences (3 and 2 requests) and a replay.
const threeSteps = `name = "three"
[prompt]
shared_prefix_tokens = 64
token_counting = "estimate"
[[step]]
id = "first"
requests = 3
planned_context_tokens = [400]
[[step]]
id = "second"
requests = 2
planned_context_tokens = [400]
[[step]]
id = "replay"
replay = { step = "first", request = 0 }
`

// measured is a request as a run measures it.
func measured(step string, i int) record.Request {
	ttft, e2e, decode := 40.0, 90.0, 200.0
	prompt := 400
	return record.Request{Step: step, IndexInStep: i, Ordinal: i, PlannedTokens: 400, Prompt: record.Prompt{Tokens: 400, Identity: "p"},
		Result: record.Result{TimeToFirstOutputMS: &ttft, EndToEndMS: &e2e, StreamMS: e2e, DecodeTokensPerSecond: &decode, PromptTokens: &prompt, OutputTokens: 8}}
}

// stepOf is step id of sc with n measured requests.
func stepOf(id string, n int, interrupted bool) record.StepArtifact {
	a := record.StepArtifact{Schema: record.StepSchema, Scenario: "three", Step: id, Kind: record.KindSequence, DeltaScope: record.ScopeRequest, Interrupted: interrupted, Requests: []record.Request{}}
	if id == "replay" {
		a.Kind = record.KindReplay
	}
	for i := range n {
		a.Requests = append(a.Requests, measured(id, i))
	}
	return a
}

// writeRun writes a run directory of sc: each artifact of repetition 0 (and repetition 1's
// when given) as its step file, listed in run.json with its sha256, and run.json with status.
func writeRun(t *testing.T, sc *scenarios.Scenario, status string, reps ...[]record.StepArtifact) string {
	t.Helper()
	dir := t.TempDir()
	var refs []record.ArtifactRef
	var built []derive.Repetition
	for k, arts := range reps {
		rep := derive.Repetition{Repetition: record.Repetition{Index: k, Seed: sc.RepetitionSeed(k)}}
		for i, a := range arts {
			name := ArtifactName(k, i, a.Step)
			data, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
			sum, _ := FileSHA256(filepath.Join(dir, name))
			refs = append(refs, record.ArtifactRef{Step: a.Step, Path: name, SHA256: sum, Repetition: k})
			rep.Steps, rep.Artifacts = append(rep.Steps, derive.Assemble(a)), append(rep.Artifacts, name)
		}
		built = append(built, rep)
	}
	r := derive.NewRun(derive.RunInfo{Scenario: sc, ObservedAt: time.Unix(0, 0), Status: status, Artifacts: refs, Repeat: sc.Repeat})
	r.Derive(built)
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func parseThree(t *testing.T, repeat int) *scenarios.Scenario {
	t.Helper()
	src := threeSteps
	if repeat > 0 {
		src = "repeat = " + string(rune('0'+repeat)) + "\n" + src
	}
	sc, err := scenarios.Parse([]byte(src), "three.toml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestLoadRefusesAnEditedStatus: run.json that says completed while its artifacts hold less
// than the scenario asks for (steps missing, a step file still interrupted, requests
// missing, a repetition missing) is refused, naming run.json's status and what is missing;
// the same artifacts under their true status load, and a run that did everything loads.
func TestLoadRefusesAnEditedStatus(t *testing.T) {
	sc := parseThree(t, 0)
	full := []record.StepArtifact{stepOf("first", 3, false), stepOf("second", 2, false), stepOf("replay", 1, false)}
	cases := []struct {
		name string
		sc   *scenarios.Scenario
		reps [][]record.StepArtifact
		want string
	}{
		{"two of three steps missing, the one left interrupted", sc, [][]record.StepArtifact{{stepOf("first", 2, true)}},
			`status: "completed", but repetition 0 holds steps [first] of the scenario's [first second replay] (missing [second replay])`},
		{"a step file still interrupted", sc, [][]record.StepArtifact{{stepOf("first", 3, true), full[1], full[2]}},
			`status: "completed", but step first (step-01-first.json) of repetition 0 says interrupted`},
		{"a request missing", sc, [][]record.StepArtifact{{full[0], stepOf("second", 1, false), full[2]}},
			`status: "completed", but step second (step-02-second.json) of repetition 0 holds 1 of its 2 requests`},
		{"a repetition missing", parseThree(t, 2), [][]record.StepArtifact{full},
			`status: "completed", but the scenario asks for 2 repetition(s) and the artifacts hold repetitions [0]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeRun(t, c.sc, record.StatusCompleted, c.reps...)
			_, err := Load(dir)
			if !errors.Is(err, ErrStatusContradicted) || !strings.Contains(err.Error(), filepath.Join(dir, "run.json")+": "+c.want) {
				t.Fatalf("err %v\nwant %s", err, c.want)
			}
			// Told the truth, the same artifacts load as what they are.
			r, err := Load(writeRun(t, c.sc, record.StatusInterrupted, c.reps...))
			if err != nil || r.Status != record.StatusInterrupted {
				t.Fatalf("as interrupted: %v", err)
			}
		})
	}
	if r, err := Load(writeRun(t, sc, record.StatusCompleted, full)); err != nil || r.Status != record.StatusCompleted {
		t.Fatalf("a finished run: %v", err)
	}
	if _, err := Load(writeRun(t, parseThree(t, 2), record.StatusCompleted, full, full)); err != nil {
		t.Fatalf("a finished repeated run: %v", err)
	}
}

// TestLoadRefusesImpossibleValues: a step file or journal line holding a value no
// measurement gives (a negative TTFT, a decode rate of -1e300, a negative count) is refused,
// naming the file (and line) and the field.
func TestLoadRefusesImpossibleValues(t *testing.T) {
	sc := parseThree(t, 0)
	edit := func(f func(q *record.Request)) []record.StepArtifact {
		first := stepOf("first", 3, false)
		f(&first.Requests[1])
		return []record.StepArtifact{first, stepOf("second", 2, false), stepOf("replay", 1, false)}
	}
	neg, huge, count := -5.0, -1e300, -3
	for _, c := range []struct {
		edit func(q *record.Request)
		want string
	}{
		{func(q *record.Request) { q.Result.TimeToFirstOutputMS = &neg }, "step-01-first.json: requests[1].result.time_to_first_output_ms is -5: no duration, rate or count is negative"},
		{func(q *record.Request) { q.Result.DecodeTokensPerSecond = &huge }, "step-01-first.json: requests[1].result.decode_tokens_per_second is -1e+300"},
		{func(q *record.Request) { q.Result.OutputTokens = count }, "step-01-first.json: requests[1].result.output_tokens is -3: no count is negative"},
		{func(q *record.Request) { q.Result.CachedPromptTokens = &count }, "step-01-first.json: requests[1].result.cached_prompt_tokens is -3"},
	} {
		dir := writeRun(t, sc, record.StatusCompleted, edit(c.edit))
		_, err := Load(dir)
		if !errors.Is(err, record.ErrImpossible) || !strings.Contains(err.Error(), filepath.Join(dir, c.want)) {
			t.Errorf("err %v\nwant %s", err, c.want)
		}
	}

	// An interrupted run's journal: the line and the field.
	dir := writeRun(t, sc, record.StatusInterrupted, []record.StepArtifact{stepOf("first", 3, false)})
	j, err := OpenJournal(filepath.Join(dir, JournalName(ArtifactName(0, 1, "second"))))
	if err != nil {
		t.Fatal(err)
	}
	bad := measured("second", 1)
	bad.Result.TimeToFirstOutputMS = &neg
	for _, q := range []record.Request{measured("second", 0), bad} {
		if err := j.Append(q); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	_, err = Load(dir)
	if want := j.Path() + ":2: result.time_to_first_output_ms is -5"; !errors.Is(err, record.ErrImpossible) || !strings.Contains(err.Error(), want) {
		t.Errorf("journal: %v\nwant %s", err, want)
	}
}
