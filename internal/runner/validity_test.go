package runner

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// fiveRequests is unitScenario with five sequence requests.
var fiveRequests = strings.Replace(unitScenario, "requests = 3\n", "requests = 5\n", 1)

// TestRunRestartInsideStepInvalidatesStep: the server restarts during request 2 (the 3rd of
// 5). The counters grow past their old values by the end of the step, so the step's endpoints
// alone look monotone; the step delta must still be invalid, naming the request, and the
// sequence section must say counters_valid false.
func TestRunRestartInsideStepInvalidatesStep(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	chat.reply = func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		if n == 2 {
			m.update(func(m *fakeMetrics) {
				for c := range m.counters {
					m.counters[c] = 0 // restarted: every counter starts over
				}
			})
		}
		m.add(metrics.PromptTokens, 300)
		m.add(metrics.StoreBytes, 1000)
		return okResult(300, nil)
	}
	out := run(t, context.Background(), newConfig(t, fiveRequests, chat, m))
	seq := out.Steps[0]
	if len(seq.Requests) != 5 {
		t.Fatalf("%d requests", len(seq.Requests))
	}
	sc := seq.Span
	// Endpoints: store bytes 0 before request 0, 3000 after request 4 (1000 x 3 after the
	// restart): monotone on their own.
	if b, a := *sc.Before(metrics.StoreBytes), *sc.After(metrics.StoreBytes); b != 0 || a != 3000 {
		t.Fatalf("setup: step endpoints %v -> %v, want 0 -> 3000", b, a)
	}
	if sc.Valid {
		t.Fatal("the step delta is valid across a restart inside request 2")
	}
	if !strings.HasPrefix(sc.InvalidReasons[0], "request 2: ") || !strings.Contains(sc.InvalidReasons[0], "went down") || sc.InvalidKinds[0] != metrics.InvalidReset {
		t.Errorf("reasons %q kinds %v, want a reset naming request 2", sc.InvalidReasons, sc.InvalidKinds)
	}
	if v, ok := deltaOf(sc, metrics.StoreBytes); ok {
		t.Errorf("step store bytes delta %v is still usable; 5000 bytes were stored, the endpoints say 3000", v)
	}
	s := out.Record.Sections[0].Sequence
	if s == nil || s.CountersValid || len(s.InvalidReasons) == 0 || !strings.Contains(s.InvalidReasons[0], "request 2") {
		t.Fatalf("sequence section %+v, want counters_valid false naming request 2", s)
	}
	if s.GPUToCPUBytesDelta != nil || s.StoreProven {
		t.Errorf("section store bytes delta %v proven %v, want absent and unproven", s.GPUToCPUBytesDelta, s.StoreProven)
	}
	if d := derive.Assemble(readArtifact(t, out.Dir, "step-01-sequence.json")).Span; d.Valid || len(d.InvalidKinds) == 0 {
		t.Errorf("step-01 on disk: step span %+v, want invalid with kinds", d)
	}
}

// TestRunUnreadRequestInvalidatesStep: a request whose counters could not be read leaves a
// hole in the step's span; the step delta says so instead of bridging it.
func TestRunUnreadRequestInvalidatesStep(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	chat.reply = func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		m.add(metrics.StoreBytes, 1000)
		switch n {
		case 1:
			m.update(func(m *fakeMetrics) { m.fail = errMetrics500 })
		case 2:
			m.update(func(m *fakeMetrics) { m.fail = nil })
		}
		return okResult(300, nil)
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	seq := out.Steps[0]
	if seq.Requests[1].Counters != nil || seq.Requests[1].CountersError == "" {
		t.Fatalf("setup: request 1 counters %v error %q, want none read", seq.Requests[1].Counters, seq.Requests[1].CountersError)
	}
	d := seq.Span
	if d.Valid || !contains(d.InvalidReasons, "counters not read around request 1") || !containsKind(d.InvalidKinds, metrics.InvalidScrapeFailed) {
		t.Fatalf("step delta valid %v reasons %q kinds %v, want scrape_failed naming request 1", d.Valid, d.InvalidReasons, d.InvalidKinds)
	}
}

