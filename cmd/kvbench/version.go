package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise the module's
// build info is used.
var version = ""

func kvbenchVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
		if v != "" {
			return v
		}
	}
	return "devel"
}

func init() {
	register(command{name: "version", summary: "print kvbench's version", run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
		fs := newFlagSet("version", "", "kvbench version", stdout)
		if _, err := parseFlags(fs, args); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "kvbench", kvbenchVersion())
		return nil
	}})
}
