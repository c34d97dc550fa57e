package verdict

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// The conservation checks: the parts of a replay's prompt against the whole.
const (
	// CheckTiersAddUp: GPU + host + disk + remote hits + recomputed tokens vs usage's prompt
	// tokens.
	CheckTiersAddUp = "tiers_vs_prompt_tokens"
	// CheckLoadBytes: the load bytes vs the reloaded tokens x the scenario's bytes per
	// loaded token.
	CheckLoadBytes = "load_bytes_vs_reloaded_tokens"
	// DiagCountersDisagree is the finding of a conservation check that failed: the two sides,
	// with their numbers; the verdict chose neither.
	DiagCountersDisagree = "counters_disagree"
)

// RequestTiers is a replay's prompt tokens by tier: the record's type.
type RequestTiers = record.RequestTiers

// loadTolerance is the share the load bytes may differ from reloaded tokens x bytes per
// token by: the bytes per token is a rounded measurement, and partial blocks move whole.
const loadTolerance = 0.02

// tierParts are a replay's settled hits: ext is every tier outside GPU memory together,
// disk and remote the shares of it the engine names (nil where it names none).
type tierParts struct{ gpu, ext, disk, remote *float64 }

// counterParts are the disk and remote shares of the settled hits, from the tier counters.
func counterParts(c *Counters, gpu, ext *float64) tierParts {
	p := tierParts{gpu: gpu, ext: ext, remote: c.Delta(metrics.ObjectReloadTokens)}
	if v := c.Delta(metrics.CachedFromDisk); v != nil {
		p.disk = v
	} else if staged, direct := c.Delta(metrics.DiskStagedTokens), c.Delta(metrics.DiskReloadTokens); staged != nil || direct != nil {
		v := value(staged) + value(direct) // staged through the host or straight to the GPU
		p.disk = &v
	}
	return p
}

// requestParts are the tiers of the response's own split: storage is disk for a file
// backend, else remote.
func requestParts(t TierTokens) tierParts {
	gpu, ext, storage := float64(t.Device), float64(t.Host+t.Storage), float64(t.Storage)
	p := tierParts{gpu: &gpu, ext: &ext}
	if strings.Contains(t.StorageBackend, "file") {
		p.disk = &storage
	} else if t.Storage > 0 {
		p.remote = &storage
	}
	return p
}

// recomputed is the prompt tokens the server computed, from the first source that has
// them: a counter of computed tokens, the prompt-token counter less the cached-token
// counter, usage. step is the counters' print resolution, which widens the tolerance.
func recomputed(e Evidence) (v *float64, from string, step float64) {
	c := e.Counters
	if lc := c.Delta(metrics.PromptTokensLocalCompute); lc != nil {
		return lc, "the computed-prompt-token counter", resolution(c, metrics.PromptTokensLocalCompute)
	}
	if pt, ct := c.Delta(metrics.PromptTokens), c.Delta(metrics.PromptTokensCached); pt != nil && ct != nil {
		r := *pt - *ct
		return &r, "the prompt-token counter less the cached-token counter", resolution(c, metrics.PromptTokens) + resolution(c, metrics.PromptTokensCached)
	}
	if e.PromptTokens != nil && e.CachedPromptTokens != nil {
		r := float64(*e.PromptTokens - *e.CachedPromptTokens)
		return &r, "usage's prompt less cached tokens", 0
	}
	return nil, "", 0
}

func resolution(c *Counters, k metrics.Counter) float64 {
	if c == nil {
		return 0
	}
	return c.Resolution[k]
}

// conserve records the replay's tier split and checks that its parts add up: GPU + host +
// disk + remote + recomputed = usage's prompt tokens, and load bytes ~ the reloaded tokens
// x the scenario's load bytes per token. Where they do not, the decision gets a
// counters_disagree finding naming both sides with their numbers; the verdict stays as the
// rules decided it, and the finding says which of its counters contradict each other.
func (d *Decision) conserve(e Evidence, p tierParts, load *float64) {
	s := &RequestTiers{GPU: p.gpu, Disk: p.disk, Remote: p.remote, PromptTokens: e.PromptTokens, Tolerance: tolerance(e)}
	var step float64
	s.Recomputed, s.RecomputedFrom, step = recomputed(e)
	s.Tolerance += step
	d.TierSplit = s
	if p.ext != nil {
		host := *p.ext - value(p.disk) - value(p.remote)
		s.Host = &host
		if host < -s.Tolerance {
			d.disagree(CheckTiersAddUp, s.Tolerance,
				fmt.Sprintf("the disk and remote tiers' %s tokens", units.Whole(value(p.disk)+value(p.remote))),
				fmt.Sprintf("the %s tokens of every tier outside GPU memory", units.Whole(*p.ext)))
		}
	}
	if p.gpu != nil && p.ext != nil && s.Recomputed != nil && e.PromptTokens != nil {
		sum := *p.gpu + *p.ext + *s.Recomputed
		s.Sum = &sum
		ok := abs(sum-float64(*e.PromptTokens)) <= s.Tolerance
		s.AddsUp = &ok
		parts := fmt.Sprintf("GPU %s + host %s + disk %s + remote %s + recomputed %s (%s) = %s", units.Whole(*p.gpu), units.Whole(value(s.Host)),
			units.Int(intOf(p.disk)), units.Int(intOf(p.remote)), units.Whole(*s.Recomputed), s.RecomputedFrom, units.Whole(sum))
		whole := fmt.Sprintf("usage's %d prompt tokens", *e.PromptTokens)
		if ok {
			d.check(CheckTiersAddUp, s.Tolerance, true, "", parts, whole)
		} else {
			d.disagree(CheckTiersAddUp, s.Tolerance, parts, whole)
		}
	}
	if p.ext == nil || *p.ext <= 0 || load == nil || e.LoadBytesPerToken <= 0 {
		return
	}
	want := *p.ext * e.LoadBytesPerToken
	tol := loadTolerance*want + e.LoadBytesPerToken*tolerance(e)
	sides := []string{fmt.Sprintf("%s bytes loaded", units.Whole(*load)),
		fmt.Sprintf("%s reloaded tokens x %s bytes per token (the scenario's load_bytes_per_token) = %s", units.Whole(*p.ext), units.Whole(e.LoadBytesPerToken), units.Whole(want))}
	if abs(*load-want) <= tol {
		d.check(CheckLoadBytes, tol, true, "", sides...)
	} else {
		d.disagree(CheckLoadBytes, tol, sides...)
	}
}

// disagree records a failed conservation check: the cross-check, its note, and the
// counters_disagree finding with both sides.
func (d *Decision) disagree(name string, tol float64, sides ...string) {
	d.check(name, tol, false, "neither: both are kept, and the counters_disagree finding names them", sides...)
	d.Diagnosis = append(d.Diagnosis, Diagnosis{Cause: DiagCountersDisagree,
		Detail: fmt.Sprintf("%s: %s disagree beyond %s", name, strings.Join(sides, " vs "), units.Whole(tol))})
}

func intOf(p *float64) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}
