package engine

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// CounterProfile is the profile `kvbench counters` reads with: backend's metric names, with
// each override, COUNTER=SELECTOR as its repeatable --metric flag gives it, reading that
// counter from the selector instead. Errors name the flag at fault.
func CounterProfile(backend string, overrides []string) (metrics.Profile, error) {
	def, err := ByName(backend)
	if err != nil {
		return metrics.Profile{}, fmt.Errorf("--backend: %w", err)
	}
	profile := def.Profile()
	if len(overrides) == 0 {
		return profile, nil
	}
	byName := map[string]string{}
	for _, o := range overrides {
		name, selector, ok := strings.Cut(o, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return metrics.Profile{}, fmt.Errorf("--metric %q: want COUNTER=SELECTOR", o)
		}
		byName[strings.TrimSpace(name)] = selector
	}
	return profile.WithOverrides(byName)
}
