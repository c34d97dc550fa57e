package metrics_test

import (
	"context"
	"errors"
	. "github.com/anvil-serving/kvbench/harness/metrics"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func serve(t *testing.T, status int, contentType, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func TestScrapeTwoURLsSumsCounters(t *testing.T) {
	half := scaleSeries(t, readSample(t), []string{"0"}, 0.5)
	const promType = "text/plain; version=0.0.4; charset=utf-8"
	target := Target{
		URLs:    []string{serve(t, 200, promType, half), serve(t, 200, promType, flatOffloadOnly(half))},
		Profile: mustProfile(t, "vllm"),
		Client:  &http.Client{Timeout: 5 * time.Second},
	}
	start := time.Now()
	snap, err := target.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[Counter]float64{StoreBytes: 21743271936, LoadBytes: 14495514624, GPUPrefixHits: 163840, ExternalPrefixHits: 98304}
	for c, v := range want {
		if r := snap.Counters[c]; !r.Present || r.Value != v {
			t.Errorf("%s = %+v, want %v", c, r, v)
		}
	}
	if len(snap.Sources) != 2 || snap.Sources[0] != target.URLs[0] || snap.Sources[1] != target.URLs[1] {
		t.Errorf("sources = %v, want %v", snap.Sources, target.URLs)
	}
	if snap.TakenAt.Before(start) || snap.TakenAt.After(time.Now()) {
		t.Errorf("taken at %v, want during the test", snap.TakenAt)
	}
	if snap.Cache.NumGPUBlocks != 30720 || len(snap.Cache.Engines) != 2 {
		t.Errorf("cache over two URLs = %+v, want two pools of 15360", snap.Cache)
	}
}

func TestScrapeErrors(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		sentinel    error
		want        []string
	}{
		{"404", 404, "text/plain; charset=utf-8", "404 page not found\n", ErrScrapeStatus,
			[]string{"404 Not Found", `"404 page not found\n"`}},
		{"500", 500, "application/json", `{"error":"boom"}`, ErrScrapeStatus, []string{"500 Internal Server Error", "application/json", "boom"}},
		{"html page", 200, "text/html; charset=utf-8", "<html><body>login</body></html>", ErrNotExposition,
			[]string{"200 OK", "text/html", "<html>"}},
		{"html without content type", 200, "", "\n<!doctype html><title>x</title>", ErrNotExposition, []string{"<!doctype html>"}},
		{"garbage as text/plain", 200, "text/plain", "hello world\n", ErrNotExposition, []string{"200 OK", "text format parsing error"}},
		{"empty 200", 200, "text/plain", "", ErrNotExposition, []string{"empty body"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := serve(t, tt.status, tt.contentType, tt.body)
			_, err := Scrape(context.Background(), nil, u)
			if err == nil {
				t.Fatal("Scrape succeeded, want an error")
			}
			msg := err.Error()
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("error %q does not wrap %v", msg, tt.sentinel)
			}
			if !strings.HasPrefix(msg, "scrape "+u+": ") || strings.Contains(msg, "\n") || strings.Count(msg, u) != 1 {
				t.Errorf("error %q: want one line naming the URL once", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestScrapeUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL + "/metrics"
	srv.Close()
	_, err := Scrape(context.Background(), nil, u)
	if err == nil || !strings.HasPrefix(err.Error(), "scrape "+u+": ") || strings.Count(err.Error(), u) != 1 {
		t.Errorf("error = %v, want one naming %s once", err, u)
	}
}

func TestScrapeAllReportsFailingURL(t *testing.T) {
	good := serve(t, 200, "text/plain", readSample(t))
	bad := serve(t, 404, "text/plain", "nope")
	_, err := ScrapeAll(context.Background(), nil, []string{good, bad})
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("error = %v, want it to name %s", err, bad)
	}
}

// TestScrapeRefusesRedirects: counters read from the server a redirect points to would pass
// for the target's.
func TestScrapeRefusesRedirects(t *testing.T) {
	other := serve(t, 200, "text/plain", "# TYPE x counter\nx 1\n")
	front := httptest.NewServer(http.RedirectHandler(other, http.StatusTemporaryRedirect))
	t.Cleanup(front.Close)
	for _, hc := range []*http.Client{nil, {Timeout: 5 * time.Second}} {
		_, err := Scrape(context.Background(), hc, front.URL+"/metrics")
		if err == nil || !strings.Contains(err.Error(), "redirect refused") || !strings.Contains(err.Error(), front.URL+"/metrics") ||
			!strings.Contains(err.Error(), other) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Scrape: %v, want a one-line redirect refusal naming both URLs", err)
		}
	}
}
