package prompts

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestBuildIsDeterministic(t *testing.T) {
	ctx := context.Background()
	a := NewBuilder(Config{Seed: 7, SharedPrefixTokens: 500})
	b := NewBuilder(Config{Seed: 7, SharedPrefixTokens: 500})
	// Build b's requests in another order: a request's bytes must not depend on history.
	pb3, err := b.Build(ctx, 3, 4000)
	if err != nil {
		t.Fatal(err)
	}
	pb0, _ := b.Build(ctx, 0, 4000)
	pa0, _ := a.Build(ctx, 0, 4000)
	pa3, _ := a.Build(ctx, 3, 4000)
	if pa0.Identity != pb0.Identity || pa3.Identity != pb3.Identity {
		t.Fatalf("identity depends on build order: %s/%s %s/%s", pa0.Identity, pb0.Identity, pa3.Identity, pb3.Identity)
	}
	if pa0.Identity == pa3.Identity {
		t.Fatal("requests 0 and 3 are identical")
	}
	again, _ := a.Build(ctx, 0, 4000)
	if again.Identity != pa0.Identity || again.Messages[1].Content != pa0.Messages[1].Content {
		t.Fatal("a replay of request 0 is not byte-identical")
	}
	other := NewBuilder(Config{Seed: 8, SharedPrefixTokens: 500})
	po0, _ := other.Build(ctx, 0, 4000)
	if po0.Identity == pa0.Identity {
		t.Fatal("seed does not change the prompt")
	}
}

func TestSharedPrefixIsIdentical(t *testing.T) {
	ctx := context.Background()
	b := NewBuilder(Config{Seed: 1, SharedPrefixTokens: 800})
	p0, _ := b.Build(ctx, 0, 3000)
	p1, _ := b.Build(ctx, 1, 5000)
	prefix := string(b.prefix)
	if !strings.HasSuffix(prefix, "\n") {
		t.Fatal("shared prefix does not end on a newline")
	}
	for _, p := range []Prompt{p0, p1} {
		if !strings.HasPrefix(p.Messages[1].Content, prefix) {
			t.Fatalf("request %d does not start with the shared prefix", p.Index)
		}
		if p.SharedPrefixSHA256 != p0.SharedPrefixSHA256 {
			t.Fatal("prefix hashes differ")
		}
	}
	// The prefix estimate lands near its plan.
	if got := EstimateTokens([]Message{{Content: systemText}, {Content: prefix}}); got < 790 || got > 800 {
		t.Fatalf("prefix estimate %d, want about 800", got)
	}
}

func TestNestedPromptsExtendEachOther(t *testing.T) {
	ctx := context.Background()
	b := NewBuilder(Config{Seed: 0, SharedPrefixTokens: 300, Mode: Nested})
	short, _ := b.Build(ctx, 0, 2000)
	long, _ := b.Build(ctx, 1, 3000)
	body := func(p Prompt) string {
		c := p.Messages[1].Content
		return c[:strings.LastIndex(c, "\n\nQuestion:")]
	}
	if !strings.HasPrefix(body(long), body(short)) {
		t.Fatal("nested prompt 1 does not extend prompt 0")
	}
}

func TestQuestionAsksPlantedFact(t *testing.T) {
	b := NewBuilder(Config{Seed: 3, SharedPrefixTokens: 200})
	p, err := b.Build(context.Background(), 2, 3000)
	if err != nil {
		t.Fatal(err)
	}
	content := p.Messages[1].Content
	q := content[strings.LastIndex(content, "Question:"):]
	label := strings.Fields(q)[6] // "Question: Which code does ledger entry R2-N record?"
	want := fmt.Sprintf("Ledger entry %s records the code %s.", label, p.ExpectedAnswer)
	if !strings.HasPrefix(label, "R2-") || !strings.Contains(content, want) {
		t.Fatalf("question %q does not ask about a fact planted in the body (want %q)", q, want)
	}
	if strings.Contains(string(b.prefix), p.ExpectedAnswer) {
		t.Fatal("the answer is in the shared prefix, not the request's own body")
	}
}

