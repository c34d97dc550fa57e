package claims

import (
	"errors"
	"strings"
	"testing"
)

func f(v float64) *float64 { return &v }

// TestSeed001Arithmetic judges seed 001's own replay numbers against claims written from
// them: every one reproduces, and numbers just outside each band do not.
func TestSeed001Arithmetic(t *testing.T) {
	cases := []struct {
		name string
		e    Expectation
		m    Measured
		want Status
	}{
		{"prefill within 15% of 137,856", Expectation{Metric: "effective_prefill_tokens_per_second", Value: f(137856), Tolerance: f(0.15)},
			Measured{Numbers: []*float64{f(137855.8117992414)}}, Reproduced},
		{"prefill 16% low", Expectation{Metric: "effective_prefill_tokens_per_second", Value: f(137856), Tolerance: f(0.15)},
			Measured{Numbers: []*float64{f(137856 * 0.84)}}, NotReproduced},
		{"cached fraction >= 0.99", Expectation{Metric: "cached_fraction", AtLeast: f(0.99)},
			Measured{Numbers: []*float64{f(0.9976599750162746)}}, Reproduced},
		{"cached fraction of the 8 GiB control's GPU hit is no reload proof", Expectation{Metric: "cached_fraction", AtLeast: f(0.999)},
			Measured{Numbers: []*float64{f(0.9976599750162746)}}, NotReproduced},
		{"decode within 15% of 117.73 (161 / 1.3675 s)", Expectation{Metric: "decode_tokens_per_second", Value: f(117.73), Tolerance: f(0.15)},
			Measured{Numbers: []*float64{f(117.73168626941829)}}, Reproduced},
		{"load bytes per token 1,001,721,600 / 113,408", Expectation{Metric: "load_bytes_per_token", Value: f(8833), Tolerance: f(0.001)},
			Measured{Numbers: []*float64{f(1001721600.0 / 113408)}}, Reproduced},
		{"TTFT at most 1 s", Expectation{Metric: "time_to_first_output_ms", AtMost: f(1000)},
			Measured{Numbers: []*float64{f(824.5862000039779)}}, Reproduced},
		{"verdict cpu_reload", Expectation{Metric: "verdict", Equals: "cpu_reload"},
			Measured{Words: []string{"cpu_reload"}}, Reproduced},
		{"verdict of the control", Expectation{Metric: "verdict", Equals: "cpu_reload"},
			Measured{Words: []string{"gpu_hit"}}, NotReproduced},
		// A disagreement across repeats is reported, not averaged away.
		{"repeats disagree", Expectation{Metric: "verdict", Equals: "cpu_reload"},
			Measured{Words: []string{"cpu_reload", "recompute", "cpu_reload"}}, NotReproduced},
		// The median decides numbers; the spread is reported with it.
		{"median of repeats", Expectation{Metric: "effective_prefill_tokens_per_second", Value: f(137856), Tolerance: f(0.15)},
			Measured{Numbers: []*float64{f(90000), f(130000), f(140000)}}, Reproduced},
		{"absent counter", Expectation{Metric: "external_prefix_hits_delta", Value: f(113408), Tolerance: f(0.05)},
			Measured{Numbers: []*float64{nil}, Missing: "external_prefix_hits_delta is absent (null) in 1 of 1 measurements"}, NotMeasurable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Evaluate(c.e, c.m)
			if r.Status != c.want {
				t.Fatalf("%s (%s), want %s", r.Status, r.Why, c.want)
			}
			if c.want == NotMeasurable && !strings.Contains(r.Why, "absent") {
				t.Fatalf("not measurable without why: %q", r.Why)
			}
		})
	}
	r := Evaluate(Expectation{Metric: "effective_prefill_tokens_per_second", Value: f(137856), Tolerance: f(0.15)}, Measured{Numbers: []*float64{f(137855.8117992414)}})
	if r.Claimed != "137856 within 15%" || r.Why != "median 137855.8 is 0.0001365% below 137856 (tolerance 15%)" {
		t.Fatalf("claimed %q why %q", r.Claimed, r.Why)
	}
}

