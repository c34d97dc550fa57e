package verdict

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
)

func TestDiagnose(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	yes, no := true, false
	cases := []struct {
		name    string
		verdict Verdict
		o       OffloadEvidence
		want    []string
	}{
		{"reload gets none", CPUReload, OffloadEvidence{StoreBytes: f(0)}, nil},
		{"threshold", Recompute, OffloadEvidence{StoreBytes: f(0), StoresSkipped: f(96)}, []string{DiagStoresSkipped}},
		{"allocation", Partial, OffloadEvidence{StoreBytes: f(4096), AllocationFailures: f(3)}, []string{DiagAllocationFailures}},
		{"no stores", Recompute, OffloadEvidence{StoreBytes: f(0)}, []string{DiagNoStores}},
		// Absent is not 0: without a store-byte counter nothing says the connector is off.
		{"store bytes absent", Recompute, OffloadEvidence{}, nil},
		{"tier too small", Recompute, OffloadEvidence{StoreBytes: f(1e6), TierHoldsSequence: "no", UniqueTokens: 6000, TierTokens: 1024}, []string{DiagTierTooSmall}},
		{"routed elsewhere", Recompute, OffloadEvidence{StoreBytes: f(1e6), RoutedElsewhere: &yes}, []string{DiagRoutedElsewhere}},
		{"same replica", Recompute, OffloadEvidence{StoreBytes: f(1e6), RoutedElsewhere: &no}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, d := range Diagnose(c.verdict, c.o) {
				got = append(got, d.Cause)
				if d.Detail == "" || strings.Contains(d.Detail, "<nil>") {
					t.Errorf("detail %q", d.Detail)
				}
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Fatalf("causes %v, want %v", got, c.want)
			}
		})
	}
	// Skipped stores with the byte counter absent say so, never "0 bytes".
	d := Diagnose(Recompute, OffloadEvidence{StoresSkipped: f(5)})
	if len(d) != 1 || !strings.Contains(d[0].Detail, "store bytes not exposed") {
		t.Fatalf("%+v", d)
	}
}

// TestDecideCachedBySource: the proposed by-source counter names the host tier per token, so
// it proves a reload where external hits are not served, and is checked against them where
// both are.
func TestDecideCachedBySource(t *testing.T) {
	base := Evidence{PromptTokens: i(1500), SharedPrefixTokens: 256, BlockSize: 16}
	e := base
	e.Counters = window(gpuHits, 256.0, load, 1244.0*2048, metrics.CachedFromHost, 1232.0)
	if r := Decide(e); r.Verdict != CPUReload || !strings.Contains(strings.Join(r.Notes, " "), "by source (host 1232)") {
		t.Fatalf("host-only: %s (%s) %v", r.Verdict, r.Reason, r.Notes)
	}
	e.Counters.Deltas[extHits] = 400
	if r := Decide(e); !strings.Contains(strings.Join(r.Notes, " "), "moved by 1232 but external hits by 400") {
		t.Fatalf("disagreement not noted: %v", r.Notes)
	}
	// LMCache names no tier: its hits are external_unspecified, host is not served, and
	// nothing says "host moved by 0".
	e.Counters = window(gpuHits, 256.0, extHits, 1232.0, load, 1244.0*2048, metrics.CachedExternalUnspecified, 1232.0)
	r := Decide(e)
	if notes := strings.Join(r.Notes, " "); r.Verdict != CPUReload || strings.Contains(notes, "moved by") || !strings.Contains(notes, "1232 external tokens came from a connector that does not say") {
		t.Fatalf("external_unspecified: %s %v", r.Verdict, r.Notes)
	}
	// Disk tokens (the tiering spec's fs tier) count as external with the host's.
	e.Counters = window(gpuHits, 256.0, extHits, 1232.0, load, 1244.0*2048, metrics.CachedFromHost, 232.0, metrics.CachedFromDisk, 1000.0, metrics.DiskStagedBytes, 1000.0*2048)
	r = Decide(e)
	if notes := strings.Join(r.Notes, " "); r.Verdict != CPUReload || strings.Contains(notes, "moved by") || !strings.Contains(notes, "2048000 bytes came from the disk tier, staged through the host tier") {
		t.Fatalf("disk through host: %s %v", r.Verdict, r.Notes)
	}
	base.Counters = window(gpuHits, 256.0, load, 1244.0*2048)
	if r := Decide(base); r.Verdict == CPUReload {
		t.Fatalf("without either counter a reload cannot be seen: %s", r.Verdict)
	}
}

// The routing diagnosis names both replicas when the counters named them.
func TestRoutedElsewhereNamesReplicas(t *testing.T) {
	yes := true
	d := Diagnose(Recompute, OffloadEvidence{RoutedElsewhere: &yes, OriginalReplica: "u engine=0", ReplayReplica: "u engine=1"})
	if len(d) != 1 || !strings.HasPrefix(d[0].Detail, "routed to another replica: per-replica caches cannot serve it") ||
		!strings.Contains(d[0].Detail, "the original on u engine=0, the replay on u engine=1") {
		t.Fatalf("diagnosis %+v", d)
	}
}

// TestDecideDiagnoses: Decide explains a recompute from the run's offload evidence, the
// routing and the capacity math, and leaves a reload or an invalid measurement alone.
func TestDecideDiagnoses(t *testing.T) {
	e := Evidence{PromptTokens: i(6000), SharedPrefixTokens: 256, BlockSize: 16, Counters: window(gpuHits, 256.0, extHits, 0.0, load, 0.0),
		Offload: OffloadEvidence{StoreBytes: f(1e6)}, Routing: Routing{OriginalReplica: "a", ReplayReplica: "b"},
		Setup: &capacity.Assessment{Capacity: record.Capacity{TierHoldsSequence: capacity.No, UniqueTokens: 6000, CPUTierTokens: 1024}}}
	d := Decide(e)
	var causes []string
	for _, g := range d.Diagnosis {
		causes = append(causes, g.Cause)
	}
	if d.Verdict != Recompute || strings.Join(causes, ",") != DiagRoutedElsewhere+","+DiagTierTooSmall || !strings.Contains(d.Interpretation, "Why: routed to another replica") {
		t.Fatalf("%s %v: %s", d.Verdict, causes, d.Interpretation)
	}
	if d.Offload == nil || d.Offload.RoutedElsewhere == nil || !*d.Offload.RoutedElsewhere {
		t.Fatalf("offload evidence %+v", d.Offload)
	}
	e.Counters.Valid, e.Counters.Invalidity, e.Counters.InvalidReason = false, metrics.InvalidReset, "reset"
	if d := Decide(e); len(d.Diagnosis) != 0 {
		t.Fatalf("an invalid measurement got a diagnosis: %+v", d.Diagnosis)
	}
}