func TestEstimateLandsOnPlan(t *testing.T) {
	b := NewBuilder(Config{Seed: 0, SharedPrefixTokens: 8000})
	for _, planned := range []int{9000, 70000, 150000} {
		p, err := b.Build(context.Background(), 0, planned)
		if err != nil {
			t.Fatal(err)
		}
		if p.TokenCounting != Estimated || p.CountCalls != 0 {
			t.Fatalf("estimate mode reported %q with %d calls", p.TokenCounting, p.CountCalls)
		}
		if p.Tokens > planned || planned-p.Tokens > 8 || p.Tokens != EstimateTokens(p.Messages) {
			t.Fatalf("planned %d, estimate %d", planned, p.Tokens)
		}
	}
}

func TestTooSmallPlans(t *testing.T) {
	b := NewBuilder(Config{Seed: 0, SharedPrefixTokens: 1000})
	if _, err := b.Build(context.Background(), 0, 1000); !errors.Is(err, ErrTooSmall) {
		t.Fatalf("planned == prefix: got %v, want ErrTooSmall", err)
	}
}

// wordRuleServer is a /tokenize that counts with a known rule unlike the estimate's: one
// token per letter run of up to 3 letters, one per digit, one per other non-space byte.
func wordRuleServer(t testing.TB, calls *int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []Message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/tokenize" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		*calls++
		n := 3 // template tokens
		for _, m := range req.Messages {
			n += 2 + ruleCount(m.Content)
		}
		fmt.Fprintf(w, `{"count":%d,"max_model_len":300000,"tokens":[]}`, n)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func ruleCount(s string) int {
	n, run := 0, 0
	for _, r := range s {
		switch {
		case unicode.IsLetter(r):
			if run == 0 || run == 3 {
				n++
				run = 0
			}
			run++
		case unicode.IsSpace(r):
			run = 0
		default:
			n++
			run = 0
		}
	}
	return n
}

// httpCounter is the minimal /tokenize client the test needs; the harness's own lives in
// harness/client and is tested there against the same kind of server.
type httpCounter struct{ url string }

func (c httpCounter) CountTokens(ctx context.Context, msgs []Message) (int, error) {
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "add_generation_prompt": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/tokenize", strings.NewReader(string(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct{ Count int }
	return out.Count, json.NewDecoder(resp.Body).Decode(&out)
}

func TestServerCountingLandsWithinTolerance(t *testing.T) {
	calls := 0
	srv := wordRuleServer(t, &calls)
	b := NewBuilder(Config{Seed: 0, SharedPrefixTokens: 1000, Counter: httpCounter{srv.URL}})
	for i, planned := range []int{2000, 70000, 150000, 250000} {
		before := calls
		p, err := b.Build(context.Background(), i, planned)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			before += b.PrefixCountCalls() // the first build also sizes the shared prefix
		}
		if p.TokenCounting != CountedByServer || p.CountCalls != calls-before {
			t.Fatalf("counting %q, %d calls recorded, %d made", p.TokenCounting, p.CountCalls, calls-before)
		}
		if d := abs(p.Tokens - planned); d > Tolerance(planned) || !p.WithinTolerance {
			t.Fatalf("planned %d, server counted %d (off by %d, tolerance %d)", planned, p.Tokens, d, Tolerance(planned))
		}
		if got := 3 + 4 + ruleCount(p.Messages[0].Content) + ruleCount(p.Messages[1].Content); got != p.Tokens {
			t.Fatalf("recorded %d tokens, the rule counts %d", p.Tokens, got)
		}
		if p.CountCalls > 5 {
			t.Fatalf("planned %d took %d calls", planned, p.CountCalls)
		}
		t.Logf("planned %d: counted %d in %d calls", planned, p.Tokens, p.CountCalls)
	}
}

// goldenPlans are the requests whose identities are pinned: the built-in scenarios' shapes.
var goldenPlans = []struct {
	name    string
	seed    uint64
	prefix  int
	mode    Mode
	planned []int
}{
	{"eviction-6x150k-replay", 0, 8000, SharedPrefix, []int{150000, 150000, 150000, 150000, 150000, 150000}},
	{"offload8-control", 0, 8000, Nested, []int{70000, 80000, 100000}},
	{"smoke", 1, 256, SharedPrefix, []int{1500, 1500, 1500}},
}

func goldenIdentities(t testing.TB) string {
	var sb strings.Builder
	for _, g := range goldenPlans {
		b := NewBuilder(Config{Seed: g.seed, SharedPrefixTokens: g.prefix, Mode: g.mode})
		for i, n := range g.planned {
			p, err := b.Build(context.Background(), i, n)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&sb, "%s %d %d %d %s\n", g.name, i, n, p.Tokens, p.Identity)
		}
	}
	return sb.String()
}

