package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/anvil-serving/kvbench/sim"
)

func init() {
	register(command{
		name:    "sim",
		summary: "serve the embedded vLLM-compatible engine (no GPU needed)",
		run:     runSim,
	})
}

func runSim(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("sim", "[--profile NAME] [--addr HOST:PORT] [--speed X] [--api-key-env VAR] [--allow-remote]",
		"kvbench sim --profile dsv4-offload16 --speed 50\n"+
			"curl -s http://127.0.0.1:8000/metrics | grep kv_offload", stdout)
	profile := fs.String("profile", "dsv4-offload16", "embedded profile: "+strings.Join(sim.ProfileNames(), ", "))
	addr := fs.String("addr", "127.0.0.1:8000", "listen address HOST:PORT")
	speed := fs.Float64("speed", 0, "time scale factor (10 = ten times faster); 0 keeps the profile's")
	keyEnv := fs.String("api-key-env", "", "environment variable holding the API key /v1 requests must send")
	allowRemote := fs.Bool("allow-remote", false, "allow listening on a non-loopback address")
	positional, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return usageErrorf("sim: unexpected arguments %q", positional)
	}
	if !*allowRemote {
		if err := requireLoopback(*addr); err != nil {
			return usageErrorf("sim: %v (pass --allow-remote to serve other machines)", err)
		}
	}
	if *speed < 0 {
		return usageErrorf("sim: --speed %g must be >= 0", *speed)
	}
	var apiKey string
	if *keyEnv != "" {
		if apiKey = os.Getenv(*keyEnv); apiKey == "" {
			return usageErrorf("sim: environment variable %s from --api-key-env is empty", *keyEnv)
		}
	}
	if _, err := sim.LoadProfile(*profile); err != nil {
		return usageErrorf("sim: %v", err)
	}
	srv, err := sim.Start(sim.Options{Profile: *profile, Addr: *addr, Speed: *speed, APIKey: apiKey})
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	fmt.Fprintf(stdout, "kvbench sim serving %s (OpenAI base URL %s/v1); interrupt to stop\n", srv.URL(), srv.URL())
	fmt.Fprintln(stdout, srv.Profile().Summary())
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return fmt.Errorf("sim: stop: %w", err)
	}
	return nil
}

// requireLoopback fails unless addr's host is a loopback address or "localhost"; an empty
// host listens on every interface.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--addr %q is not a loopback address", addr)
	}
	return nil
}
