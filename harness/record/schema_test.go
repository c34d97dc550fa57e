package record

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

const demoEviction = "../../internal/study/testdata/demo/eviction-6x150k-replay-20261201T060008Z"

func loadDemo(t *testing.T) *Run {
	t.Helper()
	data, err := os.ReadFile(demoEviction + "/run.json")
	if err != nil {
		t.Fatal(err)
	}
	var r Run
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestRunAccessors: sections are found by step id and kind, and a field reads by the name
// run.json gives it.
func TestRunAccessors(t *testing.T) {
	r := loadDemo(t)
	if r.Status != StatusCompleted || len(r.Sections) != 2 || r.Section("nope") != nil {
		t.Fatalf("status %q, %d sections", r.Status, len(r.Sections))
	}
	if rp := r.Replay("replay"); rp == nil || *rp.PromptTokens != 126919 || rp.ReplayOf != "eviction_sequence[0]" || !rp.IdentityMatchesOriginal {
		t.Fatalf("replay %+v", rp)
	}
	if r.Replay("eviction_sequence") != nil || r.Sequence("replay") != nil || r.Trace("replay") != nil || r.Conversation("replay") != nil {
		t.Fatal("a section answered for the wrong kind")
	}
	if s := r.Sequence("eviction_sequence"); s == nil || s.Requests != 6 || *s.GPUToCPUBytesDelta != 15143103360 {
		t.Fatalf("sequence %+v", s)
	}
	sec := r.Section("replay")
	tests := []struct {
		path   string
		ok     bool
		number float64
		text   string
		absent bool
	}{
		{"prompt_tokens", true, 126919, "", false},
		{"gpu_prefix_hits_delta", true, 6720, "", false},
		{"identity_matches_original", true, 0, "true", false},
		{"replay_of", true, 0, "eviction_sequence[0]", false},
		{"evidence", true, 0, "", true}, // an object is not one value
		{"no_such_field", false, 0, "", false},
		{"prompt_tokens.deeper", false, 0, "", false},
	}
	for _, tt := range tests {
		v, ok := sec.Field(tt.path)
		if ok != tt.ok {
			t.Errorf("%s: ok %v", tt.path, ok)
			continue
		}
		switch {
		case !ok:
		case tt.absent:
			if !v.Absent {
				t.Errorf("%s: %+v, want absent", tt.path, v)
			}
		case tt.text != "":
			if !v.IsText || v.Text != tt.text {
				t.Errorf("%s: %+v, want %q", tt.path, v, tt.text)
			}
		default:
			if v.Number == nil || *v.Number != tt.number {
				t.Errorf("%s: %+v, want %g", tt.path, v, tt.number)
			}
		}
	}
}

// TestRunDecodeErrors: a record that lists a step it has no section for, or whose scenario
// is not an object, is an error naming what is wrong.
func TestRunDecodeErrors(t *testing.T) {
	tests := []struct{ data, want string }{
		{`{"schema":"x","steps":["a"]}`, `steps lists "a" but the record has no such section`},
		{`{"schema":"x","steps":[],"scenario":[1]}`, "scenario:"},
		{`[]`, ""},
	}
	for _, tt := range tests {
		var r Run
		err := json.Unmarshal([]byte(tt.data), &r)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.data, err, tt.want)
		}
	}
	// Without a scenario a section is a replay when it has a verdict.
	var r Run
	if err := json.Unmarshal([]byte(`{"steps":["a","b"],"a":{"verdict":"recompute"},"b":{"requests":2}}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Replay("a") == nil || r.Replay("a").Verdict != "recompute" || r.Sequence("b") == nil || r.Sequence("b").Requests != 2 {
		t.Fatalf("%+v", r.Sections)
	}
}

// TestStudyKeyOrder: a study writes its header, each section under its key, then sources.
func TestStudyKeyOrder(t *testing.T) {
	r := loadDemo(t)
	s := &Study{Schema: "s", ObservedAt: "t", Model: r.Model, Runtime: r.Runtime, Cache: r.Cache, Artifacts: r.Artifacts,
		Sections: []StudySection{{Key: "replay", Section: r.Section("replay")}, {Key: "ctl", Control: &ControlSection{Sequence: "70K then replay"}}}}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{`"schema"`, `"observed_at"`, `"model"`, `"runtime"`, `"topology":{}`, `"cache"`, `"replay":{"artifact":"step-02-replay.json"`, `"ctl":{"sequence":"70K then replay"`, `"sources"`}
	at := 0
	for _, k := range keys {
		i := strings.Index(string(data[at:]), k)
		if i < 0 {
			t.Fatalf("%s missing or out of order in %.300s", k, data)
		}
		at += i
	}
}

// TestRequestCheck: each impossible value is named by its JSON path; a measured request
// passes.
func TestRequestCheck(t *testing.T) {
	neg, nan := -5.0, 0.0
	nan = nan / nan
	tests := []struct {
		name string
		set  func(q *Request)
		want string
	}{
		{"negative time", func(q *Request) { q.Result.TimeToFirstOutputMS = &neg }, "result.time_to_first_output_ms is -5"},
		{"NaN rate", func(q *Request) { q.Result.DecodeTokensPerSecond = &nan }, "result.decode_tokens_per_second is NaN"},
		{"negative count", func(q *Request) { q.Prompt.Tokens = -1 }, "prompt.tokens is -1"},
		{"negative pointer count", func(q *Request) { n := -2; q.Result.CachedPromptTokens = &n }, "result.cached_prompt_tokens is -2"},
		{"negative tier", func(q *Request) { q.Result.CachedTokensDetails = &TierTokens{Host: -3} }, "result.cached_tokens_details.host is -3"},
		{"negative spread", func(q *Request) { q.Result.InterTokenMS = &Spread{N: 2, P99: -1} }, "result.inter_token_ms.p99 is -1"},
		{"negative wait", func(q *Request) { q.Isolation = &Isolation{WaitAfterMS: -4} }, "isolation.wait_after_ms is -4"},
		{"negative turn", func(q *Request) { q.Turn = &Turn{User: -1} }, "turn.user is -1"},
	}
	ok := func() Request {
		ms := 12.5
		n := 100
		return Request{Prompt: Prompt{Tokens: 100}, Result: Result{TimeToFirstOutputMS: &ms, PromptTokens: &n, InterTokenMS: &Spread{N: 3, Median: 1}},
			Isolation: &Isolation{WaitBeforeMS: 3}, Turn: &Turn{User: 1, Turn: 2}}
	}
	q := ok()
	if err := q.Check(); err != nil {
		t.Fatalf("measured request: %v", err)
	}
	for _, tt := range tests {
		q := ok()
		tt.set(&q)
		err := q.Check()
		if !errors.Is(err, ErrImpossible) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	a := StepArtifact{Schema: StepSchema, Requests: []Request{ok(), ok()}}
	a.Requests[1].Ordinal = -7
	if err := a.Check(); !errors.Is(err, ErrImpossible) || !strings.Contains(err.Error(), "ordinal is -7") {
		t.Errorf("step: %v", err)
	}
}

func TestCountersAccessors(t *testing.T) {
	c := &Counters{Valid: true, Values: map[Counter]CounterChange{
		"load_bytes": {Before: f(100), After: f(8292), Source: "l"},
		"hits":       {Before: f(0), After: f(4), Source: "h", SourceBefore: "h0"},
		"nan":        {Before: f(1), Unreadable: true, Reason: "NaN after", Source: "n"},
	}}
	if *c.Before("load_bytes") != 100 || *c.After("load_bytes") != 8292 || c.Before("absent") != nil || c.After("absent") != nil {
		t.Fatal("before/after")
	}
	if v := c.PerToken("load_bytes", "hits"); v == nil || *v != 2048 {
		t.Fatalf("per token %v", v)
	}
	if c.PerToken("load_bytes", "absent") != nil || c.PerToken("hits", "nan") != nil {
		t.Fatal("per token of an absent counter")
	}
	if c.Unreadable("nan") != "NaN after" || c.Unreadable("hits") != "" {
		t.Fatal("unreadable")
	}
	if c.Values["hits"].BeforeSource() != "h0" || c.Values["load_bytes"].BeforeSource() != "l" {
		t.Fatal("before source")
	}
	var none *Counters
	if none.Before("x") != nil || none.After("x") != nil || none.Delta("x") != nil || none.Unreadable("x") != "" {
		t.Fatal("nil counters answered")
	}
	if k, why := c.FirstInvalid(); k != "" || why != "" {
		t.Fatalf("valid counters: %s %q", k, why)
	}
	c.Contaminate("another client")
	c.InvalidateAll(InvalidScrapeFailed, "scrape failed")
	if c.Valid || !c.Contaminated || c.Isolation != "contaminated: another client" || !c.Values["load_bytes"].Decreased || c.Values["load_bytes"].Reason != "scrape failed" {
		t.Fatalf("%+v", c)
	}
	if _, ok := c.Value("load_bytes"); ok {
		t.Fatal("an invalidated change is still usable")
	}
	if k, why := c.FirstInvalid(); k != InvalidContaminated || why != "another client" {
		t.Fatalf("first invalid %s %q", k, why)
	}
	old := &Counters{InvalidReasons: []string{"went down"}}
	if k, _ := old.FirstInvalid(); k != InvalidReset {
		t.Fatalf("a record without kinds: %s", k)
	}
}

func TestSamplesMerge(t *testing.T) {
	var s Samples
	s.Merge(nil)
	s.Merge(&Samples{IntervalMS: 250, Count: 2, PeakKVUsage: f(0.5), Series: []Sample{{AtMS: 1}}})
	s.Merge(&Samples{IntervalMS: 500, Count: 3, Errors: 1, PeakKVUsage: f(0.25), PeakRunning: f(2), Series: []Sample{{AtMS: 2}}})
	s.Merge(&Samples{PeakKVUsage: f(0.75)})
	if s.IntervalMS != 250 || s.Count != 5 || s.Errors != 1 || *s.PeakKVUsage != 0.75 || *s.PeakRunning != 2 || len(s.Series) != 2 {
		t.Fatalf("%+v", s)
	}
}

func TestSmallMethods(t *testing.T) {
	if !(&Result{ErrorKind: "http"}).Failed() || (&Result{}).Failed() {
		t.Error("Failed")
	}
	var nobody *Replica
	if nobody.Known() || (&Replica{Replica: UnknownReplica}).Known() || (&Replica{}).Known() || !(&Replica{Replica: "a"}).Known() {
		t.Error("Known")
	}
	if !(BlockDeviation{Blocks: 4, ExactBlocks: 4}).Exact() || (BlockDeviation{Blocks: 4, ExactBlocks: 4, JoinDeviation: 1}).Exact() {
		t.Error("Exact")
	}
	tests := []struct {
		s    Summary
		want string
	}{
		{Summary{}, "absent"},
		{Summary{N: 1, Median: f(120.25)}, "120.25"},
		{Summary{N: 3, Median: f(120.25), RelativeSpread: f(0.041)}, "120.25 (spread 4.1%, n=3)"},
	}
	for _, tt := range tests {
		if got := tt.s.Text(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.s, got, tt.want)
		}
	}
	split := TierSplit{Source: TierByHits, PromptTokens: f(1000), GPUHitTokens: f(250), HostHitTokens: f(500), RecomputeTokens: f(250)}
	sh := split.Shares()
	if sh.Source != TierByHits || *sh.GPU != 0.25 || *sh.Host != 0.5 || *sh.Recompute != 0.25 || *sh.PromptTokens != 1000 {
		t.Errorf("shares %+v", sh)
	}
	if sh := (TierSplit{GPUHitTokens: f(1)}).Shares(); sh.GPU != nil || sh.Host != nil {
		t.Errorf("shares without a total %+v", sh)
	}
	var p SeriesPoint
	split.Point(&p)
	if *p.PromptTokens != 1000 || *p.HostHitTokens != 500 || *p.RecomputeTokens != 250 {
		t.Errorf("point %+v", p)
	}
}

func TestWords(t *testing.T) {
	yes, no := true, false
	n := 4
	gain := []struct {
		g    *OffloadGain
		want string
		pays bool
	}{
		{nil, "not measured", false},
		{&OffloadGain{Skipped: "the engine has no way to force a miss"}, "not measured, no cold twin: the engine has no way to force a miss", false},
		{&OffloadGain{ColdTwin: "cache_salt", TwinError: "timeout"}, "not measured: the cold twin (cache_salt) failed: timeout", false},
		{&OffloadGain{}, "not measured: no time to first output", false},
		{&OffloadGain{ColdTwin: "cache_salt", TwinTTFTMS: f(300), ReplayTTFTMS: f(100), TTFTRatio: f(3), PrefillSecondsSaved: f(0.2), TwinDecode: f(50), ReplayDecode: f(51),
			TwinMissed: AnswerNo, TwinMissReason: "the twin hit a cache", Note: "n"},
			"cold twin (cache_salt) 300.0 ms vs replay 100.0 ms to first output: 3.00x, 0.200 s of prefill saved; decode 50.0 vs 51.0 tokens/s; but the twin hit a cache", true},
	}
	for _, tt := range gain {
		if got := tt.g.Words(); !strings.HasPrefix(got, tt.want) || tt.g.Pays() != tt.pays {
			t.Errorf("gain %q (pays %v), want %q", got, tt.g.Pays(), tt.want)
		}
	}
	fidelity := []struct {
		f    *ReloadFidelity
		want string
	}{
		{nil, "not compared"},
		{&ReloadFidelity{Reason: "temperature 0.7"}, "not compared: temperature 0.7"},
		{&ReloadFidelity{Compared: true, Identical: &no, Finding: "from token 3"}, "DIFFERENT: from token 3"},
		{&ReloadFidelity{Compared: true, Identical: &yes, ComparedTokens: &n, ColdTwinIdentical: &yes}, "identical to the original's output (4 token ids compared; the cold twin's too)"},
		{&ReloadFidelity{Compared: true, Identical: &yes, Basis: BasisText, ComparedBytes: &n, Truncated: true}, "identical to the original's output (4 bytes of text compared, as far as kvbench keeps them)"},
	}
	for _, tt := range fidelity {
		if got := tt.f.Words(); got != tt.want {
			t.Errorf("fidelity %q, want %q", got, tt.want)
		}
	}
}
