package verdict

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/units"
)

// decideSetup says whether the setup could prove a reload. Warm caches answer first: a
// sequence that came back cached stored and evicted nothing, so whatever served the replay
// was put there before the run. Then the capacity math answers from sizes, and a replay
// whose own evidence shows a host-tier reload answers better: evidence beats computation,
// so such a setup is valid whatever the math could not tell.
func (d *Decision) decideSetup(e Evidence) {
	if len(e.WarmCaches) > 0 {
		d.SetupValid, d.SetupReason = capacity.No, warmSetupReason(e.WarmCaches)
		return
	}
	a := e.Setup
	if a != nil && a.CanProveReload == capacity.Yes {
		d.SetupValid, d.SetupReason = capacity.Yes, "the capacity math: the sequence pushes the replayed prompt out of GPU memory, and the CPU tier is larger than the GPU pool and holds the sequence"
		return
	}
	if shown := reloadShown(e, *d); shown != "" {
		d.SetupValid, d.SetupReason = capacity.Yes, "shown by the replay: "+shown
		return
	}
	if a == nil {
		d.SetupValid, d.SetupReason = capacity.Unknown, "the capacity math could not be done (no replayed request to size it by)"
		return
	}
	d.SetupValid = a.CanProveReload
	if why := a.Reasons(); len(why) > 0 {
		d.SetupReason = strings.Join(why, "; ")
	} else {
		d.SetupReason = "the capacity math could not decide: see its findings"
	}
}

// reloadShown names the replay's own evidence of a host-tier reload, "" when it shows none.
func reloadShown(e Evidence, d Decision) string {
	if d.Verdict != CPUReload {
		return ""
	}
	switch d.DecidedBy {
	case BySlot:
		if s := d.Slot; s != nil && s.HostTokens != nil {
			return fmt.Sprintf("%d cached tokens lie beyond the common prefix with the slot's previous prompt, so they came from the host-RAM prompt cache", *s.HostTokens)
		}
	case ByRequestTier:
		if t := e.RequestTier; t != nil {
			return fmt.Sprintf("the response reports %d cached tokens from the host tier", t.Host+t.Storage)
		}
	default:
		if b := e.Counters.Delta(metrics.LoadBytes); b != nil && *b > 0 {
			return fmt.Sprintf("%s bytes were loaded CPU->GPU for the replay", units.Whole(*b))
		}
		if r := e.Counters.Delta(metrics.ReloadTokens); r != nil && *r > 0 {
			return fmt.Sprintf("%s tokens were moved host->GPU for the replay", units.Whole(*r))
		}
		if x := e.Counters.Delta(metrics.ExternalPrefixHits); x != nil && *x > 0 {
			return fmt.Sprintf("%s external (host-tier) hits were counted for the replay", units.Whole(*x))
		}
	}
	return ""
}

// Sentence says in words what the verdict means for the replayed prompt.
func (d *Decision) Sentence() string {
	if d.DecidedBy == BySlot {
		switch d.Verdict {
		case CPUReload:
			return "The replay was restored from the host-RAM prompt cache."
		case GPUHit:
			return "The replay remained in the live slot."
		}
	}
	switch d.Verdict {
	case CPUReload:
		return "The replay was reloaded from the CPU tier."
	case GPUHit:
		return "The replay remained in GPU cache."
	case Recompute:
		return "The replay was recomputed beyond the shared prefix."
	case Partial:
		return "The replay was served only partly from cache."
	case Invalid:
		return "The replay's measurement is invalid: " + d.Reason + "."
	default:
		return "The tier that served the replay could not be determined."
	}
}

// Interpret says what the replay showed, why, and whether the setup could prove a reload,
// as seed 001's offload8_control does; a is the capacity math the decision weighed.
func (d *Decision) Interpret(a *capacity.Assessment) string {
	parts := []string{d.Sentence()}
	if len(d.Diagnosis) > 0 {
		var why []string
		for _, g := range d.Diagnosis {
			why = append(why, g.Detail)
		}
		parts = append(parts, "Why: "+strings.Join(why, "; ")+".")
	}
	switch {
	case strings.HasPrefix(d.SetupReason, "warm caches: "):
		parts = append(parts, "The setup cannot prove a reload: "+d.SetupReason+".")
	case strings.HasPrefix(d.SetupReason, "shown by the replay: "):
		s := "The replay itself shows the reload (" + strings.TrimPrefix(d.SetupReason, "shown by the replay: ") + "): a valid reload setup"
		if a != nil {
			s += fmt.Sprintf(", although the capacity math alone answered %s", a.CanProveReload)
		}
		parts = append(parts, s+".")
	case a != nil:
		parts = append(parts, a.Conclusion())
	}
	return strings.Join(parts, " ")
}
