package trace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Config says what Analyze computes.
type Config struct {
	// BlockTokens is the trace's block size (DefaultBlockTokens when 0; AnalyzeFile: the
	// format's).
	BlockTokens int
	// Format is the trace file's format for AnalyzeFile ("" or FormatAuto: told from its
	// content).
	Format Format
	// CapacityTokens are the LRU capacities to evaluate, in tokens; a capacity holds
	// floor(capacity/BlockTokens) whole blocks.
	CapacityTokens []int64
	// Tiers, when set, adds the two-tier model.
	Tiers *Tiers
}

// Tiers sizes the two-tier model: a GPU prefix cache and a host tier, in tokens (each
// holding floor(tokens/BlockTokens) whole blocks). HostTokens 0 is a server without a host
// tier.
type Tiers struct {
	GPUTokens  int64 `json:"gpu_tokens"`
	HostTokens int64 `json:"host_tokens"`
	// PoolHoldsOutput models the GPU tier as an engine's block pool of GPUTokens: besides
	// its whole prompt blocks, each request holds blocks for its partial last prompt block
	// and its output (ceil((input_length + max(output_length, 1)) / block_tokens) blocks in
	// all) while it runs, and frees them into the same LRU queue, before its prompt blocks,
	// so they take the pool's room and never hit. An engine's pool size (vLLM's
	// num_gpu_blocks x block_size) counts those blocks too, so the ideal at a server's pool
	// size sets it.
	PoolHoldsOutput bool `json:"pool_holds_output,omitempty"`
}

// AnalysisSchema is the schema of kvbench trace analyze --format json.
const AnalysisSchema = "anvil-serving.kvbench-trace-analysis/v1"

// Analysis is the ideal reference of a trace: what LRU caches of given sizes would have
// served, computed from the trace alone. The rules (docs/traces.md, "The ideal reference"):
//
//   - Only whole blocks are cached, as real engines cache full blocks only: a request's
//     partial last block is never a hit and is never stored.
//   - The block holding a request's last prompt token is never a hit: an engine computes at
//     least that token to produce the first output token (vLLM caps a prefix hit at
//     input_length-1 tokens). A request hits at most floor((input_length-1)/block_tokens)
//     blocks.
//   - A block hits only while every block before it in the same request hit (hits are a
//     prefix). Blocks are identified by their whole prefix (the chain of ids up to them), as
//     an engine's chained block hashes are, so an id reused after a different prefix is a
//     different block. Blocks a request leaves unnamed are private to it.
//   - Hit rate = hit tokens / prompt tokens, prompt tokens being the sum of input_length.
//   - Requests are served one after another in trace order; after a request every one of its
//     whole blocks is in the cache, its first block the most recently used and its last the
//     least (vLLM frees a request's blocks tail first). Output tokens are not cached.
type Analysis struct {
	File            string  `json:"file,omitempty"`
	Window          *Window `json:"window,omitempty"`
	DroppedRequests int     `json:"dropped_requests"` // over the window's max_input_tokens
	// Format is the file's format and the fields it carried (AnalyzeFile). Without prefix
	// information every hit figure is unknown: JSON null, never 0.
	Format *Info `json:"trace_format,omitempty"`

	BlockTokens    int   `json:"block_tokens"`
	Requests       int   `json:"requests"`
	PromptTokens   int64 `json:"prompt_tokens"`
	WholeBlocks    int64 `json:"whole_blocks"`    // whole blocks over all requests
	DistinctBlocks int64 `json:"distinct_blocks"` // distinct whole blocks (by prefix)

	// MaxHitTokens and MaxHitRate are an unbounded cache's: every block seen before hits.
	MaxHitTokens int64   `json:"max_hit_tokens"`
	MaxHitRate   float64 `json:"max_hit_rate"`
	// Capacities are the LRU caches of Config.CapacityTokens, in that order.
	Capacities []CapacityHitRate `json:"capacities"`
	// Tiers is the two-tier model, when Config.Tiers asked for it.
	Tiers *TierShares `json:"tiers,omitempty"`
}

