package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Errors wrapped by Scrape and Parse, for callers that map them to exit codes.
var (
	ErrNotExposition = errors.New("not a Prometheus text exposition")
	ErrScrapeStatus  = errors.New("unexpected HTTP status")
)

// maxExpositionBytes bounds what is read from one /metrics body; vLLM serves tens of KiB.
const maxExpositionBytes = 64 << 20

// Exposition is one parsed /metrics body.
type Exposition struct {
	Source    string    // the URL or file it came from
	ScrapedAt time.Time // when the request started (file: its modification time)
	families  map[string]*dto.MetricFamily
	declared  map[string]bool // families named on HELP/TYPE lines, including sample-less ones
}

// Has reports whether family appears in the exposition, with samples or only HELP/TYPE lines.
func (e Exposition) Has(family string) bool {
	_, ok := e.families[family]
	return ok || e.declared[family]
}

// Parse reads a Prometheus text exposition; source names it in errors.
func Parse(r io.Reader, source string) (Exposition, error) {
	body, err := io.ReadAll(io.LimitReader(r, maxExpositionBytes+1))
	if err != nil {
		return Exposition{}, fmt.Errorf("read %s: %w", source, err)
	}
	if len(body) > maxExpositionBytes {
		return Exposition{}, fmt.Errorf("read %s: %w: larger than %d bytes", source, ErrNotExposition, maxExpositionBytes)
	}
	exp, err := parseBody(body, source)
	if err != nil {
		return Exposition{}, fmt.Errorf("parse %s: %w", source, err)
	}
	return exp, nil
}

// ParseFile reads a saved exposition file.
func ParseFile(path string) (Exposition, error) {
	f, err := os.Open(path)
	if err != nil {
		return Exposition{}, fmt.Errorf("open metrics file: %w", err)
	}
	defer f.Close()
	exp, err := Parse(f, path)
	if err != nil {
		return Exposition{}, err
	}
	if st, err := f.Stat(); err == nil {
		exp.ScrapedAt = st.ModTime()
	}
	return exp, nil
}

func parseBody(body []byte, source string) (Exposition, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return Exposition{}, fmt.Errorf("%w: empty body", ErrNotExposition)
	}
	if trimmed[0] == '<' { // an HTML or XML page
		return Exposition{}, fmt.Errorf("%w: body starts %s", ErrNotExposition, firstBytes(body))
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return Exposition{}, fmt.Errorf("%w: %v", ErrNotExposition, err)
	}
	exp := Exposition{Source: source, families: families, declared: declaredFamilies(body)}
	if len(exp.families) == 0 && len(exp.declared) == 0 {
		return Exposition{}, fmt.Errorf("%w: no metrics in %s", ErrNotExposition, firstBytes(body))
	}
	return exp, nil
}

// declaredFamilies finds names on HELP and TYPE lines. expfmt drops a family without samples,
// yet a declared lazy family proves its missing series means "no transfer yet".
func declaredFamilies(body []byte) map[string]bool {
	declared := map[string]bool{}
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		rest, ok := bytes.CutPrefix(line, []byte("# HELP "))
		if !ok {
			rest, ok = bytes.CutPrefix(line, []byte("# TYPE "))
		}
		if !ok {
			continue
		}
		rest = bytes.TrimLeft(rest, " \t")
		if end := bytes.IndexAny(rest, " \t"); end >= 0 {
			rest = rest[:end]
		}
		if len(rest) > 0 && !declared[string(rest)] {
			declared[string(rest)] = true
		}
	}
	return declared
}

// firstBytes quotes the start of body for a one-line error.
func firstBytes(body []byte) string {
	const n = 80
	if len(body) > n {
		return strconv.Quote(string(body[:n])) + "..."
	}
	return strconv.Quote(string(body))
}

// Scrape GETs a /metrics URL and parses it. hc nil means http.DefaultClient.
func Scrape(ctx context.Context, hc *http.Client, metricsURL string) (Exposition, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return Exposition{}, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	// Ask for the classic text format: the OpenMetrics variant names counters differently.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL
		}
		return Exposition{}, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxExpositionBytes+1))
	if err != nil {
		return Exposition{}, fmt.Errorf("scrape %s: read body: %w", metricsURL, err)
	}
	contentType := resp.Header.Get("Content-Type")
	if resp.StatusCode != http.StatusOK {
		return Exposition{}, fmt.Errorf("scrape %s: %w: %s (%s), body starts %s",
			metricsURL, ErrScrapeStatus, resp.Status, contentTypeOrNone(contentType), firstBytes(body))
	}
	if mediaType, _, _ := mime.ParseMediaType(contentType); mediaType == "text/html" || mediaType == "application/json" {
		return Exposition{}, fmt.Errorf("scrape %s: %w: got %s %s, body starts %s",
			metricsURL, ErrNotExposition, resp.Status, contentType, firstBytes(body))
	}
	if len(body) > maxExpositionBytes {
		return Exposition{}, fmt.Errorf("scrape %s: %w: larger than %d bytes", metricsURL, ErrNotExposition, maxExpositionBytes)
	}
	exp, err := parseBody(body, metricsURL)
	if err != nil {
		return Exposition{}, fmt.Errorf("scrape %s: got %s %s: %w", metricsURL, resp.Status, contentTypeOrNone(contentType), err)
	}
	exp.ScrapedAt = start
	return exp, nil
}

func contentTypeOrNone(ct string) string {
	if ct == "" {
		return "no content type"
	}
	return ct
}

// ScrapeAll scrapes every URL concurrently; on failure it returns the error of the first
// failing URL in argument order.
func ScrapeAll(ctx context.Context, hc *http.Client, urls []string) ([]Exposition, error) {
	exps := make([]Exposition, len(urls))
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { exps[i], errs[i] = Scrape(ctx, hc, u) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return exps, nil
}

// Target is one server as kvbench reads it: all its metrics URLs, read with one profile.
type Target struct {
	URLs    []string
	Profile Profile
	Client  *http.Client // nil means http.DefaultClient
}

// Snapshot scrapes every URL of the target and returns their summed readings.
func (t Target) Snapshot(ctx context.Context) (Snapshot, error) {
	exps, err := ScrapeAll(ctx, t.Client, t.URLs)
	if err != nil {
		return Snapshot{}, err
	}
	return t.Profile.Snapshot(exps...), nil
}
