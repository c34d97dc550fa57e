package record

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/units"
)

// Does the reload pay? A replay's cold twin is its prompt's exact bytes sent right after it
// as a guaranteed miss, so its time to first output is a recompute of exactly the tokens the
// replay reloaded, on the same server a moment later.

// OffloadGain compares a replay with its cold twin.
type OffloadGain struct {
	// ColdTwin names how the twin was made to miss ("cache_salt", "cache_prompt=false");
	// Skipped says why there was no twin.
	ColdTwin string `json:"cold_twin,omitempty"`
	Skipped  string `json:"skipped,omitempty"`
	// TwinMissed says whether the twin's own counters and usage show a full miss; a twin that
	// was served cached tokens recomputed less than the prompt, so the gain is understated.
	TwinMissed     Answer   `json:"cold_twin_missed,omitempty"`
	TwinMissReason string   `json:"cold_twin_miss_reason,omitempty"`
	TwinError      string   `json:"cold_twin_error,omitempty"`
	ReplayTTFTMS   *float64 `json:"replay_time_to_first_output_ms"`
	TwinTTFTMS     *float64 `json:"cold_twin_time_to_first_output_ms"`
	// TTFTRatio is the cold twin's time to first output over the replay's: above 1 the
	// reload was faster than recomputing.
	TTFTRatio *float64 `json:"ttft_ratio"`
	// PrefillSecondsSaved is the twin's time to first output less the replay's.
	PrefillSecondsSaved *float64 `json:"prefill_seconds_saved"`
	ReplayDecode        *float64 `json:"replay_decode_tokens_per_second"`
	TwinDecode          *float64 `json:"cold_twin_decode_tokens_per_second"`
	// DecodeRatio is the replay's decode rate over the twin's: below 1 decoding was slower
	// after the reload (a host tier can slow decoding).
	DecodeRatio *float64 `json:"decode_ratio"`
	// TwinStoreBytes is what the twin wrote to the host tier (vLLM writes it through under
	// its salted hashes): the twin's cost in tier capacity.
	TwinStoreBytes *float64 `json:"cold_twin_store_bytes"`
	// Note says when the replay was no reload, so the gain is another cache's.
	Note string `json:"note,omitempty"`
}

// Pays reports whether the reload beat the recompute.
func (g *OffloadGain) Pays() bool { return g != nil && g.TTFTRatio != nil && *g.TTFTRatio > 1 }

// ReloadBandwidth is what a replay's load counters say of the copy: bytes over copy seconds,
// beside the host link bandwidth the scenario states.
type ReloadBandwidth struct {
	LoadBytes   float64 `json:"load_bytes"`
	LoadSeconds float64 `json:"load_seconds"`
	// BytesPerSecond is load bytes over load seconds. vLLM's offloading connector sums both
	// over its tensor-parallel workers, so with several workers copying at once this is one
	// worker's link rate, not the rate of all of them together.
	BytesPerSecond     float64 `json:"achieved_bytes_per_second"`
	TensorParallelSize int     `json:"tensor_parallel_size,omitempty"`
	// StatedLinkBytesPerSecond is [server] host_link_gbps in bytes per second; LinkFraction
	// the achieved rate's share of it. Both null when no link is stated.
	StatedLinkBytesPerSecond *float64 `json:"stated_link_bytes_per_second"`
	LinkFraction             *float64 `json:"link_fraction"`
	Finding                  string   `json:"finding"`
}

// Words says in a line what reloading saved against the cold twin, or why it is unknown.
func (g *OffloadGain) Words() string {
	switch {
	case g == nil:
		return "not measured"
	case g.Skipped != "":
		return "not measured, no cold twin: " + g.Skipped
	case g.TwinError != "":
		return fmt.Sprintf("not measured: the cold twin (%s) failed: %s", g.ColdTwin, g.TwinError)
	case g.TTFTRatio == nil:
		return "not measured: no time to first output for the replay or its cold twin"
	}
	s := fmt.Sprintf("cold twin (%s) %s ms vs replay %s ms to first output: %s, %s s of prefill saved; decode %s vs %s tokens/s",
		g.ColdTwin, units.MS(g.TwinTTFTMS), units.MS(g.ReplayTTFTMS), units.Times(*g.TTFTRatio), units.Fixed(units.Seconds).Places(3).Value(g.PrefillSecondsSaved), units.Rate(g.TwinDecode), units.Rate(g.ReplayDecode))
	if g.TwinMissed == AnswerNo {
		s += "; but " + g.TwinMissReason
	}
	if g.Note != "" {
		s += " (" + g.Note + ")"
	}
	return s
}
