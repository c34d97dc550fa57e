package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

func TestCounterProfile(t *testing.T) {
	def, err := ByName("")
	if err != nil {
		t.Fatal(err)
	}
	selectors := func(p metrics.Profile, c metrics.Counter) string { return fmt.Sprint(p.Counters[c]) }
	p, err := CounterProfile("", nil)
	if err != nil || p.Name != def.Profile().Name || selectors(p, metrics.LoadBytes) != selectors(def.Profile(), metrics.LoadBytes) {
		t.Errorf("no overrides: %v, want the default engine's profile", err)
	}
	p, err = CounterProfile("sglang", []string{` external_prefix_hits =myfork:ext_hits_total{tier="cpu"}`})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Counters[metrics.ExternalPrefixHits]; len(got) != 1 || got[0].String() != `myfork:ext_hits_total{tier="cpu"}` {
		t.Errorf("overridden counter reads %v", got)
	}
	sglang, _ := ByName("sglang")
	if selectors(p, metrics.LoadBytes) != selectors(sglang.Profile(), metrics.LoadBytes) {
		t.Errorf("a counter not overridden changed: %v", p.Counters[metrics.LoadBytes])
	}
	for _, tt := range []struct {
		backend   string
		overrides []string
		want      string
	}{
		{"tgi", nil, `--backend: unknown backend "tgi"`},
		{"", []string{"load_bytes"}, `--metric "load_bytes": want COUNTER=SELECTOR`},
		{"", []string{" =x_total"}, `--metric " =x_total": want COUNTER=SELECTOR`},
		{"", []string{"hitz=x_total"}, "metric override hitz: unknown counter"},
		{"", []string{"load_bytes=x{"}, "metric override load_bytes"},
	} {
		if _, err := CounterProfile(tt.backend, tt.overrides); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q %q: %v, want %q", tt.backend, tt.overrides, err, tt.want)
		}
	}
}