// CapacityHitRate is the ideal hit rate of one LRU cache size.
type CapacityHitRate struct {
	CapacityTokens int64   `json:"capacity_tokens"`
	CapacityBlocks int64   `json:"capacity_blocks"`
	HitTokens      int64   `json:"hit_tokens"`
	HitRate        float64 `json:"hit_rate"`
}

// TierShares is the two-tier model's account of the prompt tokens: served from the GPU
// prefix cache, loaded from the host tier, or computed (GPU + host + recompute = prompt
// tokens). The GPU tier is the single-tier LRU of GPUTokens. The host tier is an LRU
// written through as vLLM's native offloading connector (OffloadingConnector with its LRU
// manager) writes it, request by request:
//
//  1. GPU lookup: the longest prefix of whole blocks in the GPU cache (capped as above).
//  2. Host touch: each of the request's whole blocks already in the host tier becomes
//     recently used, last block first, so its first block ends the most recent (the
//     connector touches them at lookup, GPU hits included).
//  3. Host lookup: the blocks right after the GPU hits that are in the host tier, in a row
//     (same cap), are loaded instead of computed.
//  4. Store: when the host served nothing, every whole block of the request not already in
//     the host tier is stored, GPU hits included; when it served some, the whole blocks
//     after the loaded ones are. The blocks to store are counted first; when they exceed
//     the tier's capacity nothing is stored (the connector cannot make room), otherwise
//     the least recently used blocks are evicted to make room and the new blocks are
//     written, then all the request's blocks are touched again as in 2.
//  5. GPU update: every whole block of the request enters the GPU cache (see Analysis).
//
// A prefill is modelled as one step (chunked prefill stores chunk by chunk, which changes
// the outcome only when a request's own blocks overflow the host tier), and decode blocks
// are not modelled (the trace does not say what a request generated).
type TierShares struct {
	Tiers
	record.IdealShares
}

// Analyze reads src to its end and computes its ideal reference. Memory follows the number
// of distinct blocks, not the number of requests.
func Analyze(src Source, cfg Config) (*Analysis, error) {
	bt := cfg.BlockTokens
	if bt <= 0 {
		bt = DefaultBlockTokens
	}
	for _, c := range cfg.CapacityTokens {
		if c < 0 {
			return nil, fmt.Errorf("capacity %d tokens is negative", c)
		}
	}
	if t := cfg.Tiers; t != nil && (t.GPUTokens < 0 || t.HostTokens < 0) {
		return nil, fmt.Errorf("tier sizes %d and %d tokens must not be negative", t.GPUTokens, t.HostTokens)
	}
	a := &Analysis{BlockTokens: bt}

	// Distinct capacities in blocks, ascending; hitsBelow[j] counts the hit blocks whose
	// prefix depth reaches capacity j first (hits for capacity j = sum of hitsBelow[:j+1]).
	sizes := make([]int64, 0, len(cfg.CapacityTokens))
	for _, c := range cfg.CapacityTokens {
		sizes = append(sizes, c/int64(bt))
	}
	sizes = slices.Compact(slices.Sorted(slices.Values(sizes)))
	hitsBelow := make([]int64, len(sizes)+1)

	var tiers *tierModel
	if cfg.Tiers != nil {
		tiers = newTierModel(cfg.Tiers.GPUTokens/int64(bt), cfg.Tiers.HostTokens/int64(bt))
	}
	stack := newRecencyStack()
	var req Request
	var keys []uint64
	var unbounded int64
	for {
		err := src.Next(&req)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		a.Requests++
		a.PromptTokens += int64(req.InputLength)
		keys = blockKeys(keys[:0], &req, bt, uint64(a.Requests))
		hittable := (req.InputLength - 1) / bt
		a.WholeBlocks += int64(len(keys))

		deepest := -1 // the deepest stack depth among the blocks so far
		for i := 0; i < hittable; i++ {
			d := stack.depth(keys[i])
			if d < 0 {
				break // never seen: a miss at every capacity, and so is every later block
			}
			deepest = max(deepest, d)
			unbounded++
			// Hit for every capacity above the deepest depth: sizes[j] > deepest.
			j := sort.Search(len(sizes), func(j int) bool { return sizes[j] > int64(deepest) })
			hitsBelow[j]++
		}
		for i := len(keys) - 1; i >= 0; i-- {
			stack.access(keys[i])
		}
		if tiers != nil {
			extra := 0
			if cfg.Tiers.PoolHoldsOutput {
				extra = (req.InputLength+max(req.OutputLength, 1)+bt-1)/bt - len(keys)
			}
			tiers.serve(keys, hittable, extra)
		}
	}
	if a.Requests == 0 {
		return nil, ErrEmpty
	}
	a.DistinctBlocks = int64(stack.pos.count)
	a.MaxHitTokens = unbounded * int64(bt)
	a.MaxHitRate = a.share(a.MaxHitTokens)
	hitBlocks := make(map[int64]int64, len(sizes))
	var running int64
	for j, size := range sizes {
		running += hitsBelow[j]
		hitBlocks[size] = running
	}
	a.Capacities = make([]CapacityHitRate, 0, len(cfg.CapacityTokens))
	for _, c := range cfg.CapacityTokens {
		blocks := c / int64(bt)
		hit := hitBlocks[blocks] * int64(bt)
		a.Capacities = append(a.Capacities, CapacityHitRate{CapacityTokens: c, CapacityBlocks: blocks, HitTokens: hit, HitRate: a.share(hit)})
	}
	if tiers != nil {
		t := &TierShares{Tiers: *cfg.Tiers, IdealShares: record.IdealShares{
			GPUHitTokens:  tiers.gpuHits * int64(bt),
			HostHitTokens: tiers.hostHits * int64(bt),
			StoredTokens:  tiers.stored * int64(bt),
		}}
		t.RecomputeTokens = a.PromptTokens - t.GPUHitTokens - t.HostHitTokens
		t.GPUShare, t.HostShare, t.RecomputeShare = a.share(t.GPUHitTokens), a.share(t.HostHitTokens), a.share(t.RecomputeTokens)
		a.Tiers = t
	}
	return a, nil
}

