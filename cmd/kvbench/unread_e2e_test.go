package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// futureFamilies are cache families of an engine version kvbench's model does not know,
// sorted: ten of them, more than the console names.
var futureFamilies = func() []string {
	var out []string
	for i := range 10 {
		out = append(out, fmt.Sprintf("vllm:kv_future_tier%d_hits_total", i))
	}
	return out
}()

// withFutureFamilies serves srv's /metrics with futureFamilies and a family that speaks of
// no cache appended. Requests go to srv itself: a test proxy in the stream's path would be
// one more thing to fail under load.
func withFutureFamilies(t *testing.T, srv *sim.Server) string {
	t.Helper()
	u, _ := url.Parse(srv.URL())
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/metrics" || resp.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var extra strings.Builder
		for _, f := range futureFamilies {
			fmt.Fprintf(&extra, "# TYPE %s counter\n%s{tier=\"3:object\"} 1024\n", f, f)
		}
		extra.WriteString("# TYPE vllm:grammar_compile_seconds_total counter\nvllm:grammar_compile_seconds_total 2\n")
		body = append(body, extra.String()...)
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	return front.URL
}

// TestCountersAndPreflightListUnreadFamilies: the cache families a server serves that
// kvbench's model does not read are listed whole and in order by `kvbench counters`, by
// preflight's JSON and in the run record, and named on the console up to a bound.
func TestCountersAndPreflightListUnreadFamilies(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	front := withFutureFamilies(t, srv)
	unread := func(metricsURL string) []string {
		_, out, err := runCountersCLI(t, metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		var counters struct {
			Unread []string `json:"unread_families"`
		}
		if err := json.Unmarshal([]byte(out), &counters); err != nil || counters.Unread == nil {
			t.Fatalf("counters of %s: unread_families %v (%v)", metricsURL, counters.Unread, err)
		}
		return counters.Unread
	}
	// What the sim itself serves unread (its vLLM's transfer-size histogram) comes first.
	own := unread(srv.URL() + "/metrics")
	all := append(slices.Clone(futureFamilies), own...)
	slices.Sort(all)
	if got := unread(front + "/metrics"); !reflect.DeepEqual(got, all) {
		t.Fatalf("counters: unread %q, want %q", got, all)
	}

	rep, stderr, code := runJSON(t, context.Background(), "preflight", "smoke", "--endpoint", srv.URL()+"/v1", "--metrics", front+"/metrics")
	if code != cli.ExitOK {
		t.Fatalf("preflight: exit %d %s", code, stderr)
	}
	if got := strs(rep["unread_families"]); !reflect.DeepEqual(got, all) {
		t.Fatalf("preflight JSON unread_families %q, want %q", got, all)
	}

	text, stderr, code := runCLI(t, "preflight", "smoke", "--endpoint", srv.URL()+"/v1", "--metrics", front+"/metrics")
	want := fmt.Sprintf("not read by kvbench's model of vllm (%d cache families; verdicts are reached without them): %s and %d more",
		len(all), strings.Join(all[:6], ", "), len(all)-6)
	if code != cli.ExitOK || !strings.Contains(text, want) || strings.Contains(text, all[6]) {
		t.Fatalf("preflight text (exit %d %s) lacks %q or names more:\n%s", code, stderr, want, text)
	}

	rec, stderr, code := runJSON(t, context.Background(), "run", "smoke", "--endpoint", srv.URL()+"/v1", "--metrics", front+"/metrics", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d %s", code, stderr)
	}
	if listed := strs(section(t, rec, "preflight")["unread_families"]); !reflect.DeepEqual(listed, all) {
		t.Fatalf("run record preflight.unread_families %q, want %q", listed, all)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("the run's console lacks %q:\n%s", want, stderr)
	}
}

// strs is a JSON array of strings as decoded into any.
func strs(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
