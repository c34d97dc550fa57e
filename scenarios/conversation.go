package scenarios

import (
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
