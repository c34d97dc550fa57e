package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/anvil-serving/kvbench/scenarios"
)

// probeCommand writes a probe's argv as one shell-like line; arguments that a shell would
// split or interpret are quoted, so what runs is exactly what is shown.
func probeCommand(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return r <= ' ' || r > '~' || strings.ContainsRune("\"'\\$`!*?&|;<>()[]{}#~=%", r)
		}) {
			a = strconv.Quote(a)
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}

// printProbes lists every probe command of sc, so a scenario's commands can be read before
// they are allowed to run.
func printProbes(w io.Writer, sc *scenarios.Scenario) {
	for _, p := range sc.Probes {
		fmt.Fprintf(w, "  probe %s (%s, timeout %s): %s\n", p.Name, p.When, p.Timeout, probeCommand(p.Command))
	}
}

// probeConsent refuses a scenario with probes unless the user allowed them or turned them
// off: a scenario file may come from anyone, and its probes run as this user.
func probeConsent(sc *scenarios.Scenario, allow, skip bool) error {
	if len(sc.Probes) == 0 || allow || skip {
		return nil
	}
	cmds := make([]string, len(sc.Probes))
	for i, p := range sc.Probes {
		cmds[i] = fmt.Sprintf("%s (%s): %s", p.Name, p.When, probeCommand(p.Command))
	}
	return usageErrorf("%s runs %d probe command(s) on this machine: %s; pass --allow-probes to run them or --no-probes to run without them",
		sc.Path, len(sc.Probes), strings.Join(cmds, "; "))
}
