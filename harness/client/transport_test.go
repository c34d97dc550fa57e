package client

import (
	"runtime"
	"testing"
)

// transports are the ways a chat stream travels; every streaming test runs under each.
var transports = []struct{ name, transport string }{
	{"loop", TransportAuto},
	{"net/http", TransportNetHTTP},
}

// eachTransport runs f as the subtests "loop" and "net/http", with cfg naming the transport.
func eachTransport(t *testing.T, f func(t *testing.T, cfg Config)) {
	t.Helper()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, Config{Transport: tr.transport}) })
	}
}

// transportClient is a client of the server at url (its root, without /v1) on cfg's
// transport, with the tests' API key unless cfg sets one. A loop subtest that would
// silently fall back to net/http fails (on Linux) or is skipped (where there is no loop).
func transportClient(t testing.TB, cfg Config, url string) *Client {
	t.Helper()
	cfg.BaseURL = url + "/v1"
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	c := New(cfg)
	if cfg.Transport == TransportAuto && c.loop == nil {
		if runtime.GOOS == "linux" {
			t.Fatalf("the event loop does not serve %s", url)
		}
		t.Skip("no event loop on " + runtime.GOOS)
	}
	return c
}
