package record

import (
	"fmt"
)

// Reload fidelity: at temperature 0 a replay must produce the output its original request
// produced, since the KV it reloaded is the same computation. A divergence is a finding:
// possibly KV corrupted on its way back from the host tier, though batch-variant kernels and
// a lossy KV cache dtype change greedy outputs too, which the cold twin (the same prompt
// recomputed) tells apart.

// Bases an output comparison rests on, best first.
const (
	// BasisTokenIDs compares the generated token ids both requests were sent.
	BasisTokenIDs = "token_ids"
	// BasisText compares the generated text both kept (reasoning and content), byte by byte.
	BasisText = "text"
	// BasisAnswer compares the visible answers only: what records written before kvbench
	// kept outputs hold.
	BasisAnswer = "answer"
)

// ReloadFidelity is whether a replay gave its original's output.
type ReloadFidelity struct {
	Compared bool `json:"compared"`
	// Reason says why the outputs were not compared.
	Reason string `json:"reason,omitempty"`
	Basis  string `json:"basis,omitempty"`
	// Identical is null when nothing was compared.
	Identical *bool `json:"identical"`
	// ComparedTokens (token ids) or ComparedBytes (text) is how much of the two outputs was
	// compared: the shorter one's length.
	ComparedTokens *int `json:"compared_tokens"`
	ComparedBytes  *int `json:"compared_bytes,omitempty"`
	// FirstDivergence is the index (token or byte, per the basis) of the first difference;
	// null when identical. An output that is a strict prefix of the other diverges at its end.
	FirstDivergence *int `json:"first_divergence"`
	OriginalLength  int  `json:"original_length"`
	ReplayLength    int  `json:"replay_length"`
	// Truncated: an output was longer than kvbench keeps, and only the kept part was compared.
	Truncated bool `json:"truncated,omitempty"`
	// ColdTwinIdentical is the cold twin's output against the original's on the same basis:
	// a twin that differs too says the server does not reproduce its output without a reload.
	ColdTwinIdentical       *bool `json:"cold_twin_identical"`
	ColdTwinFirstDivergence *int  `json:"cold_twin_first_divergence,omitempty"`
	// Finding names a divergence in words, as the console prints it.
	Finding string `json:"finding,omitempty"`
}

// Words says in a line whether the outputs matched, and on what.
func (f *ReloadFidelity) Words() string {
	switch {
	case f == nil:
		return "not compared"
	case !f.Compared:
		return "not compared: " + f.Reason
	case !*f.Identical:
		return "DIFFERENT: " + f.Finding
	}
	n, unit := f.ComparedBytes, "bytes of "+f.Basis
	if f.ComparedTokens != nil {
		n, unit = f.ComparedTokens, "token ids"
	}
	s := fmt.Sprintf("identical to the original's output (%d %s compared", *n, unit)
	if f.Truncated {
		s += ", as far as kvbench keeps them"
	}
	if f.ColdTwinIdentical != nil && *f.ColdTwinIdentical {
		s += "; the cold twin's too"
	}
	return s + ")"
}