func TestParseStrict(t *testing.T) {
	_, err := Parse([]byte(`title = "x"
[source]
url = "https://example.org/recipe"
observed_date = "2026-08-02"
evidnce_type = "typo"

[[expect]]
metric = "cached_fraction"
at_least = 0.99
value = 0.99

[[expect]]
metric = "effective_prefill_tokens_per_second"
value = 137856
`), "claim.toml")
	var ie *InvalidError
	if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("err %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"claim.toml:5: source.evidnce_type: unknown key",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	// With the typo fixed, every validation problem is reported at once, with its line.
	_, err = Parse([]byte(`[source]
url = "https://example.org/recipe"

[[expect]]
metric = "cached_fraction"
at_least = 0.99
value = 0.99

[[expect]]
metric = "effective_prefill_tokens_per_second"
value = 137856
`), "claim.toml")
	msg = err.Error()
	for _, want := range []string{
		"claim.toml:1: source.observed_date: a claim must say when",
		"claim.toml:4: expect[0]: give exactly one of",
		"claim.toml:9: expect[1].tolerance: a value needs a relative tolerance",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Count(msg, "\n") != 0 {
		t.Errorf("error is not one line: %q", msg)
	}
}

func TestParseDefaultsStep(t *testing.T) {
	c, err := Parse([]byte("[source]\nurl = \"u\"\nobserved_date = \"2026-08-02\"\n[[expect]]\nmetric = \"verdict\"\nequals = \"cpu_reload\"\n"), "c.toml")
	if err != nil || c.Expect[0].Step != "replay" {
		t.Fatalf("%v %+v", err, c)
	}
}

// FuzzParse: a claim file never panics the parser.
func FuzzParse(f *testing.F) {
	f.Add([]byte("[source]\nurl = \"u\"\nobserved_date = \"d\"\n[[expect]]\nmetric = \"m\"\nvalue = 1\ntolerance = 0.1\n"))
	f.Add([]byte("[[expect]]\nat_least = 1\nat_most = 0\n"))
	f.Add([]byte("[source\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		Parse(data, "fuzz.toml")
	})
}

// TestUnknownMetricIsInvalid: a misspelled metric is a problem of the claim file (with its
// line and a suggestion), not a value that is never measurable.
func TestUnknownMetricIsInvalid(t *testing.T) {
	src := "[source]\nurl = \"https://example.com/r\"\nobserved_date = \"2026-08-02\"\n[[expect]]\nmetric = \"cached_fractoin\"\nat_least = 0.99\n[[expect]]\nmetric = \"evidence.hit_coverage\"\nat_least = 0.9\n[[expect]]\nmetric = \"hit_coverage\"\nat_least = 0.9\n"
	_, err := Parse([]byte(src), "c.toml")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `c.toml:5: expect[0].metric: "cached_fractoin" is not a field of a step's record section (did you mean "cached_fraction"?)`) {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "expect[1]") || strings.Contains(err.Error(), "expect[2]") {
		t.Errorf("a nested field or an alias was refused: %v", err)
	}
	for _, ok := range []string{"verdict", "external_prefix_hits_delta", "replay_verdict", "prompt_tokens", "evidence.measured_load_bytes_per_token"} {
		if !KnownField(ok) {
			t.Errorf("%s is a record field but not known", ok)
		}
	}
}

// TestClaimValueMustFitItsField: a claimed value the field can never hold (a misspelt
// verdict, "maybe" for yes/no/unknown, a number claimed as a word or a verdict as a number)
// is a problem of the claim file with its line, not a measurement that "did not reproduce".
func TestClaimValueMustFitItsField(t *testing.T) {
	head := "[source]\nurl = \"https://example.com/r\"\nobserved_date = \"2026-08-02\"\n[[expect]]\n"
	cases := []struct {
		name, expect, want string
	}{
		{"misspelt verdict", "metric = \"verdict\"\nequals = \"cpu_relaod\"\n", `c.toml:6: expect[0].equals: "cpu_relaod" is not a value of verdict, which is one of cpu_reload, gpu_hit, partial, recompute, cache_hit_tier_unknown, invalid (did you mean "cpu_reload"?)`},
		{"maybe", "metric = \"setup_valid\"\nequals = \"maybe\"\n", `c.toml:6: expect[0].equals: "maybe" is not a value of setup_valid, which is one of yes, no, unknown`},
		{"bool word", "metric = \"identity_matches_original\"\nequals = \"yes\"\n", `"yes" is not a value of identity_matches_original, which is one of true, false`},
		{"control verdict", "step = \"control\"\nmetric = \"replay_verdict\"\nequals = \"gpuhit\"\n", `c.toml:7: expect[0].equals: "gpuhit" is not a value of replay_verdict`},
		{"number as a word", "metric = \"cached_fraction\"\nequals = \"0.99\"\n", `c.toml:6: expect[0].equals: "cached_fraction" is a number: claim it with value and tolerance, or at_least/at_most`},
		{"verdict as a number", "metric = \"verdict\"\nat_least = 1.0\n", `c.toml:4: expect[0]: verdict is text, not a number: claim it with equals`},
		{"a group of fields", "metric = \"capacity\"\nequals = \"yes\"\n", `"capacity" is not one value`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(head+c.expect), "c.toml")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
		// A field several sections hold lists its values once.
		if err != nil && strings.Count(err.Error(), "unknown, yes") > 0 {
			t.Errorf("%s: %v lists the values twice", c.name, err)
		}
	}
	for _, ok := range []string{
		"metric = \"verdict\"\nequals = \"cpu_reload\"\n",
		"metric = \"setup_valid\"\nequals = \"unknown\"\n",
		"metric = \"evidence.verdict\"\nequals = \"gpu_hit\"\n",
		"metric = \"interpretation\"\nequals = \"any words\"\n",
		"metric = \"time_to_first_output_ms\"\nat_most = 1000.0\n", // a list in sequences, a number in replays
	} {
		if _, err := Parse([]byte(head+ok), "c.toml"); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// TestCurveClaimKeys: from_tokens and to_tokens bound a curve's points only; a range runs
// upwards; a misspelt curve field suggests the nearest one.
func TestCurveClaimKeys(t *testing.T) {
	head := "title = \"x\"\n[source]\nurl = \"https://example.org\"\nobserved_date = \"2026-08-02\"\n[[expect]]\n"
	f, err := Parse([]byte(head+"metric = \"reload_curve.gain\"\nfrom_tokens = 4096\nat_least = 2\nat_most = 22\n"), "c.toml")
	if err != nil {
		t.Fatal(err)
	}
	if e := f.Expect[0]; e.Step != "" || *e.FromTokens != 4096 || e.Claimed() != "2..22 from 4096 tokens" || !e.InRange(4096) || e.InRange(4095) {
		t.Errorf("%+v claimed %q", e, e.Claimed())
	}
	for body, want := range map[string]string{
		"metric = \"cached_fraction\"\nfrom_tokens = 4096\nat_least = 0.9\n":                   "c.toml:7: expect[0].from_tokens: bounds the points of a reload curve",
		"metric = \"reload_curve.gain\"\nfrom_tokens = 8192\nto_tokens = 4096\nat_least = 2\n": "expect[0].from_tokens: 8192 is above to_tokens 4096",
		"metric = \"reload_curve.gain\"\nto_tokens = 0\nat_least = 2\n":                        "expect[0].to_tokens: must be at least 1 token",
		"metric = \"reload_curve.gian\"\nat_least = 2\n":                                       `"reload_curve.gian" is not a field of a step's record section (did you mean "reload_curve.gain"?)`,
		"metric = \"reload_curve.verdict\"\nequals = \"cpu_relaod\"\n":                         `(did you mean "cpu_reload"?)`,
	} {
		_, err := Parse([]byte(head+body), "c.toml")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
