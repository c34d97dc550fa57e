package target

import (
	"fmt"
	"io"
	"strings"

	"github.com/anvil-serving/kvbench/scenarios"
)

// WriteProbes lists every probe command of sc, so a scenario's commands can be read before
// they are allowed to run.
func WriteProbes(w io.Writer, sc *scenarios.Scenario) error {
	for _, p := range sc.Probes {
		if _, err := fmt.Fprintf(w, "  probe %s (%s, timeout %s): %s\n", p.Name, p.When, p.Timeout, p.CommandLine()); err != nil {
			return err
		}
	}
	return nil
}

// ProbeConsent refuses a scenario with probes unless the user allowed them or turned them
// off: its probes run as this user.
func ProbeConsent(sc *scenarios.Scenario, allow, skip bool) error {
	if len(sc.Probes) == 0 || allow || skip {
		return nil
	}
	cmds := make([]string, len(sc.Probes))
	for i, p := range sc.Probes {
		cmds[i] = p.String()
	}
	return fmt.Errorf("%s runs %d probe command(s) on this machine: %s; pass --allow-probes to run them or --no-probes to run without them",
		sc.Path, len(sc.Probes), strings.Join(cmds, "; "))
}
