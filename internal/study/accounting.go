package study

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/units"
)

// AccountingSchema is seed 000's schema.
const AccountingSchema = "anvil-serving.kv-accounting-summary/v1"

// Derivation is the formula the GiB estimates follow, stated in the record as seed 000 does.
const Derivation = "occupied_gib_estimate = configured total_bytes / 2**30 * sampled_peak_block_occupancy_fraction; unused_pool_gib_estimate = total_gib - occupied_gib_estimate"

// ErrNoOccupancy means a run has no sampled block occupancy to account for.
var ErrNoOccupancy = errors.New("no sampled block occupancy")

// PoolSpec says how big the GPU KV pool is in bytes. With BytesPerGPU and GPUs set the pool
// is "configured" (SourcePath, when given, is the file the figure came from); otherwise it is
// derived from the runs: the server's token slots times the bytes per stored token measured.
type PoolSpec struct {
	BytesPerGPU int64
	GPUs        int
	SourcePath  string
}

// Pool is seed 000's pool section.
type Pool struct {
	Status                     string     `json:"status"`
	BytesPerGPU                int64      `json:"bytes_per_gpu"`
	GPUCount                   int        `json:"gpu_count"`
	TotalBytes                 int64      `json:"total_bytes"`
	TotalGiB                   float64    `json:"total_gib"`
	RuntimeReportedTokenSlots  int        `json:"runtime_reported_allocated_token_slots"`
	RoundedStartupGiBPerGPU    float64    `json:"rounded_startup_gib_per_gpu"`
	ConfiguredByteSource       ByteSource `json:"configured_byte_source"`
	StoreBytesPerTokenMeasured float64    `json:"store_bytes_per_token_measured,omitempty"`
}

