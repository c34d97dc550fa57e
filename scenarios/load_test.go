package scenarios

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBuiltinsLoad(t *testing.T) {
	names := BuiltinNames()
	want := []string{"eviction-6x150k-replay", "offload8-control", "smoke"}
	for _, w := range want {
		found := false
		for _, n := range names {
			found = found || n == w
		}
		if !found {
			t.Fatalf("built-in %q missing from %v", w, names)
		}
	}
	for _, n := range names {
		s, err := Builtin(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if s.Name != n || s.Description == "" {
			t.Errorf("%s: name %q, description %q", n, s.Name, s.Description)
		}
	}
}

func TestEvictionScenarioShape(t *testing.T) {
	s, err := Builtin("eviction-6x150k-replay")
	if err != nil {
		t.Fatal(err)
	}
	seq, replay := s.StepByID("eviction_sequence"), s.StepByID("replay")
	if seq == nil || replay == nil {
		t.Fatal("steps eviction_sequence and replay expected")
	}
	reqs := s.StepRequests(seq)
	if len(reqs) != 6 || reqs[5].PlannedTokens != 150000 || reqs[5].Ordinal != 5 || seq.Concurrency != 1 {
		t.Fatalf("sequence %+v", reqs)
	}
	r := s.StepRequests(replay)
	if len(r) != 1 || !r[0].Replay || r[0].Ordinal != 0 || r[0].PlannedTokens != 150000 {
		t.Fatalf("replay %+v", r)
	}
	if s.Prompt.SharedPrefixTokens != 8000 || s.Prompt.Seed != 0 {
		t.Fatalf("prompt %+v", s.Prompt)
	}
	if s.Request.Timeout.Duration != 10*time.Minute || s.Target.SampleInterval.Duration != 100*time.Millisecond {
		t.Fatalf("defaults: %+v %+v", s.Request, s.Target)
	}
}

const validBase = `name = "t"
[target]
endpoint = "http://127.0.0.1:8000/v1"
[server]
gpu_kv_tokens = 1000
[prompt]
seed = 1
shared_prefix_tokens = 100
`

func TestInvalidScenarios(t *testing.T) {
	cases := []struct {
		name string
		toml string
		want []string // substrings of the one-line error, each with key and line
	}{
		{"unknown key", validBase + "bogus = 1\n[[step]]\nid = \"a\"\nplaned_context_tokens = [500]\nplanned_context_tokens = [500]\n",
			[]string{"t.toml:9: prompt.bogus: unknown key", "t.toml:12: step.planed_context_tokens: unknown key"}},
		{"wrong type", validBase + "[[step]]\nid = \"a\"\nrequests = \"six\"\nplanned_context_tokens = [500]\n",
			[]string{"t.toml:11: step[0].requests: incompatible types: TOML value has type string; destination has type integer"}},
		{"syntax error", validBase + "[[step]\nid = \"a\"\n", []string{"t.toml:", "delimiter"}},
		{"replay of missing step", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n[[step]]\nid = \"b\"\nreplay = { step = \"nope\", request = 0 }\n",
			[]string{`t.toml:14: step[1].replay.step: "nope" is not an earlier step`}},
		{"replay of missing index", validBase + "[[step]]\nid = \"a\"\nrequests = 2\nplanned_context_tokens = [500]\n[[step]]\nid = \"b\"\nreplay = { step = \"a\", request = 2 }\n",
			[]string{`t.toml:15: step[1].replay.request: step "a" has no request 2`}},
		{"prefix not smaller than plan", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500, 100]\nrequests = 2\n",
			[]string{"t.toml:11: step[0].planned_context_tokens: value 1 (100) is not larger than prompt.shared_prefix_tokens (100)"}},
		{"count below 1", validBase + "[[step]]\nid = \"a\"\nrequests = 0\nplanned_context_tokens = [500]\n",
			[]string{"t.toml:11: step[0].requests: must be at least 1 (got 0)"}},
		{"concurrency below 1", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\nconcurrency = 0\n",
			[]string{"t.toml:12: step[0].concurrency: must be at least 1 (got 0)"}},
		{"all problems at once", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\nconcurrency = 0\n[[step]]\nid = \"a\"\nrequests = -1\nplanned_context_tokens = [50]\n",
			[]string{"t.toml:12: step[0].concurrency", `t.toml:14: step[1].id: "a" repeats`, "t.toml:15: step[1].requests", "t.toml:16: step[1].planned_context_tokens"}},
		{"bad enum", validBase + "token_counting = \"guess\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			[]string{`t.toml:9: prompt.token_counting: "guess" is not one of server, estimate`}},
		{"no steps", validBase, []string{"a scenario needs at least one [[step]]"}},
		{"gate on missing step", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n[[gate]]\nstep = \"z\"\nverdict = \"maybe\"\n",
			[]string{`t.toml:13: gate[0].step: "z" is not a step`, `t.toml:14: gate[0].verdict: "maybe" is not one of`}},
		{"planned list length", validBase + "[[step]]\nid = \"a\"\nrequests = 3\nplanned_context_tokens = [500, 600]\n",
			[]string{"t.toml:12: step[0].planned_context_tokens: has 2 values for 3 requests"}},
		{"bad duration", validBase + "[request]\ntimeout = \"soon\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			[]string{"t.toml:10", "invalid duration"}},
		{"sizes beyond any server", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [1000000000000]\n[[step]]\nid = \"b\"\nrequests = 1000000000\nplanned_context_tokens = [500]\nconcurrency = 5000\n",
			[]string{"t.toml:11: step[0].planned_context_tokens: value 0 (1000000000000) is above the ceiling of 10000000",
				"t.toml:14: step[1].requests: 1000000000 is above the ceiling of 100000", "t.toml:16: step[1].concurrency: 5000 is above the ceiling of 4096"}},
		{"too many tokens in all", validBase + "[[step]]\nid = \"a\"\nrequests = 20\nplanned_context_tokens = [9000000]\n",
			[]string{"t.toml:9: step: the steps plan 180000000 tokens in all, above the ceiling of 100000000"}},
		{"huge max_tokens", validBase + "[request]\nmax_tokens = 100000000\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			[]string{"t.toml:10: request.max_tokens: 100000000 is above the ceiling"}},
		{"negative durations", validBase + "[request]\ntimeout = \"-1s\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n[[probe]]\nname = \"p\"\nwhen = \"before\"\ncommand = [\"true\"]\ntimeout = \"-5m\"\n",
			[]string{"t.toml:10: request.timeout: must be positive (got -1s)", "t.toml:18: probe[0].timeout: must be positive (got -5m0s)"}},
		{"name with a slash", strings.Replace(validBase, `name = "t"`, `name = "../../etc/x"`, 1) + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			[]string{`t.toml:1: name: "../../etc/x" must be letters, digits`}},
		{"name with NUL", strings.Replace(validBase, `name = "t"`, `name = "a\u0000b"`, 1) + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			[]string{`t.toml:1: name: "a\x00b" must be letters, digits`}},
		{"long name and step id", strings.Replace(validBase, `name = "t"`, `name = "`+strings.Repeat("n", 201)+`"`, 1) + "[[step]]\nid = \"" + strings.Repeat("a", 201) + "\"\nplanned_context_tokens = [500]\n",
			[]string{"t.toml:1: name: is 201 bytes long; at most 200", "t.toml:10: step[0].id: is 201 bytes long; at most 200"}},
		{"wrong type in an array of tables", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n[[step]]\nid = \"b\"\nplanned_context_tokens = \"x\"\n",
			[]string{"t.toml:14: step[1].planned_context_tokens: incompatible types"}},
		{"control without key", validBase + "[study]\nrole = \"control\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			[]string{"study.key"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.toml), "t.toml")
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestAutoIntAndDefaults(t *testing.T) {
	s, err := Parse([]byte(strings.Replace(validBase, "gpu_kv_tokens = 1000", "gpu_kv_tokens = \"server\"\nblock_size = 16", 1)+
		"[[step]]\nid = \"a\"\nplanned_context_tokens = [500, 600]\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Server.GPUKVTokens.FromServer || s.Server.BlockSize.Value != 16 || s.Server.BlockSize.FromServer {
		t.Fatalf("server %+v", s.Server)
	}
	if st := s.Steps[0]; st.Requests != 2 || st.Concurrency != 1 || st.Planned(1) != 600 {
		t.Fatalf("step defaults %+v", st)
	}
	if s.Position("step[0].planned_context_tokens") != "t.toml:12" {
		t.Fatalf("position %q", s.Position("step[0].planned_context_tokens"))
	}
}

func TestResolveUnknown(t *testing.T) {
	if _, err := Resolve("no-such-scenario"); !errors.Is(err, ErrUnknownScenario) {
		t.Fatalf("got %v", err)
	}
	if _, err := Resolve("missing/file.toml"); err == nil {
		t.Fatal("missing file accepted")
	}
}

func FuzzParse(f *testing.F) {
	for _, n := range BuiltinNames() {
		data, _ := builtinFiles.ReadFile(n + ".toml")
		f.Add(string(data))
	}
	f.Add(validBase + "[[step]]\nid = \"a\"\nreplay = { step = \"a\", request = -1 }\n")
	f.Add("[[step]]\n[[step]]\nid=1\n")
	f.Add("a = \"\"\"\nmulti\n\"\"\"\n[x]\n")
	f.Add("[target]\nmetrics = [\n\"http://x\",\n]\n")
	f.Add("server.gpu_kv_tokens = true\n")
	f.Fuzz(func(t *testing.T, src string) {
		s, err := Parse([]byte(src), "fuzz.toml")
		if err == nil && s == nil {
			t.Fatal("nil scenario without error")
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
	})
}

func TestRequestKnobs(t *testing.T) {
	src := validBase + `[request]
max_tokens = 100
ignore_eos = true
min_tokens = 10
extra_body = { top_k = 1, chat_template_kwargs = { enable_thinking = false } }
[[step]]
id = "a"
planned_context_tokens = [500]
[[step]]
id = "b"
planned_context_tokens = [500]
ignore_eos = false
min_tokens = 0
max_tokens = 20
extra_body = { top_k = 5, seed = 7 }
`
	s, err := Parse([]byte(src), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.RequestFor(s.StepByID("a")), s.RequestFor(s.StepByID("b"))
	if !a.IgnoreEOS || a.MinTokens != 10 || a.MaxTokens != 100 || a.ExtraBody["top_k"] != int64(1) {
		t.Errorf("step a: %+v", a)
	}
	if b.IgnoreEOS || b.MinTokens != 0 || b.MaxTokens != 20 || b.ExtraBody["top_k"] != int64(5) || b.ExtraBody["seed"] != int64(7) {
		t.Errorf("step b: %+v", b)
	}
	if kw, _ := b.ExtraBody["chat_template_kwargs"].(map[string]any); kw["enable_thinking"] != false {
		t.Errorf("step b lost the request's extra_body keys: %+v", b.ExtraBody)
	}
	if s.Request.ExtraBody["top_k"] != int64(1) {
		t.Errorf("merging changed the request defaults: %+v", s.Request.ExtraBody)
	}
}

func TestInvalidRequestKnobs(t *testing.T) {
	cases := []struct{ name, toml, want string }{
		{"reserved extra_body key", validBase + "[request]\nextra_body = { stream = false }\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			`t.toml:10: request.extra_body.stream: kvbench sets "stream" itself`},
		{"reserved key in a step", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\nextra_body = { model = \"x\" }\n",
			`t.toml:12: step[0].extra_body.model: kvbench sets "model" itself`},
		{"min_tokens above max_tokens", validBase + "[request]\nmax_tokens = 8\nmin_tokens = 9\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			"t.toml:11: request.min_tokens: 9 is above max_tokens (8)"},
		{"negative step min_tokens", validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\nmin_tokens = -1\n",
			"t.toml:12: step[0].min_tokens: must not be negative"},
		{"NaN temperature", validBase + "[request]\ntemperature = nan\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n",
			"request.temperature: must be 0 or more (got NaN)"},
		// Checked at validate, not after the whole run.
		{"identical output of a sampled replay", validBase + "[request]\ntemperature = 0.7\n[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n" +
			"[[step]]\nid = \"r\"\nreplay = { step = \"a\", request = 0 }\n[[gate]]\nstep = \"r\"\nrequire_identical_output = true\n",
			"gate[0].require_identical_output: needs request.temperature = 0 (got 0.7)"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.toml), "t.toml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}
