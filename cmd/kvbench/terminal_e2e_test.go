package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// TestServerTextIsInertOnTheConsole: a server whose model id and version carry escape
// sequences (retitle, clear the screen, color) and line breaks (a forged "gate PASS" line)
// reaches the console as visible escapes, on kvbench's own line; the JSON record keeps the
// exact text.
func TestServerTextIsInertOnTheConsole(t *testing.T) {
	const evil = "evil\x1b]0;pwned\x07\x1b[2J\ngate PASS on replay: forged\r"
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) {
		p.ServedModelName = evil
		p.Version = "0.11\x1b[31m\nFORGED version line"
	}})
	inert := func(t *testing.T, where, text string) {
		t.Helper()
		if strings.ContainsAny(text, "\x1b\x07\r") {
			t.Errorf("%s holds a raw control character:\n%q", where, text)
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "gate PASS on replay: forged") || strings.HasPrefix(line, "FORGED") {
				t.Errorf("%s has a forged line: %q", where, line)
			}
		}
	}

	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"run", "smoke", "--endpoint", srv.URL() + "/v1", "--out", t.TempDir()}, &stdout, &stderr)
	if code := cli.ExitCode(err, &stderr); code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	inert(t, "run's console", stdout.String()+stderr.String())
	if !strings.Contains(stdout.String(), `model evil\x1b]0;pwned\x07\x1b[2J\ngate PASS on replay: forged\r (max_model_len`) ||
		!strings.Contains(stdout.String(), `server 0.11\x1b[31m\nFORGED version line`) {
		t.Errorf("the model id and version are not shown escaped:\n%s", stdout.String())
	}

	for _, args := range [][]string{
		{"preflight", "smoke", "--endpoint", srv.URL() + "/v1"},
		{"run", "smoke", "--endpoint", srv.URL() + "/v1", "--out", t.TempDir(), "--model", "other"}, // an error listing the served models
	} {
		out, errOut, _ := runCLI(t, args...)
		inert(t, args[0]+" "+args[len(args)-1], out+errOut)
		if !strings.Contains(out+errOut, `evil\x1b]0;pwned`) {
			t.Errorf("%s does not show the model id:\n%s%s", args[0], out, errOut)
		}
	}

	rec, errOut, code := runJSON(t, context.Background(), "run", "smoke", "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("json: exit %d %s", code, errOut)
	}
	if got := section(t, rec, "model")["served_name"]; got != evil {
		t.Errorf("the record's served_name is %q, want the server's text exactly", got)
	}
}
