package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// NewFlagSet returns a flag set whose -h output shows the command's usage line and an example.
func NewFlagSet(name, usage, example string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: kvbench %s %s\n", name, usage)
		if example != "" {
			fmt.Fprintf(stdout, "\nExample:\n  %s\n", strings.ReplaceAll(example, "\n", "\n  "))
		}
		fmt.Fprintln(stdout, "\nFlags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// Parse parses args, mapping -h to ErrHelpShown and any other problem to a usage error.
// Flags may come before or after positional arguments.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	// flag calls Usage itself on -h and on errors; show help once, and errors as one line.
	help := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = help }()
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				help()
				return nil, ErrHelpShown
			}
			return nil, Usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// StringList is a repeatable string flag.
type StringList []string

func (s *StringList) String() string     { return strings.Join(*s, ",") }
func (s *StringList) Set(v string) error { *s = append(*s, v); return nil }

// FormatVar adds --format to fs: one of formats, the first the default, refused as the
// flags are parsed (a usage error naming the choices).
func FormatVar(fs *flag.FlagSet, p *string, help string, formats ...string) {
	*p = formats[0]
	fs.Var(&formatValue{p, formats}, "format", help)
}

// formatValue is the --format flag: one of a few output formats.
type formatValue struct {
	p      *string
	values []string
}

func (c *formatValue) String() string {
	if c == nil || c.p == nil {
		return ""
	}
	return *c.p
}

func (c *formatValue) Set(s string) error {
	if !slices.Contains(c.values, s) {
		n := len(c.values)
		list := c.values[n-1]
		if n > 1 {
			list = strings.Join(c.values[:n-1], ", ") + " or " + list
		}
		return fmt.Errorf("--format must be %s", list)
	}
	*c.p = s
	return nil
}