// TestGoldenIdentities fails when any byte of a built-in scenario's prompts changes: records
// from different kvbench versions are comparable only while this holds.
func TestGoldenIdentities(t *testing.T) {
	path := filepath.Join("testdata", "identities.golden")
	got := goldenIdentities(t)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./prompts -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("prompt identities changed:\n--- want\n%s--- got\n%s", want, got)
	}
}

// TestIdentityAcrossProcesses builds the same prompt in a child process: nothing of the
// process (map order, addresses, start time) may leak into the bytes.
func TestIdentityAcrossProcesses(t *testing.T) {
	if os.Getenv("KVBENCH_PROMPT_CHILD") == "1" {
		p, err := NewBuilder(Config{Seed: 5, SharedPrefixTokens: 2000}).Build(context.Background(), 4, 20000)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("identity", p.Identity)
		os.Exit(0)
	}
	p, err := NewBuilder(Config{Seed: 5, SharedPrefixTokens: 2000}).Build(context.Background(), 4, 20000)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdentityAcrossProcesses$")
	cmd.Env = append(os.Environ(), "KVBENCH_PROMPT_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	if want := "identity " + p.Identity; !strings.Contains(string(out), want) {
		t.Fatalf("child printed %q, want %q", out, want)
	}
}

func BenchmarkBuild256k(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		// A fresh builder each time: the document is generated, not reused from a cache.
		bl := NewBuilder(Config{Seed: 0, SharedPrefixTokens: 8000})
		if _, err := bl.Build(context.Background(), 0, 256000); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSaltGivesFreshBytesOfTheSameShape: a salted run's prompts share nothing beyond the
// shared prefix with the unsalted run's or another salt's (bodies drawn anew, nested ones
// too), keep their prefix, sizes and shapes, and rebuild byte for byte under the same salt
// (a replay); a changed seed, plan or prefix changes the shape.
func TestSaltGivesFreshBytesOfTheSameShape(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []Mode{SharedPrefix, Nested} {
		build := func(seed uint64, salt string, prefix, planned int) Prompt {
			p, err := NewBuilder(Config{Seed: seed, Salt: salt, SharedPrefixTokens: prefix, Mode: mode}).Build(ctx, 2, planned)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		plain, a, a2, b := build(3, "", 128, 1800), build(3, "night-1", 128, 1800), build(3, "night-1", 128, 1800), build(3, "night-2", 128, 1800)
		if a.Identity != a2.Identity || a.Messages[1].Content != a2.Messages[1].Content {
			t.Fatalf("%s: the same salt built different bytes", mode)
		}
		for _, other := range []Prompt{plain, b} {
			if a.Identity == other.Identity || a.SharedPrefixSHA256 != other.SharedPrefixSHA256 || a.SharedPrefixTokens != other.SharedPrefixTokens {
				t.Errorf("%s: salted prompt has another's bytes, or another prefix", mode)
			}
			// Nothing in common beyond the prefix and the document's heading.
			prefix := strings.Index(a.Messages[1].Content, documentHeading) + len(documentHeading)
			if n := commonPrefixLen(a.Messages[1].Content, other.Messages[1].Content); n < prefix || n > prefix+20 {
				t.Errorf("%s: %d bytes in common with another salt's prompt, whose prefix ends at %d", mode, n, prefix)
			}
			if a.Shape != other.Shape || !a.WithinTolerance || !other.WithinTolerance || a.PlannedTokens != other.PlannedTokens {
				t.Errorf("%s: shape %s/%s, tokens %d/%d", mode, a.Shape, other.Shape, a.Tokens, other.Tokens)
			}
		}
		for _, changed := range []Prompt{build(4, "night-1", 128, 1800), build(3, "night-1", 256, 1800), build(3, "night-1", 128, 1700)} {
			if changed.Shape == a.Shape {
				t.Errorf("%s: a changed seed, prefix or plan kept the shape", mode)
			}
		}
	}
	if p, q := mustBuild(t, Config{Seed: 3, Mode: SharedPrefix}), mustBuild(t, Config{Seed: 3, Mode: Nested}); p.Shape == q.Shape {
		t.Error("the mode is not part of the shape")
	}
}

func mustBuild(t *testing.T, cfg Config) Prompt {
	t.Helper()
	p, err := NewBuilder(cfg).Build(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func commonPrefixLen(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
