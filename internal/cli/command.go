package cli

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/anvil-serving/kvbench/harness/textout"
)

// Command is one kvbench subcommand. Run gets the arguments after the subcommand's name.
type Command struct {
	Name    string
	Summary string
	// AlwaysJSON: the command prints nothing but JSON (counters), so its failures are JSON
	// documents on stdout as under --format json.
	AlwaysJSON bool
	Run        func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// Commands is filled by Register calls in each subcommand's file.
var Commands = map[string]Command{}

// Register adds c to Commands.
func Register(c Command) { Commands[c.Name] = c }

func init() {
	Register(Command{Name: "version", Summary: "print kvbench's version", Run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
		fs := NewFlagSet("version", "", "kvbench version", stdout)
		if _, err := Parse(fs, args); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "kvbench", Version())
		return nil
	}})
}

// Run runs the subcommand args name: kvbench's whole command line but the program name.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) > 1 && args[0] == "help" {
		// kvbench help COMMAND is kvbench COMMAND -h.
		c, ok := Commands[args[1]]
		if !ok {
			return Usagef("help: unknown command %q (see 'kvbench help')", args[1])
		}
		return c.Run(ctx, []string{"-h"}, stdout, stderr)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		err := textout.Write(stdout, writeUsage) // one write, its error returned
		if len(args) == 0 {
			return Usagef("no command given")
		}
		return err
	}
	c, ok := Commands[args[0]]
	if !ok {
		c = Command{Run: func(context.Context, []string, io.Writer, io.Writer) error {
			return Usagef("unknown command %q (see 'kvbench help')", args[0])
		}}
	}
	if wantsJSON(c, args[1:]) {
		return runJSON(ctx, c, args[1:], stdout, stderr)
	}
	return c.Run(ctx, args[1:], stdout, stderr)
}

func writeUsage(w io.Writer) {
	names := make([]string, 0, len(Commands))
	for n := range Commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "kvbench proves KV-cache offload (store, eviction, reload) with server counters.")
	fmt.Fprintln(w, "\nUsage: kvbench COMMAND [flags] [args]\n\nCommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, Commands[n].Summary)
	}
	fmt.Fprintln(w, "\nExample:\n  kvbench demo                      # the whole job on the embedded engine, no GPU")
	fmt.Fprintln(w, "  kvbench plan eviction-6x150k-replay")
	fmt.Fprintln(w, "\nRun 'kvbench help COMMAND' (or 'kvbench COMMAND -h') for a command's flags; 'kvbench --version' for the version.")
}