func contains(list []string, part string) bool {
	for _, s := range list {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}

func containsKind(list []metrics.Invalidity, k metrics.Invalidity) bool {
	for _, x := range list {
		if x == k {
			return true
		}
	}
	return false
}

// TestRunMissingOrNonFiniteGPUHits: the replay's cached tokens were GPU hits (usage: 288 of
// 300), but the GPU hit counter is absent, or reads NaN or +Inf. The verdict is invalid and
// names the counter; it is never a recompute on "0 GPU hits".
func TestRunMissingOrNonFiniteGPUHits(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpu  float64 // the counter's value after the replay; 0 with absent
		want string
	}{
		{"absent", 0, "no gpu_prefix_hits counter"},
		{"NaN", math.NaN(), "gpu_prefix_hits read NaN after (fake:gpu_prefix_hits)"},
		{"+Inf", math.Inf(1), "gpu_prefix_hits read +Inf after (fake:gpu_prefix_hits)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMetrics()
			if tc.name == "absent" {
				delete(m.counters, metrics.GPUPrefixHits)
			}
			chat := &fakeChat{m: m}
			chat.reply = func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
				m.add(metrics.PromptTokens, 300)
				if n == 3 {
					if tc.name != "absent" {
						m.set(metrics.GPUPrefixHits, tc.gpu)
					}
					return okResult(300, intp(288))
				}
				return okResult(300, nil)
			}
			out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
			v := out.Steps[1].Requests[0].Verdict
			if v == nil || v.Verdict != verdict.Invalid || !strings.Contains(v.Reason, tc.want) {
				t.Fatalf("verdict %+v, want invalid with %q", v, tc.want)
			}
			if rp := out.Record.Sections[1].Replay; rp.GPUPrefixHitsDelta != nil {
				t.Errorf("replay section gpu_prefix_hits_delta %v, want null", *rp.GPUPrefixHitsDelta)
			}
		})
	}
}

// TestRunConcurrentStepScrapeFails: /metrics answers 500 from the middle of a concurrent step
// on. The step has no counters, and the artifact, the section and the console say why
// instead of reporting counters_valid true.
func TestRunConcurrentStepScrapeFails(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	chat.reply = func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		m.add(metrics.StoreBytes, 100)
		if n == 1 {
			m.update(func(m *fakeMetrics) { m.fail = errMetrics500 })
		}
		return okResult(300, nil)
	}
	src := strings.Replace(unitScenario, "requests = 3\n", "requests = 4\nconcurrency = 2\n", 1)
	cfg := newConfig(t, src, chat, m)
	var console strings.Builder
	cfg.Sinks = append(cfg.Sinks, NewConsole(&console, false))
	out := run(t, context.Background(), cfg)

	a := out.Steps[0]
	if a.Counters != nil || !strings.Contains(a.CountersError, "after the step: ") || !strings.Contains(a.CountersError, "500 Internal Server Error") {
		t.Fatalf("step counters %v, error %q; want none and the after-scrape's 500", a.Counters, a.CountersError)
	}
	s := out.Record.Sections[0].Sequence
	if s.CountersValid || !contains(s.InvalidReasons, "500 Internal Server Error") {
		t.Errorf("section counters_valid %v reasons %q, want false with the scrape error", s.CountersValid, s.InvalidReasons)
	}
	if d := readArtifact(t, out.Dir, "step-01-sequence.json"); d.CountersError != a.CountersError {
		t.Errorf("step-01 on disk counters_error %q, want %q", d.CountersError, a.CountersError)
	}
	if !strings.Contains(console.String(), "step counters not read: after the step: ") {
		t.Errorf("console does not say the step's counters were not read:\n%s", console.String())
	}
	// The replay after it cannot be scraped either: invalid, and not called a restart.
	v := out.Steps[1].Requests[0].Verdict
	if v == nil || v.Verdict != verdict.Invalid || !strings.HasPrefix(v.Reason, "no counters were read around the replay (a scrape failed): ") {
		t.Errorf("replay verdict %+v, want invalid for a failed scrape", v)
	}
}

// TestRunSequentialStepNoCounters: when no request of a step could be scraped the step has no
// window, and says so.
func TestRunSequentialStepNoCounters(t *testing.T) {
	m := newFakeMetrics()
	m.fail = errMetrics500
	chat := &fakeChat{m: m}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	a := out.Steps[0]
	if a.Span != nil || !strings.HasPrefix(a.SpanError, "no request's counters were read: request 0: before the request: ") {
		t.Fatalf("step counters %v error %q", a.Span, a.SpanError)
	}
	if s := out.Record.Sections[0].Sequence; s.CountersValid {
		t.Errorf("section counters_valid true with no counters read: %+v", s)
	}
}

