package scenarios

import (
	"strconv"
	"strings"
)

// CommandLine writes the probe's argv as one shell-like line; arguments that a shell would
// split or interpret are quoted, so what runs is exactly what is shown.
func (p Probe) CommandLine() string {
	parts := make([]string, len(p.Command))
	for i, a := range p.Command {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return r <= ' ' || r > '~' || strings.ContainsRune("\"'\\$`!*?&|;<>()[]{}#~=%", r)
		}) {
			a = strconv.Quote(a)
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}

// String names the probe, when it runs and its command, for a person deciding whether to
// let it run.
func (p Probe) String() string {
	return p.Name + " (" + p.When + "): " + p.CommandLine()
}
