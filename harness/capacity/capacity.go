// Package capacity does the KV capacity arithmetic that decides whether a scenario can prove
// a reload from the CPU tier at all: is the replayed prompt pushed out of the GPU pool, and
// does the CPU tier hold it until the replay (docs/domain.md, "Sizing the CPU tier"). It is pure
// computation: plan uses it with planned tokens, run with measured ones.
package capacity

import (
	"fmt"
	"math"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// GiB is 2^30 bytes, the unit of vLLM's --kv-offloading-size.
const GiB = 1 << 30

// Answer is yes, no, or unknown when an input is missing: the record's type.
type Answer = record.Answer

const (
	Yes     = record.AnswerYes
	No      = record.AnswerNo
	Unknown = record.AnswerUnknown
)

func answer(known, v bool) Answer {
	switch {
	case !known:
		return Unknown
	case v:
		return Yes
	default:
		return No
	}
}

// Topology is how an engine keeps KV state on the device, which decides what evicts a prompt:
// the record's type, whose values are these.
type Topology = record.Topology

const (
	// SharedPool is a paged device pool shared by all sequences (vLLM): a prompt leaves it
	// only when the unique tokens sent after it exceed the pool.
	SharedPool Topology = "shared_pool"
	// SingleSlot keeps one live sequence per slot (llama.cpp's server): with one slot, any
	// other prompt replaces the replayed one, and only the host tier can bring it back.
	SingleSlot Topology = "single_slot"
)

// Setup is what is known of the server's KV capacity, the record's type (see there). Zero
// means unknown.
type Setup = record.Setup

// tierWords names the CPU tier in a sentence: its GiB, or the tokens the server reports.
func tierWords(s Setup) string {
	if s.HostTierTokens > 0 {
		return fmt.Sprintf("host tier of %s tokens (%s)", units.Grouped(s.HostTierTokens), s.HostTierTokensSource)
	}
	return fmt.Sprintf("%s GiB CPU tier", units.Exact(s.CPUOffloadGiB))
}

// Sequence is the requests sent up to and including the replayed one's successors.
type Sequence struct {
	// Tokens holds each request's prompt tokens in send order (planned or measured).
	Tokens []int
	// Target is the index in Tokens of the request that will be replayed.
	Target int
	// SharedPrefix is the prefix all requests share; Nested means each request extends the
	// previous one, so they share everything up to the shorter one's length.
	SharedPrefix int
	Nested       bool
	// Counting says where Tokens come from: "estimate" (plans by the 4-bytes rule, which
	// runs high on real tokenizers), "server" (plans counted by /tokenize) or "measured"
	// (usage of sent requests).
	Counting string
}

// UniqueSinceTarget is the number of distinct prompt tokens the server computes from the
// target's first send through the last request: what must fit in the CPU tier for the target
// to survive there, and what must exceed the GPU pool for the target to leave it.
func (q Sequence) UniqueSinceTarget() int {
	if q.Target < 0 || q.Target >= len(q.Tokens) {
		return 0
	}
	if q.Nested {
		m := 0
		for _, t := range q.Tokens[q.Target:] {
			m = max(m, t)
		}
		return m
	}
	u := q.SharedPrefix
	for _, t := range q.Tokens[q.Target:] {
		u += max(t-q.SharedPrefix, 0)
	}
	return u
}

// Assessment is the capacity math for one replay: the record's Capacity, with the sentences
// that explain it.
type Assessment struct {
	record.Capacity
}

// Assess does the capacity math for a replay of seq.Target.
func Assess(s Setup, seq Sequence) Assessment {
	if s.Topology == SingleSlot {
		return assessSingleSlot(s, seq)
	}
	a := Assessment{record.Capacity{Setup: s, UniqueTokens: seq.UniqueSinceTarget(), TokenCounting: seq.Counting}}
	a.CPUTierBytes = s.CPUOffloadGiB * GiB
	perTok := s.StoreBytesPerToken
	if perTok > 0 {
		a.CPUTierTokens = math.Floor(a.CPUTierBytes / perTok)
		if s.GPUKVTokens > 0 {
			a.GPUPoolBytes = float64(s.GPUKVTokens) * perTok
		}
	}
	if s.HostTierTokens > 0 { // the server says it in tokens: no bytes per token needed
		a.CPUTierTokens = float64(s.HostTierTokens)
		if perTok > 0 {
			a.CPUTierBytes = a.CPUTierTokens * perTok
		}
	}
	tokensWord := "planned, " + seq.Counting
	if seq.Counting == "measured" {
		tokensWord = "measured"
	}

	a.EvictionPressure = answer(s.GPUKVTokens > 0, a.UniqueTokens > s.GPUKVTokens)
	switch a.EvictionPressure {
	case Yes:
		a.add("The requests from the replayed one on need %s unique tokens (%s), more than the %s-token GPU KV pool: the replayed prompt is pushed out of GPU memory.", units.Grouped(a.UniqueTokens), tokensWord, units.Grouped(s.GPUKVTokens))
	case No:
		a.add("The requests from the replayed one on need %s unique tokens (%s), which fit in the %s-token GPU KV pool: the replayed prompt can stay in GPU memory, so its replay is expected to be a GPU hit.", units.Grouped(a.UniqueTokens), tokensWord, units.Grouped(s.GPUKVTokens))
	default:
		a.add("The GPU KV pool size is unknown, so eviction from GPU memory cannot be predicted.")
	}

	switch {
	case s.CPUOffloadGiB <= 0 && s.HostTierTokens <= 0:
		a.TierLargerThanGPU, a.TierHoldsSequence = No, No
		a.add("No CPU offload tier is configured: a replay can only be a GPU hit or a recompute.")
	case perTok <= 0 && s.HostTierTokens <= 0:
		a.TierLargerThanGPU, a.TierHoldsSequence = Unknown, Unknown
		a.add("Bytes per stored token are unknown, so the %s GiB CPU tier cannot be compared with the GPU pool; a run measures them from the store counters.", units.Exact(s.CPUOffloadGiB))
	default:
		a.TierLargerThanGPU = answer(s.GPUKVTokens > 0, a.CPUTierTokens > float64(s.GPUKVTokens))
		a.TierHoldsSequence = answer(true, float64(a.UniqueTokens) <= a.CPUTierTokens)
		if a.TierHoldsSequence == No && seq.Counting == "estimate" {
			// An estimate that overflows may still fit once the server counts (seed 001 did).
			a.TierHoldsSequence = Unknown
		}
		at := fmt.Sprintf("At %s bytes per stored token (%s), the %s GiB CPU tier holds about %s tokens,", units.Grouped(int(perTok)), s.StoreBytesSource, units.Exact(s.CPUOffloadGiB), units.Grouped(int(a.CPUTierTokens)))
		if s.HostTierTokens > 0 {
			at = "The server reports a " + tierWords(s) + ","
		}
		switch a.TierLargerThanGPU {
		case Yes:
			a.add("%s more than the %s-token GPU pool: a valid eviction-reload setup.", at, units.Grouped(s.GPUKVTokens))
		case No:
			a.add("%s fewer than the %s-token GPU pool: the tier only mirrors the GPU, so this is not a valid GPU-eviction reload setup.", at, units.Grouped(s.GPUKVTokens))
		}
		switch {
		case a.TierHoldsSequence == No:
			a.add("The %s unique tokens exceed the CPU tier's %s: the replayed prompt's oldest blocks are evicted from the CPU tier before the replay.", units.Grouped(a.UniqueTokens), units.Grouped(int(a.CPUTierTokens)))
		case a.TierHoldsSequence == Unknown:
			a.add("The %s estimated unique tokens exceed the CPU tier's %s; the server usually counts fewer than the estimate (seed 001: 113,674 of 150,000 planned), so whether the replayed prompt survives in the CPU tier is known once it counts them.", units.Grouped(a.UniqueTokens), units.Grouped(int(a.CPUTierTokens)))
		}
	}

	a.CanProveReload = combine(a.EvictionPressure, a.TierLargerThanGPU, a.TierHoldsSequence)
	return a
}

func (a *Assessment) add(format string, args ...any) {
	a.Findings = append(a.Findings, fmt.Sprintf(format, args...))
}

// Conclusion says in one sentence whether the setup could prove a reload and why, with the
// figures behind it (seed 001's interpretation).
func (a *Assessment) Conclusion() string {
	if a.Setup.Topology == SingleSlot {
		return a.singleSlotConclusion()
	}
	s := a.Setup
	per := "stated"
	if s.StoreBytesSource == "measured" {
		per = "measured"
	}
	g := units.GroupedFloat
	if s.HostTierTokens > 0 {
		switch {
		case a.TierLargerThanGPU == No:
			return fmt.Sprintf("The %s was smaller than the %s-token GPU KV tier and was not a valid GPU-eviction reload setup.", tierWords(s), units.Grouped(s.GPUKVTokens))
		case a.CanProveReload == Yes:
			return fmt.Sprintf("The %s was larger than the %s-token GPU KV tier and the sequence's %s unique tokens pushed the replayed prompt out of GPU memory: a valid GPU-eviction reload setup.", tierWords(s), units.Grouped(s.GPUKVTokens), units.Grouped(a.UniqueTokens))
		}
	}
	switch {
	case a.TierLargerThanGPU == No && s.CPUOffloadGiB > 0:
		return fmt.Sprintf("At the %s bytes per stored token (%s), the %s GiB CPU tier (about %s tokens) was smaller than the %s-token GPU KV tier and was not a valid GPU-eviction reload setup.", per, g(s.StoreBytesPerToken), units.Exact(s.CPUOffloadGiB), g(a.CPUTierTokens), units.Grouped(s.GPUKVTokens))
	case a.TierLargerThanGPU == No:
		return "No CPU offload tier was configured, so the run could not prove a reload."
	case a.EvictionPressure == No:
		return fmt.Sprintf("The sequence's %s unique tokens fit in the %s-token GPU KV pool, so the replayed prompt was not evicted and the run could not prove a reload.", units.Grouped(a.UniqueTokens), units.Grouped(s.GPUKVTokens))
	case a.TierHoldsSequence == No:
		return fmt.Sprintf("The sequence's %s unique tokens overflowed the CPU tier's %s, so the replayed prompt could not survive there until the replay.", units.Grouped(a.UniqueTokens), g(a.CPUTierTokens))
	case a.CanProveReload == Yes:
		return fmt.Sprintf("At the %s bytes per stored token (%s), the %s GiB CPU tier (about %s tokens) was larger than the %s-token GPU KV tier and the sequence's %s unique tokens pushed the replayed prompt out of GPU memory: a valid GPU-eviction reload setup.", per, g(s.StoreBytesPerToken), units.Exact(s.CPUOffloadGiB), g(a.CPUTierTokens), units.Grouped(s.GPUKVTokens), units.Grouped(a.UniqueTokens))
	default:
		return "Whether the setup could prove a reload is unknown: " + joinFindings(a.Findings)
	}
}

// Reasons names each condition that keeps the setup from proving a reload, in short words.
func (a *Assessment) Reasons() []string {
	if a.Setup.Topology == SingleSlot {
		return a.singleSlotReasons()
	}
	var why []string
	if a.TierLargerThanGPU == No {
		why = append(why, "the CPU tier is not larger than the GPU KV pool")
	}
	if a.EvictionPressure == No {
		why = append(why, "the sequence fits in the GPU pool, so nothing is evicted")
	}
	if a.TierHoldsSequence == No {
		why = append(why, "the sequence overflows the CPU tier")
	}
	return why
}

func joinFindings(f []string) string { return strings.Join(f, " ") }

// Figures is what one source says about a server's KV capacity: the scenario's [server]
// table, the server itself (its cache config, its slots), or what the run measured. A zero
// field is unknown to that source.
type Figures struct {
	// Source names where the figures come from ("scenario", "server (vllm:cache_config_info)",
	// "measured"), for the record.
	Source             string  `json:"source"`
	GPUKVTokens        int     `json:"gpu_kv_tokens,omitempty"`
	CPUOffloadGiB      float64 `json:"cpu_offload_gib,omitempty"`
	StoreBytesPerToken float64 `json:"store_bytes_per_token,omitempty"`
	Slots              int     `json:"slots,omitempty"`
	// HostTierTokens is the host tier in tokens, where a server reports it so.
	HostTierTokens int `json:"host_tier_tokens,omitempty"`
}

// Resolve combines what the sources say, in order of precedence, lowest first: the scenario,
// then the server, then what the run measured. Each figure comes from the last source that
// knows it and names that source; topology and the host tier's unit are the engine's.
func Resolve(topology Topology, hostTierUnit string, sources ...Figures) Setup {
	s := Setup{Topology: topology, HostTierUnit: hostTierUnit}
	for _, f := range sources {
		if f.GPUKVTokens > 0 {
			s.GPUKVTokens, s.GPUKVTokensSource = f.GPUKVTokens, f.Source
		}
		if f.CPUOffloadGiB > 0 {
			s.CPUOffloadGiB, s.CPUOffloadGiBSource = f.CPUOffloadGiB, f.Source
		}
		if f.StoreBytesPerToken > 0 {
			s.StoreBytesPerToken, s.StoreBytesSource = f.StoreBytesPerToken, f.Source
		}
		if f.Slots > 0 {
			s.Slots = f.Slots
		}
		if f.HostTierTokens > 0 {
			s.HostTierTokens, s.HostTierTokensSource = f.HostTierTokens, f.Source
		}
	}
	return s
}