// ByteSource says where the pool's byte figure came from: a kind of figure, or a file with
// its sha256.
type ByteSource struct {
	Kind   string `json:"kind,omitempty"`
	Path   string `json:"path,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// Summary is the kv-accounting-summary/v1 record (seed 000): KV pool occupancy per tested
// population, with the pool it is measured against and the limits of the estimate.
type Summary struct {
	Schema     string   `json:"schema"`
	Date       string   `json:"date"`
	Identity   Identity `json:"identity"`
	Pool       Pool     `json:"pool"`
	Derivation string   `json:"derivation"`
	Rows       []Row    `json:"rows"`
	Limits     []string `json:"limits"`
}

// Identity is the model the populations ran on.
type Identity struct {
	Model    string `json:"model"`
	Revision string `json:"revision"`
}

// Row is one population: one step of one run.
type Row struct {
	Population string `json:"population"`
	// ActualPromptTokensP50 is null when no request of the row reported its prompt tokens.
	ActualPromptTokensP50      *float64 `json:"actual_prompt_tokens_p50"`
	RequestedClientConcurrency int      `json:"requested_client_concurrency"`
	SampledEngineActiveMax     int      `json:"sampled_engine_active_max"`
	SampledPeakBlockOccupancy  float64  `json:"sampled_peak_block_occupancy_fraction"`
	OccupancyStatus            string   `json:"occupancy_status"`
	OccupiedGiBEstimate        float64  `json:"occupied_gib_estimate"`
	UnusedPoolGiBEstimate      float64  `json:"unused_pool_gib_estimate"`
	GiBStatus                  string   `json:"gib_status"`
	Source                     struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	} `json:"source"`
	samples    int
	intervalMS float64
}

// Accounting computes the kv-accounting-summary/v1 of runs (paths relative to base).
func Accounting(rs []*runs.Run, spec PoolSpec, base string) (*Summary, error) {
	if len(rs) == 0 {
		return nil, errors.New("accounting needs at least one run")
	}
	pool, err := poolOf(rs, spec, base)
	if err != nil {
		return nil, err
	}
	var rows []Row
	var missing []string // steps with no occupancy sample: not accounted, and said so
	newest := ""
	for _, r := range rs {
		if t := r.ObservedAt; t > newest {
			newest = t
		}
		sums := map[string]string{}
		for _, f := range r.Files {
			sums[f.Path] = f.SHA256
		}
		for _, rep := range r.Repetitions {
			for i, a := range rep.Steps {
				path := filepath.Join(r.Dir, rep.Artifacts[i])
				population := name(r) + "/" + a.Step
				if rep.Index > 0 {
					population += fmt.Sprintf(" (repetition %d)", rep.Index)
				}
				if a.Interrupted {
					population += " (interrupted: only the requests measured before the run stopped)"
				}
				if a.Sampled.PeakKVUsage == nil {
					missing = append(missing, population+": "+noOccupancy(a.Sampled.IntervalMS))
					continue
				}
				row := Row{
					Population:                 population,
					RequestedClientConcurrency: a.Concurrency,
					SampledPeakBlockOccupancy:  *a.Sampled.PeakKVUsage,
					OccupancyStatus:            "measured",
					GiBStatus:                  "estimated",
					samples:                    a.Sampled.Count,
					intervalMS:                 a.Sampled.IntervalMS,
				}
				if a.Sampled.PeakRunning != nil {
					row.SampledEngineActiveMax = int(*a.Sampled.PeakRunning)
				}
				var tokens []float64
				for _, q := range a.Requests {
					if q.Result.PromptTokens != nil {
						tokens = append(tokens, float64(*q.Result.PromptTokens))
					}
				}
				row.ActualPromptTokensP50 = median(tokens)
				row.OccupiedGiBEstimate = float64(pool.TotalBytes) / (1 << 30) * row.SampledPeakBlockOccupancy
				row.UnusedPoolGiBEstimate = pool.TotalGiB - row.OccupiedGiBEstimate
				row.Source.Path, row.Source.SHA256 = rel(base, path), sums[path]
				rows = append(rows, row)
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoOccupancy, joinLimited(missing))
	}
	date := newest
	if t, err := time.Parse(time.RFC3339, newest); err == nil {
		date = t.UTC().Format("2006-01-02")
	}
	return &Summary{
		Schema:     AccountingSchema,
		Date:       date,
		Identity:   Identity{Model: rs[0].Model.Repo, Revision: rs[0].Model.Revision},
		Pool:       pool,
		Derivation: Derivation,
		Rows:       rows,
		Limits:     limits(rs, rows, missing, pool),
	}, nil
}

// noOccupancy says why a step has no block occupancy: no kv_usage sample fell inside its
// requests, and the likely causes, with the interval it was sampled at when one was recorded.
func noOccupancy(intervalMS float64) string {
	interval := "no sample interval was recorded (the step was not sampled)"
	if intervalMS > 0 {
		interval = fmt.Sprintf("its requests were shorter than the %g ms sample interval", intervalMS)
	}
	return "no kv_usage sample fell inside its requests (the server may not expose vllm:kv_cache_usage_perc, the run may have stopped first, or " + interval + ")"
}

// storeBytesPerToken is the bytes per stored token r measured, with where it was read: the
// whole run's store counters, or, when those give none (a step unread, the server gone
// before the end), the figure a replay's capacity math measured before it.
func storeBytesPerToken(r *runs.Run) (float64, string, bool) {
	if v := r.Cache.StoreBytesPerTokenMeasured; v != nil {
		return *v, "server token slots x measured bytes per stored token", true
	}
	for _, id := range r.ReplayStepIDs() {
		if c := r.Replay(id).Capacity; c != nil && c.Setup.StoreBytesSource == "measured" && c.Setup.StoreBytesPerToken > 0 {
			return c.Setup.StoreBytesPerToken, "server token slots x bytes per stored token measured for step " + id, true
		}
	}
	return 0, "", false
}

func poolOf(rs []*runs.Run, spec PoolSpec, base string) (Pool, error) {
	cache := rs[0].Cache
	p := Pool{RuntimeReportedTokenSlots: cache.GPUKVCacheTokens}
	if spec.BytesPerGPU > 0 {
		p.Status = "configured"
		p.BytesPerGPU, p.GPUCount = spec.BytesPerGPU, max(spec.GPUs, 1)
		src := ByteSource{Kind: "command-line flags"}
		if spec.SourcePath != "" {
			sum, err := runs.FileSHA256(spec.SourcePath)
			if err != nil {
				return Pool{}, fmt.Errorf("pool byte source: %w", err)
			}
			src = ByteSource{Path: rel(base, spec.SourcePath), SHA256: sum}
		}
		p.ConfiguredByteSource = src
	} else {
		// The server reports token slots, not bytes: derive bytes from the bytes per stored
		// token the runs measured, and say so.
		perToken, kind, ok := storeBytesPerToken(rs[0])
		var lacks []string
		if !ok {
			lacks = append(lacks, "no bytes per stored token was measured (no store counters over the run, and no replay measured one)")
		}
		if cache.GPUKVCacheTokens == 0 {
			lacks = append(lacks, "the server reported no GPU token slots")
		}
		if len(lacks) > 0 {
			return Pool{}, fmt.Errorf("run %s cannot size the pool: %s: pass --pool-bytes-per-gpu and --gpus", name(rs[0]), strings.Join(lacks, "; "))
		}
		p.Status = "derived"
		p.GPUCount = max(spec.GPUs, 1)
		p.StoreBytesPerTokenMeasured = perToken
		p.BytesPerGPU = int64(math.Round(float64(cache.GPUKVCacheTokens) * perToken / float64(p.GPUCount)))
		p.ConfiguredByteSource = ByteSource{
			Kind:   kind,
			Path:   rel(base, rs[0].Files[0].Path), // the run.json holding both figures
			SHA256: rs[0].Files[0].SHA256,
		}
	}
	p.TotalBytes = p.BytesPerGPU * int64(p.GPUCount)
	p.TotalGiB = math.Round(float64(p.TotalBytes)/(1<<30)*100) / 100
	p.RoundedStartupGiBPerGPU = math.Round(float64(p.BytesPerGPU)/(1<<30)*100) / 100
	return p, nil
}

// limits says which of seed 000's caveats hold for these runs, computed from what was sampled.
func limits(rs []*runs.Run, rows []Row, missing []string, pool Pool) []string {
	minSamples, interval := math.MaxInt, 0.0
	for _, r := range rows {
		minSamples = min(minSamples, r.samples)
		interval = max(interval, r.intervalMS)
	}
	backend := rs[0].Scenario.Target.Backend
	out := []string{
		fmt.Sprintf("Block occupancy is the server's KV block-pool usage gauge (backend profile %q), sampled every %g ms while requests ran and at each request's first output; each row's fraction is the sampled maximum (%s per row at least).", backend, interval, plural(minSamples, "sample")),
	}
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("Not accounted (%s): %s.", plural(len(missing), "step"), joinLimited(missing)))
	}
	for _, r := range rs[1:] {
		if c := r.Cache; c.GPUKVCacheTokens != pool.RuntimeReportedTokenSlots {
			out = append(out, fmt.Sprintf("Run %s reported %d GPU token slots, not the %d of the pool its GiB estimates use: its fractions are of its own pool.", name(r), c.GPUKVCacheTokens, pool.RuntimeReportedTokenSlots))
		}
	}
	if pool.Status == "configured" {
		out = append(out, fmt.Sprintf("GiB values are estimates multiplying the measured block fraction by the configured %d-GPU pool; the gauge does not split cache groups.", pool.GPUCount))
	} else {
		out = append(out, fmt.Sprintf("GiB values are estimates multiplying the measured block fraction by a pool derived from %d token slots at %s measured bytes per stored token; the gauge does not split cache groups.", pool.RuntimeReportedTokenSlots, units.Whole(pool.StoreBytesPerTokenMeasured)))
	}
	out = append(out, "Pool usage includes shared-prefix blocks and block rounding; it is not a sum of live logical prompt tokens.")
	var under []string
	maxActive := 0
	for _, r := range rows {
		maxActive = max(maxActive, r.SampledEngineActiveMax)
		if r.RequestedClientConcurrency > r.SampledEngineActiveMax {
			under = append(under, fmt.Sprintf("%s asked for %d but sampled at most %d", r.Population, r.RequestedClientConcurrency, r.SampledEngineActiveMax))
		}
	}
	switch {
	case len(under) > 0:
		out = append(out, "Requested concurrency was not always reached: "+joinLimited(under)+". These rows do not establish that many simultaneous full-window sequences.")
	default:
		out = append(out, fmt.Sprintf("At most %s sampled active at once across these runs; no row establishes more simultaneous full-window sequences than that.", plural(maxActive, "sequence was", "sequences were")))
	}
	out = append(out,
		"Unused preallocated KV capacity is not free GPU memory for loading another model.",
		"These are measured run peaks, not a current idle/usage snapshot.")
	return out
}

func joinLimited(s []string) string {
	if len(s) > 4 {
		s = append(slices.Clone(s[:4]), fmt.Sprintf("and %d more", len(s)-4))
	}
	out := ""
	for i, x := range s {
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}

// plural words a count: plural(1, "sample") is "1 sample", plural(2, "sample") "2 samples";
// an explicit plural form may follow the singular.
func plural(n int, one string, many ...string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	if len(many) > 0 {
		return fmt.Sprintf("%d %s", n, many[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// median of xs (the mean of the middle two for an even count, as seed 000's p50s are);
// nil when there are none: a p50 nothing measured is absent, never 0.
func median(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := stats.Median(s)
	return &m
}
