package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/harness/redact"
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
	// resolution is, per sample name, the largest step between the values the server could
	// print there, where it prints fewer significant digits than a value's integer part has.
	resolution map[string]float64
}

// Has reports whether family appears in the exposition, with samples or only HELP/TYPE lines.
func (e Exposition) Has(family string) bool {
	_, ok := e.families[family]
	return ok || e.declared[family]
}

// HasPrefix reports whether any family whose name starts with prefix appears, with samples
// or only HELP/TYPE lines.
func (e Exposition) HasPrefix(prefix string) bool {
	for name := range e.families {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	for name := range e.declared {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// Serves reports whether at least one series matches sel (a family declared without series
// serves none).
func (e Exposition) Serves(sel Selector) bool {
	mf := e.families[sel.Metric]
	if mf == nil {
		return false
	}
	for _, m := range mf.GetMetric() {
		if matches(m, sel.Labels) {
			return true
		}
	}
	return false
}

// Help is family's HELP text, "" when the exposition has none for it.
func (e Exposition) Help(family string) string { return e.families[family].GetHelp() }

// Quantized reports whether the server prints values with fewer significant digits than
// some of them have (see printResolution).
func (e Exposition) Quantized() bool { return len(e.resolution) > 0 }

// LabelValues lists the values label takes in family's series ("" for a series without
// it), sorted and without repeats.
func (e Exposition) LabelValues(family, label string) []string {
	mf := e.families[family]
	if mf == nil {
		return nil
	}
	seen := map[string]bool{}
	for _, m := range mf.GetMetric() {
		v := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				v = lp.GetValue()
			}
		}
		seen[v] = true
	}
	return slices.Sorted(maps.Keys(seen))
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

// Read reads one metrics source named on the command line: an http:// or https:// URL is
// scraped (Scrape), anything else is a saved exposition file (ParseFile).
func Read(ctx context.Context, hc *http.Client, source string) (Exposition, error) {
	if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
		return Scrape(ctx, hc, source)
	}
	return ParseFile(source)
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
	exp := Exposition{Source: source, families: families, declared: declaredFamilies(body), resolution: printResolution(body)}
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

// defaultPrintDigits is the precision of a C++ stream's default float output (%g with 6
// significant digits), which llama.cpp's server prints its counters with.
const defaultPrintDigits = 6

// printResolution finds values printed with fewer significant digits than their integer
// part has. A printer that writes an exponent below 10^16 is not Python's prometheus_client
// (its repr writes every digit up to there) nor exact: it keeps a fixed number of
// significant digits, the most any of its exponent-form values shows and at least 6 (C++'s
// default, which trailing-zero stripping can hide). Above 10^6 a 6-digit printer steps by
// 10 or more, so a small delta reads 0 or a jump of the step. The result maps each sample
// name to the largest step among its values, for steps above 1; nil when exact.
func printResolution(body []byte) map[string]float64 {
	type sample struct {
		name string
		v    float64
	}
	var samples []sample
	digits := 0
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, value, ok := sampleValueText(line)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if mant, _, exp := strings.Cut(strings.ToLower(value), "e"); exp && math.Abs(v) < 1e16 {
			digits = max(digits, significantDigits(mant))
		}
		samples = append(samples, sample{name, v})
	}
	if digits == 0 {
		return nil
	}
	p := max(digits, defaultPrintDigits)
	out := map[string]float64{}
	for _, s := range samples {
		step := math.Pow(10, math.Floor(math.Log10(math.Abs(s.v)))-float64(p-1))
		if step > 1 && step > out[s.name] {
			out[s.name] = step
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// sampleValueText splits a sample line into its metric name and value text.
func sampleValueText(line []byte) (name, value string, ok bool) {
	rest := line
	if i := bytes.IndexAny(line, "{ \t"); i >= 0 {
		name, rest = string(line[:i]), line[i:]
	} else {
		return "", "", false
	}
	if len(rest) > 0 && rest[0] == '{' {
		inQuote := false
		end := -1
		for i := 1; i < len(rest); i++ {
			switch c := rest[i]; {
			case c == '\\' && inQuote:
				i++
			case c == '"':
				inQuote = !inQuote
			case c == '}' && !inQuote:
				end = i
			}
			if end >= 0 {
				break
			}
		}
		if end < 0 {
			return "", "", false
		}
		rest = rest[end+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return "", "", false
	}
	return name, string(fields[0]), true
}

// significantDigits counts the digits of a mantissa as printed, leading zeros aside.
func significantDigits(mant string) int {
	n := 0
	for _, c := range strings.TrimLeft(strings.NewReplacer("-", "", "+", "", ".", "").Replace(mant), "0") {
		if c >= '0' && c <= '9' {
			n++
		}
	}
	return n
}

// firstBytes quotes the start of body for a one-line error.
func firstBytes(body []byte) string {
	const n = 80
	if len(body) > n {
		return strconv.Quote(string(body[:n])) + "..."
	}
	return strconv.Quote(string(body))
}

// Scrape GETs a /metrics URL and parses it. hc nil means http.DefaultClient. A redirect is
// refused: counters read from another server would pass for the target's.
func Scrape(ctx context.Context, hc *http.Client, metricsURL string) (Exposition, error) {
	hc = redact.NoRedirects(hc)
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