// AnalyzeFile analyses the window w of the trace file at path; once ctx is done it stops
// with an error wrapping ctx's cause.
func AnalyzeFile(ctx context.Context, path string, w Window, cfg Config) (*Analysis, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	f, err := OpenFormat(ctx, path, cfg.Format, cfg.BlockTokens)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg.BlockTokens = f.BlockTokens()
	sel := Select(f, w)
	a, err := Analyze(sel, cfg)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", path, context.Cause(ctx)) // not the closed file's error
	}
	if err != nil {
		if errors.Is(err, ErrEmptyWindow) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, err
	}
	a.File = path
	if !w.IsWhole() {
		a.Window = &w
	}
	a.DroppedRequests = sel.Dropped()
	info := f.Info()
	a.Format = &info
	return a, nil
}

// PrefixUnknown reports whether the analysed trace names no blocks, so that what a cache
// could hit is unknown.
func (a *Analysis) PrefixUnknown() bool { return a.Format != nil && !a.Format.PrefixInformation }

// MarshalJSON writes every hit figure of a trace without prefix information as null.
func (a *Analysis) MarshalJSON() ([]byte, error) {
	type plain Analysis
	if !a.PrefixUnknown() {
		return json.Marshal((*plain)(a))
	}
	type unknownCapacity struct {
		CapacityTokens int64    `json:"capacity_tokens"`
		CapacityBlocks int64    `json:"capacity_blocks"`
		HitTokens      *int64   `json:"hit_tokens"`
		HitRate        *float64 `json:"hit_rate"`
	}
	caps := make([]unknownCapacity, len(a.Capacities))
	for i, c := range a.Capacities {
		caps[i] = unknownCapacity{CapacityTokens: c.CapacityTokens, CapacityBlocks: c.CapacityBlocks}
	}
	return json.Marshal(struct {
		*plain
		DistinctBlocks *int64            `json:"distinct_blocks"`
		MaxHitTokens   *int64            `json:"max_hit_tokens"`
		MaxHitRate     *float64          `json:"max_hit_rate"`
		Capacities     []unknownCapacity `json:"capacities"`
		Tiers          *TierShares       `json:"tiers"`
	}{plain: (*plain)(a), Capacities: caps})
}

