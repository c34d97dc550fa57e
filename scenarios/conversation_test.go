package scenarios

import (
	"strings"
	"testing"
	"time"
)

const chatScenario = `name = "chat"
[server]
max_model_len = 4096
[request]
max_tokens = 32
[[step]]
id = "chat"
kind = "conversation"
users = 4
turns = 3
turn_tokens = 50
system_prompt_tokens = 100
think_time = "100ms"
arrival = "ramp"
ramp = "400ms"
`

func TestConversationStepParses(t *testing.T) {
	sc, err := Parse([]byte(chatScenario), "chat.toml")
	if err != nil {
		t.Fatal(err)
	}
	st := &sc.Steps[0]
	if !st.IsConversation() || st.Users != 4 || st.Turns != 3 || st.Concurrency != 4 {
		t.Fatalf("step = %+v", st)
	}
	if st.ScrapeInterval.Duration != sc.Target.SampleInterval.Duration {
		t.Errorf("scrape interval %s, want the sample interval", st.ScrapeInterval)
	}
	if got := sc.StepRequests(st); got != nil {
		t.Errorf("a conversation plans no requests up front, got %d", len(got))
	}
	if d := st.ArrivalDelay(2); d != 200*time.Millisecond {
		t.Errorf("user 2 of 4 arrives at %s over a 400ms ramp", d)
	}
	for u := range 4 {
		for turn := 1; turn < 3; turn++ {
			p := st.ThinkPause(sc.Prompt.Seed, u, turn)
			if p < 50*time.Millisecond || p > 150*time.Millisecond || p != st.ThinkPause(sc.Prompt.Seed, u, turn) {
				t.Fatalf("think pause %s outside [50ms, 150ms] or not seeded", p)
			}
		}
	}
	if got := sc.ConversationTokens(st); got != 100+3*50+2*32 {
		t.Errorf("longest history %d", got)
	}
}

func TestConversationStepRejects(t *testing.T) {
	cases := []struct{ edit, want string }{
		{"users = 4\n", "chat.toml:6: step[0].users: must be between 1 and 4096 (got 0)"},
		{"turns = 3\n", "chat.toml:6: step[0].turns: must be between 1 and 1000 (got 0)"},
		{`arrival = "ramp"` + "\n", `step[0].ramp: only applies to arrival = "ramp"`},
		{`ramp = "400ms"` + "\n", `step[0].ramp: arrival = "ramp" needs a ramp`},
		{"turn_tokens = 50\n", "turn_tokens = 5000\n"},
	}
	// Zero is not unset: requests = 0 is refused like any other count.
	if _, err := Parse([]byte(chatScenario+"requests = 0\n"), "chat.toml"); err == nil || !strings.Contains(err.Error(), "drop requests") {
		t.Errorf("requests = 0: err = %v, want it refused", err)
	}
	for _, c := range cases {
		src := strings.Replace(chatScenario, c.edit, "", 1)
		want := c.want
		if c.edit == "turn_tokens = 50\n" {
			src = strings.Replace(chatScenario, c.edit, c.want, 1)
			want = "step[0].turns: the last turn's history (15164 tokens) plus max_tokens (32) exceeds server.max_model_len (4096)"
		}
		_, err := Parse([]byte(src), "chat.toml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without %q: err = %v, want %q", c.edit, err, want)
		}
	}
	for _, extra := range []string{"requests = 3", "concurrency = 2", "planned_context_tokens = [100]"} {
		src := chatScenario + extra + "\n"
		if _, err := Parse([]byte(src), "chat.toml"); err == nil {
			t.Errorf("a conversation step with %s was accepted", extra)
		}
	}
	seq := "name = \"s\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [100]\nusers = 3\n"
	if _, err := Parse([]byte(seq), "s.toml"); err == nil || !strings.Contains(err.Error(), "need kind") {
		t.Errorf("users on a sequence step: err = %v", err)
	}
	bad := "name = \"s\"\n[[step]]\nid = \"a\"\nkind = \"chat\"\nplanned_context_tokens = [100]\n"
	if _, err := Parse([]byte(bad), "s.toml"); err == nil || !strings.Contains(err.Error(), "s.toml:4: step[0].kind") {
		t.Errorf("unknown kind: err = %v", err)
	}
}