// TestRunForeignTrafficContaminates: another client's request lands inside the replay's
// window. The prompt token counter moves by 1344 while the replay's usage reports 300, so the
// window is contaminated and the verdict invalid with that reason, not a reload.
func TestRunForeignTrafficContaminates(t *testing.T) {
	m := newFakeMetrics()
	m.counters[metrics.GenerationTokens] = 0
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		m.add(metrics.GenerationTokens, float64(res.OutputTokens))
		if n == 3 {
			m.add(metrics.PromptTokens, 1044) // someone else's prompt
			m.add(metrics.GenerationTokens, 50)
		}
		return res
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	for i, r := range out.Steps[0].Requests {
		if r.Counters.Contaminated || !strings.HasPrefix(r.Counters.Isolation, "clean: prompt_tokens moved by 300, usage 300; generation_tokens moved by 10, usage 10") {
			t.Errorf("request %d: isolation %q, want clean", i, r.Counters.Isolation)
		}
	}
	d := out.Steps[1].Requests[0].Counters
	if !d.Contaminated || d.Valid || !containsKind(d.InvalidKinds, metrics.InvalidContaminated) ||
		!strings.Contains(d.Isolation, "prompt_tokens moved by 1344 but the request's usage reports 300 prompt tokens") ||
		!strings.Contains(d.Isolation, "generation_tokens moved by 60 but the request's usage reports 10 completion tokens") {
		t.Fatalf("replay delta contaminated %v valid %v isolation %q kinds %v", d.Contaminated, d.Valid, d.Isolation, d.InvalidKinds)
	}
	v := out.Steps[1].Requests[0].Verdict
	if v == nil || v.Verdict != verdict.Invalid || !strings.HasPrefix(v.Reason, "other requests ran on the server during the replay: prompt_tokens moved by 1344") {
		t.Fatalf("verdict %+v, want invalid for contamination", v)
	}
	if disk := readArtifact(t, out.Dir, "step-02-replay.json"); !disk.Requests[0].Counters.Contaminated {
		t.Error("step-02 on disk lost the contamination")
	}
}

// TestRunConcurrentRequestContaminates: the token counters match usage, but the running
// gauge shows a second request during the measured one.
func TestRunConcurrentRequestContaminates(t *testing.T) {
	m := newFakeMetrics()
	m.scraped = make(chan struct{}, 1)
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		if n == 1 {
			m.update(func(m *fakeMetrics) {
				m.gauges[metrics.RequestsRunning] = 2
				select { // drop a stale signal: wait for a scrape that sees 2
				case <-m.scraped:
				default:
				}
			})
			p(client.Progress{Phase: client.PhaseDecode, Tokens: 1}) // the sampler reads at first output
			select {
			case <-m.scraped:
			case <-time.After(10 * time.Second):
				t.Error("the sampler never scraped during the request")
			}
			m.update(func(m *fakeMetrics) { m.gauges[metrics.RequestsRunning] = 0 })
		}
		return res
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	d := out.Steps[0].Requests[1].Counters
	if !d.Contaminated || !strings.Contains(d.Isolation, "2 requests were running at once during it") {
		t.Fatalf("request 1: contaminated %v isolation %q", d.Contaminated, d.Isolation)
	}
	if s := out.Record.Sections[0].Sequence; s.CountersValid || !contains(s.InvalidReasons, "request 1: 2 requests were running at once") {
		t.Errorf("section counters_valid %v reasons %q, want the contaminated request named", s.CountersValid, s.InvalidReasons)
	}
}

// TestRunIsolationUnchecked: without token counters or a running gauge nothing can show
// another client's requests; the windows say "unchecked" and the verdict notes it, instead of
// calling them clean.
func TestRunIsolationUnchecked(t *testing.T) {
	m := newFakeMetrics()
	delete(m.counters, metrics.PromptTokens)
	delete(m.gauges, metrics.RequestsRunning)
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		m.update(func(m *fakeMetrics) { delete(m.counters, metrics.PromptTokens) }) // base moves it
		return res
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	r := out.Steps[1].Requests[0]
	d := r.Counters
	if d.Contaminated || !d.Valid || !strings.HasPrefix(d.Isolation, "unchecked: ") || !strings.Contains(d.Isolation, "no usable prompt_tokens delta") || !strings.Contains(d.Isolation, "no running-requests gauge") {
		t.Fatalf("replay delta contaminated %v valid %v isolation %q", d.Contaminated, d.Valid, d.Isolation)
	}
	if r.Verdict == nil || r.Verdict.Verdict != verdict.CPUReload || !contains(r.Verdict.Notes, "isolation unchecked: ") {
		t.Errorf("verdict %+v, want cpu_reload with an isolation-unchecked note", r.Verdict)
	}
}

// TestConsoleSaysNotExposed: on a server without offload counters the console's verdict line
// says the external hits are not exposed; it never prints them as 0.
func TestConsoleSaysNotExposed(t *testing.T) {
	m := newFakeMetrics()
	delete(m.counters, metrics.ExternalPrefixHits)
	delete(m.counters, metrics.LoadBytes)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		m.add(metrics.PromptTokens, 300)
		m.add(metrics.GPUPrefixHits, 64)
		return okResult(300, intp(64))
	}
	cfg := newConfig(t, unitScenario, chat, m)
	var console strings.Builder
	cfg.Sinks = append(cfg.Sinks, NewConsole(&console, false))
	run(t, context.Background(), cfg)
	text := console.String()
	if !strings.Contains(text, "verdict recompute: nothing beyond the 64-token shared prefix was reused (64 GPU hits, external hits not exposed)") || strings.Contains(text, "0 external") {
		t.Fatalf("console:\n%s", text)
	}
}