func (a *Analysis) share(tokens int64) float64 {
	if a.PromptTokens == 0 {
		return 0
	}
	return float64(tokens) / float64(a.PromptTokens)
}

// WriteText writes the analysis as the table `kvbench trace analyze` prints.
func (a *Analysis) WriteText(w io.Writer) error {
	var b strings.Builder
	if a.File != "" {
		fmt.Fprintf(&b, "trace %s\n", a.File)
	}
	window := "whole trace"
	if a.Window != nil {
		window = a.Window.String()
	}
	if f := a.Format; f != nil && (f.Format != string(FormatMooncake) || f.Gzip) {
		how := "named"
		if f.Detected {
			how = "told from its content"
		}
		if f.Gzip {
			how += ", gzip"
		}
		fmt.Fprintf(&b, "  format %s (%s), fields: %s\n", f.Format, how, strings.Join(f.Fields, ", "))
		if f.SkippedRows > 0 {
			fmt.Fprintf(&b, "  %s rows skipped (0 request tokens: no request reached the model)\n", thousands(int64(f.SkippedRows)))
		}
	}
	fmt.Fprintf(&b, "  %s requests (%s), %s dropped over max_input_tokens\n", thousands(int64(a.Requests)), window, thousands(int64(a.DroppedRequests)))
	if a.PrefixUnknown() {
		fmt.Fprintf(&b, "  %s prompt tokens\n", thousands(a.PromptTokens))
		fmt.Fprintf(&b, "\nno prefix information: the trace names no blocks (lengths and arrivals only), so the hit rate\n"+
			"an ideal cache would reach is unknown at every capacity (a replay sends prompts that share nothing,\n"+
			"or a line's text_input as given)\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "  %s prompt tokens, %s whole blocks of %d tokens, %s distinct\n",
		thousands(a.PromptTokens), thousands(a.WholeBlocks), a.BlockTokens, thousands(a.DistinctBlocks))
	b.WriteString("\nideal prefix-cache hit rate (LRU, whole blocks, prefix hits; see docs/traces.md)\n")
	rows := [][]string{{"capacity tokens", "blocks", "hit tokens", "hit rate"}}
	for _, c := range a.Capacities {
		rows = append(rows, []string{thousands(c.CapacityTokens), thousands(c.CapacityBlocks), thousands(c.HitTokens), percent(c.HitRate)})
	}
	rows = append(rows, []string{"unbounded", "", thousands(a.MaxHitTokens), percent(a.MaxHitRate)})
	writeTable(&b, rows)
	if t := a.Tiers; t != nil {
		fmt.Fprintf(&b, "\ntwo tiers: GPU %s tokens + host %s tokens (write-through, as vLLM's offloading connector)\n",
			thousands(t.GPUTokens), thousands(t.HostTokens))
		if t.PoolHoldsOutput {
			b.WriteString("  the GPU pool also holds each request's partial block and output while it runs\n")
		}
		writeTable(&b, [][]string{
			{"served by", "tokens", "share"},
			{"GPU prefix cache", thousands(t.GPUHitTokens), percent(t.GPUShare)},
			{"host tier", thousands(t.HostHitTokens), percent(t.HostShare)},
			{"recompute", thousands(t.RecomputeTokens), percent(t.RecomputeShare)},
		})
		fmt.Fprintf(&b, "  stored to the host tier: %s tokens\n", thousands(t.StoredTokens))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable writes rows indented, the first column left-aligned and the others right.
func writeTable(b *strings.Builder, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, r := range rows {
		line := "  " + r[0] + strings.Repeat(" ", widths[0]-len(r[0]))
		for i, c := range r[1:] {
			line += "  " + strings.Repeat(" ", widths[i+1]-len(c)) + c
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
}

// percent writes a hit rate of the ideal's tables, to two places as they always were.
var percent = units.Fixed(units.Percentage).Places(2).Format

// thousands writes n with comma separators.
func thousands(n int64) string { return units.Grouped(int(n)) }

// MarshalJSON writes the window with seconds for durations.
func (w Window) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		StartSeconds    float64 `json:"start_seconds"`
		DurationSeconds float64 `json:"duration_seconds,omitempty"`
		Requests        int     `json:"requests,omitempty"`
		MaxInputTokens  int     `json:"max_input_tokens,omitempty"`
		Shard           *Shard  `json:"shard,omitempty"`
	}{w.Start.Seconds(), w.Duration.Seconds(), w.Requests, w.MaxInputTokens, w.shardOrNil()})
}

// blockKeys appends the keys of req's whole blocks: block i's key chains the ids of blocks
// 0..i, as an engine's block hashes chain. Blocks past the request's hash ids are private:
// their keys chain the request's ordinal instead, so no other request shares them.
func blockKeys(dst []uint64, req *Request, blockTokens int, ordinal uint64) []uint64 {
	const privateTag = 0x70726976617465 // "private"
	whole := req.InputLength / blockTokens
	h := uint64(0x6b7674726163) // "kvtrac"
	for i := 0; i < whole; i++ {
		if i < len(req.HashIDs) {
			h = mix64(h ^ mix64(req.HashIDs[i]))
		} else {
			h = mix64(h ^ mix64(ordinal^privateTag))
		}
		if h == 0 {
			h = 1 // 0 marks an empty slot
		}
		dst = append(dst, h)
	}
	return dst
}

// mix64 is splitmix64's finalizer: a cheap, well-spread 64-bit hash step.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// tierModel is the two-tier model of TierShares, in blocks.
type tierModel struct {
	gpu, host                 *lruSet
	gpuHits, hostHits, stored int64
	toStore                   []uint64
	// scratch numbers the blocks that hold no prompt block (Tiers.PoolHoldsOutput).
	scratch uint64
}

func newTierModel(gpuBlocks, hostBlocks int64) *tierModel {
	return &tierModel{gpu: newLRUSet(int(gpuBlocks)), host: newLRUSet(int(hostBlocks))}
}

// serve runs one request's whole blocks through both tiers (steps 1 to 5 of TierShares);
// hittable caps the hits, and extra blocks that hold no whole prompt block (its partial
// block and output) enter the GPU tier before them, so they are the first of the request's
// blocks evicted.
func (m *tierModel) serve(keys []uint64, hittable, extra int) {
	g := 0
	for g < hittable && m.gpu.contains(keys[g]) {
		g++
	}
	m.touchHost(keys)
	c := 0
	for g+c < hittable && m.host.contains(keys[g+c]) {
		c++
	}
	from := 0
	if c > 0 {
		from = g + c
	}
	m.toStore = m.toStore[:0]
	for _, k := range keys[from:] {
		if !m.host.contains(k) {
			m.toStore = append(m.toStore, k)
		}
	}
	if n := len(m.toStore); n > 0 && n <= m.host.capacity {
		m.host.evict(m.host.len() + n - m.host.capacity)
		for _, k := range m.toStore {
			m.host.add(k)
		}
		m.touchHost(keys)
		m.stored += int64(n)
	}
	for range extra {
		m.scratch++
		m.gpu.add(scratchKey(m.scratch))
	}
	for i := len(keys) - 1; i >= 0; i-- {
		m.gpu.add(keys[i])
	}
	m.gpuHits += int64(g)
	m.hostHits += int64(c)
}

// scratchKey is the key of the nth block that holds no prompt block: unique, and apart from
// every block key (a 64-bit collision aside).
func scratchKey(n uint64) uint64 {
	const scratchTag = 0x73637261746368 // "scratch"
	k := mix64(n ^ mix64(scratchTag))
	if k == 0 {
		k = 1
	}
	return k
}

// touchHost refreshes the request's blocks in the host tier, last first.
func (m *tierModel) touchHost(keys []uint64) {
	for i := len(keys) - 1; i >= 0; i-- {
		m.host.touch(keys[i])
	}
}
