package scenarios

import (
	"fmt"
	"time"
)

// KindConversation is the step kind of a multi-user, multi-turn chat workload.
const KindConversation = "conversation"

// Ceilings of a conversation step.
const (
	// MaxUsers bounds a conversation step's users (each is a goroutine holding a chat).
	MaxUsers = 4096
	// MaxTurns bounds the turns of each user.
	MaxTurns = 1000
	// MaxThinkTime bounds the pause between a user's turns.
	MaxThinkTime = time.Hour
	// MaxRamp bounds the time over which users arrive.
	MaxRamp = 24 * time.Hour
)

// Arrival modes of a conversation step.
const (
	ArrivalAll  = "all"  // every user starts at once
	ArrivalRamp = "ramp" // user u starts at u/users of the ramp
)

// Conversation holds the fields of a [[step]] with kind = "conversation": users chatting at
// once, each turn's prompt being the whole history so far (shared system prompt, earlier
// questions and the answers the server gave) plus a new question, so prefixes grow as in a
// real chat. Its fields sit directly in the [[step]] table.
type Conversation struct {
	Users int `toml:"users" json:"users,omitempty"`
	Turns int `toml:"turns" json:"turns,omitempty"`
	// TurnTokens is the size of each new user message (estimated, 4 bytes a token).
	TurnTokens int `toml:"turn_tokens" json:"turn_tokens,omitempty"`
	// SystemPromptTokens is the system prompt every user shares (0: none).
	SystemPromptTokens int `toml:"system_prompt_tokens" json:"system_prompt_tokens,omitempty"`
	// ThinkTime is the mean pause between a user's answer and its next question; each pause is
	// drawn from [0.5, 1.5] x ThinkTime by the prompt seed, user and turn.
	ThinkTime Duration `toml:"think_time" json:"think_time,omitzero"`
	// Arrival is "all" (default) or "ramp": user u starts at u/users x Ramp.
	Arrival string   `toml:"arrival" json:"arrival,omitempty"`
	Ramp    Duration `toml:"ramp" json:"ramp,omitzero"`
	// ScrapeInterval is how often the counters are read during the step (default: the
	// target's sample_interval).
	ScrapeInterval Duration `toml:"scrape_interval" json:"scrape_interval,omitzero"`
}

// IsConversation reports whether st is a conversation step.
func (st *Step) IsConversation() bool { return st.Kind == KindConversation }

// ConversationTokens is the largest prompt a user of st can send: the system prompt and
// every turn's question and answer (max_tokens each) before the last answer.
func (s *Scenario) ConversationTokens(st *Step) int {
	return st.SystemPromptTokens + st.Turns*st.TurnTokens + (st.Turns-1)*s.MaxTokensFor(st)
}

// ThinkPause is user's pause before turn (turn >= 1) under seed: ThinkTime x [0.5, 1.5],
// the same for the same scenario whatever the timing of the run.
func (st *Step) ThinkPause(seed int64, user, turn int) time.Duration {
	if st.ThinkTime.Duration <= 0 {
		return 0
	}
	h := splitmix(uint64(seed) ^ splitmix(uint64(user)<<20^uint64(turn)))
	f := 0.5 + float64(h>>11)/(1<<53)
	return time.Duration(float64(st.ThinkTime.Duration) * f)
}

// ArrivalDelay is when user starts after the step starts.
func (st *Step) ArrivalDelay(user int) time.Duration {
	if st.Arrival != ArrivalRamp || st.Users <= 0 {
		return 0
	}
	return time.Duration(int64(st.Ramp.Duration) * int64(user) / int64(st.Users))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// conversationDefaults fills a conversation step's unset fields.
func (s *Scenario) conversationDefaults(st *Step) {
	if st.Arrival == "" {
		st.Arrival = ArrivalAll
	}
	if st.ScrapeInterval.Duration == 0 {
		st.ScrapeInterval = s.Target.SampleInterval
	}
	if st.Concurrency == 0 {
		st.Concurrency = st.Users
	}
}

// validateConversation checks conversation step i.
func (s *Scenario) validateConversation(i int, bad func(key, format string, args ...any)) {
	st := &s.Steps[i]
	key := fmt.Sprintf("step[%d]", i)
	if st.Replay != nil || len(st.PlannedContextTokens) > 0 || st.Requests != 0 || s.defined(key+".requests") {
		bad(key+".kind", "a conversation step builds its prompts from users and turns: drop requests, planned_context_tokens and replay")
	}
	if s.defined(key + ".concurrency") {
		bad(key+".concurrency", "a conversation step runs one request per user at a time: set users instead")
	}
	if st.traceFieldsSet() {
		bad(key+".file", "file, block_tokens, start, duration, time_scale, max_input_tokens and prompt_form need kind = %q", KindTrace)
	}
	between := func(k string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(key+"."+k, "must be between %d and %d (got %d)", lo, hi, v)
		}
	}
	between("users", st.Users, 1, MaxUsers)
	between("turns", st.Turns, 1, MaxTurns)
	between("turn_tokens", st.TurnTokens, 1, MaxPromptTokens)
	between("system_prompt_tokens", st.SystemPromptTokens, 0, MaxPromptTokens)
	if d := st.ThinkTime.Duration; d < 0 || d > MaxThinkTime {
		bad(key+".think_time", "must be between 0s and %s (got %s)", MaxThinkTime, st.ThinkTime)
	}
	switch st.Arrival {
	case ArrivalAll:
		if st.Ramp.Duration != 0 {
			bad(key+".ramp", "only applies to arrival = \"ramp\"")
		}
	case ArrivalRamp:
		if d := st.Ramp.Duration; d <= 0 || d > MaxRamp {
			bad(key+".ramp", "arrival = \"ramp\" needs a ramp between 0s and %s (got %s)", MaxRamp, st.Ramp)
		}
	default:
		bad(key+".arrival", "%q is not one of %s, %s", st.Arrival, ArrivalAll, ArrivalRamp)
	}
	if st.ScrapeInterval.Duration < 10*time.Millisecond {
		bad(key+".scrape_interval", "must be at least 10ms (got %s)", st.ScrapeInterval)
	}
	if st.Users >= 1 && st.Users <= MaxUsers && st.Turns >= 1 && st.Turns <= MaxTurns && st.TurnTokens >= 1 && st.TurnTokens <= MaxPromptTokens && st.SystemPromptTokens >= 0 && st.SystemPromptTokens <= MaxPromptTokens {
		longest := s.ConversationTokens(st)
		switch {
		case longest > MaxPromptTokens:
			bad(key+".turns", "the last turn's history reaches %d tokens, above the ceiling of %d tokens per prompt", longest, MaxPromptTokens)
		case s.Server.MaxModelLen.Known() && longest+s.MaxTokensFor(st) > s.Server.MaxModelLen.Value:
			bad(key+".turns", "the last turn's history (%d tokens) plus max_tokens (%d) exceeds server.max_model_len (%d)", longest, s.MaxTokensFor(st), s.Server.MaxModelLen.Value)
		}
	}
}
