package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Target is a connected server: its chat client, its metrics and its engine's own calls.
type Target struct {
	Client *client.Client
	// Metrics reports errors with the credentials of its URLs redacted: they land in records.
	Metrics MetricsSource
	// Engine is the server's engine family with its token and slot calls.
	Engine *engine.Server
}

// Connect builds the clients for sc's target (no traffic yet).
func Connect(sc *scenarios.Scenario, apiKey string) (Target, error) {
	def, err := engine.ByName(sc.Target.Backend)
	if err != nil {
		return Target{}, fmt.Errorf("%s: target.backend: %w", sc.Position("target.backend"), err)
	}
	prof := def.Profile()
	if prof.BlockSize == 0 {
		// Block-counted families fall back to the scenario's block size where the server
		// reports none.
		prof.BlockSize = sc.Server.BlockSize.Value
	}
	// A family an older server sums over its tensor-parallel ranks is divided by the size
	// the scenario states (metrics.Parallelism).
	prof.Parallelism.TensorParallel = derive.TensorParallel(sc.Topology)
	if len(sc.Target.MetricNames) > 0 {
		if prof, err = prof.WithOverrides(sc.Target.MetricNames); err != nil {
			return Target{}, fmt.Errorf("%s: target.metric_names: %w", sc.Position("target.metric_names"), err)
		}
	}
	cfg := ClientConfig(sc, apiKey)
	cfg.HTTPClient = def.HTTPClient()
	t := Target{
		Client:  client.New(cfg),
		Metrics: redactedMetrics{metrics.Target{URLs: sc.Target.Metrics, Profile: prof, Client: &http.Client{Timeout: client.DefaultCallTimeout}}},
	}
	// The engine's token and slot calls are short ones, bounded like /tokenize.
	t.Engine = def.Connect(t.Client, sc.Request.Timeout.Duration)
	return t, nil
}

// redactedMetrics hides the credentials of metrics URLs in snapshots, which name the URLs
// they came from, and in scrape errors, which quote them: both land in records.
type redactedMetrics struct{ inner MetricsSource }

func (m redactedMetrics) Snapshot(ctx context.Context) (metrics.Snapshot, error) {
	snap, err := m.inner.Snapshot(ctx)
	for i, s := range snap.Sources {
		snap.Sources[i] = redact.URL(s)
	}
	snap.Cache.Source = redact.Text(snap.Cache.Source)
	for i, r := range snap.Replicas {
		url, engine, labelled := strings.Cut(r.Replica, " engine=")
		if strings.Contains(url, "://") {
			url = redact.URL(url)
		}
		if labelled {
			url = strings.TrimPrefix(url+" engine="+engine, " ")
		}
		snap.Replicas[i].Replica = url
	}
	for i := range snap.Cache.Engines {
		snap.Cache.Engines[i].Source = redact.URL(snap.Cache.Engines[i].Source)
	}
	return snap, redact.Error(err)
}

// ClientConfig is the chat client configuration for sc's target: /tokenize may take as long
// as a request (request.timeout), every other endpoint call and wait has client's default bound.
func ClientConfig(sc *scenarios.Scenario, apiKey string) client.Config {
	return client.Config{BaseURL: sc.Target.Endpoint, APIKey: apiKey, TokenizeTimeout: sc.Request.Timeout.Duration}
}

// PreflightSchema is the schema of the report kvbench preflight --format json prints (in a
// run record the report is the preflight section, without it).
const PreflightSchema = "anvil-serving.kvbench-preflight/v1"

// PreflightReport is what kvbench found out about the server before running anything.
type PreflightReport struct {
	Endpoint             string   `json:"endpoint"`
	Model                string   `json:"model"`
	ModelRoot            string   `json:"model_root,omitempty"` // vLLM's /v1/models root: the repo it loaded
	ModelsListed         []string `json:"models_listed"`
	ServerVersion        string   `json:"server_version,omitempty"`
	MaxModelLen          int      `json:"max_model_len"`
	LargestRequestTokens int      `json:"largest_request_tokens"`
	Tokenize             string   `json:"tokenize"`
	MetricsURLs          []string `json:"metrics_urls"`
	Backend              string   `json:"backend"`
	// Dialects are the upstream shapes of the engine's metrics the scrape was recognised as.
	Dialects             []string            `json:"dialects,omitempty"`
	Counters             map[string]string   `json:"counters"` // counter -> source metric, or "absent"
	Gauges               map[string]string   `json:"gauges"`
	CachedTokensReported string              `json:"cached_tokens_reported"`
	Cache                metrics.CacheConfig `json:"server_cache_config"`
	Setup                capacity.Setup      `json:"capacity_setup"`
	// CapacitySources are what each source said of the capacity, lowest precedence first;
	// Setup is what they resolve to (capacity.Resolve).
	CapacitySources []capacity.Figures `json:"capacity_sources"`
	Slots           int                `json:"slots,omitempty"` // llama.cpp: /props total_slots
	BlockSize       int                `json:"block_size"`
	Capacity        []plan.Replay      `json:"capacity"`
	// TraceTextBlocks is, per trace step sending text blocks, how the server's tokenizer
	// counts a sample of them (prompts.MeasureBlockDeviation).
	TraceTextBlocks map[string]prompts.BlockDeviation `json:"trace_text_blocks,omitempty"`
	// Problems make the scenario unrunnable here; run refuses them unless --force.
	Problems []string `json:"problems"`
	Warnings []string `json:"warnings"`

	// UnreadFamilies are the cache families the server serves that kvbench's model of the
	// engine reads nothing from (metrics.Profile.UnreadFamilies): the verdicts are reached
	// without them.
	UnreadFamilies []string `json:"unread_families"`
}

// Preflight checks sc against the server and plans its requests with what the server says
// of itself and the run's choices (plan.Make); sc is left as it is, the plan holds it as
// planned. It returns an error only when the server cannot be reached or understood at all
// (a usage error for the CLI).
func Preflight(ctx context.Context, sc *scenarios.Scenario, t Target, choices plan.Choices) (*PreflightReport, *plan.Plan, error) {
	endpoint := redact.URL(sc.Target.Endpoint)
	rep := &PreflightReport{Endpoint: endpoint, Backend: sc.Target.Backend,
		Counters: map[string]string{}, Gauges: map[string]string{}, Problems: []string{}, Warnings: []string{}}
	for _, u := range sc.Target.Metrics {
		rep.MetricsURLs = append(rep.MetricsURLs, redact.URL(u))
	}
	models, err := t.Client.Models(ctx)
	if err != nil {
		return rep, nil, err
	}
	for _, m := range models {
		rep.ModelsListed = append(rep.ModelsListed, m.ID)
	}
	if rep.Model, err = servedModel(sc, models); err != nil {
		return rep, nil, err
	}
	i := slices.IndexFunc(models, func(m client.Model) bool { return m.ID == rep.Model })
	if i < 0 {
		return rep, nil, fmt.Errorf("model %q is not served at %s (it lists %v): %w", rep.Model, endpoint, rep.ModelsListed, client.ErrBadResponse)
	}
	rep.MaxModelLen, rep.ModelRoot = models[i].MaxModelLen, models[i].Root
	if v, err := t.Client.Version(ctx); err == nil {
		rep.ServerVersion = v
	}

	snap, err := t.Metrics.Snapshot(ctx)
	if err != nil {
		if p := t.Engine.Def.MetricsPath; p != "" && errors.Is(err, metrics.ErrNotExposition) {
			err = fmt.Errorf("%w (%s serves its Prometheus text at %s)", err, t.Engine.Def.Name, p)
		}
		return rep, nil, err
	}
	for _, c := range metrics.Counters() {
		rep.Counters[string(c)] = sourceOrAbsent(snap.Counters[c])
	}
	for _, g := range metrics.Gauges() {
		rep.Gauges[string(g)] = sourceOrAbsent(snap.Gauges[g])
	}
	rep.Cache = snap.Cache
	rep.UnreadFamilies = snap.UnreadFamilies
	if rep.UnreadFamilies == nil {
		rep.UnreadFamilies = []string{}
	}
	def := t.Engine.Def
	dialects := def.DialectsOf(snap)
	for _, m := range dialects {
		rep.Dialects = append(rep.Dialects, m.Name)
		if m.Note != "" {
			rep.Warnings = append(rep.Warnings, m.Note)
		}
	}
	for _, c := range metrics.Counters() {
		if r := snap.Counters[c]; r.Unreadable != "" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s reads %s (%s): it cannot serve as evidence, and replays that need it are invalid", c, r.Unreadable, r.Source))
		} else if r.Note != "" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s (%s): %s", c, r.Source, r.Note))
		}
	}
	for _, u := range snap.Unattributed {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s{%s=%q} (%s %s so far): a %s kvbench's model of %s does not know; what moves under it is recorded as unattributed and counted in no tier",
			u.Family, u.Label, u.Value, units.Whole(u.Amount), u.Unit, u.Label, u.Model))
	}
	if gpu := snap.Counters[metrics.GPUPrefixHits]; !gpu.Present && gpu.Unreadable == "" && def.Needs(metrics.GPUPrefixHits) {
		rep.Warnings = append(rep.Warnings, "no GPU prefix-cache hit counter: a replay's GPU hits are unknown, so its verdict is invalid or cache_hit_tier_unknown")
	}
	if !snap.Counters[metrics.ExternalPrefixHits].Present && def.Needs(metrics.ExternalPrefixHits) {
		rep.Warnings = append(rep.Warnings, "no external prefix-cache hit counter: a reload from the CPU tier cannot be seen")
	}
	if w := ReplicaWarning(snap); w != "" {
		rep.Warnings = append(rep.Warnings, w)
	}
	if def.AbsentFamilies(snap) {
		rep.Warnings = append(rep.Warnings, def.FamiliesHint)
	}
	if def.ReloadNeverMoved(snap) {
		rep.Warnings = append(rep.Warnings, def.ReloadCounterHint)
	}
	if def.TierUnknown != "" && !snap.Counters[metrics.GPUPrefixHits].Present && !snap.Counters[metrics.ExternalPrefixHits].Present {
		rep.Warnings = append(rep.Warnings, def.TierUnknown)
	}
	if !snap.Gauges[metrics.RequestsRunning].Present {
		rep.Warnings = append(rep.Warnings, "no running-requests gauge: requests cannot be proven isolated")
	}

	var counter prompts.TokenCounter
	rep.Tokenize = "not needed (estimate)"
	if tok := t.TokenCounter(sc, rep.Model); tok != nil {
		if _, err := tok.CountTokens(ctx, []prompts.Message{{Role: "user", Content: "kvbench preflight"}}); err != nil {
			return rep, nil, redact.Error(fmt.Errorf("prompt.token_counting is \"server\" but %w", err))
		}
		rep.Tokenize, counter = "available", tok
	}
	srv := plan.ServerOf(def, snap)
	srv.MaxModelLen = rep.MaxModelLen
	if z, ok, err := t.Engine.Sizes(ctx); ok {
		srv.Sizes, rep.Slots = z, z.Slots
		if err != nil {
			rep.Warnings = append(rep.Warnings, "slot count unknown ("+redact.Text(err.Error())+"): replays get cache_hit_tier_unknown")
		} else if rep.Slots != 1 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("the server has %d slots: run it with -np 1 so cached tokens can be attributed to the live slot or the host-RAM cache", rep.Slots))
		}
	}
	p, err := plan.Make(ctx, sc, plan.Facts{Server: srv, Model: rep.Model, Counter: counter, Choices: choices})
	if err != nil {
		return rep, nil, redact.Error(err)
	}
	sc = p.Scenario // as planned: its curves expanded, its salt drawn
	rep.BlockSize, rep.CapacitySources, rep.Setup = p.Capacity.BlockSize, p.Capacity.Sources, p.Capacity.Setup
	for _, st := range p.Steps {
		maxTokens := sc.MaxTokensFor(st.Step)
		for _, r := range st.Requests {
			rep.LargestRequestTokens = max(rep.LargestRequestTokens, r.Prompt.Tokens+maxTokens)
		}
		if t := st.Trace; t != nil {
			rep.LargestRequestTokens = max(rep.LargestRequestTokens, t.LongestRequestTokens)
		}
	}
	if rep.MaxModelLen > 0 && rep.LargestRequestTokens > rep.MaxModelLen {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the largest request needs %d tokens (prompt + max_tokens) but max_model_len is %d: the server will reject it", rep.LargestRequestTokens, rep.MaxModelLen))
	}

	rep.CachedTokensReported = cachedTokensReported(ctx, t.Client, sc.Target.Model)

	preflightTraces(ctx, sc, t, p, rep)
	if rep.Setup.GPUKVTokens == 0 {
		msg := "the GPU KV pool size is unknown (the server reports none and [server] states none)"
		if sc.Server.GPUKVTokens.FromServer {
			rep.Problems = append(rep.Problems, msg+": server.gpu_kv_tokens = \"server\" cannot be met")
		} else {
			rep.Warnings = append(rep.Warnings, msg)
		}
	}
	rep.Capacity = p.Replays
	return rep, p, nil
}

// preflightTraces checks the trace steps against the server: a text prompt form is measured
// on a sample of its blocks with the server's /tokenize (the deviation is recorded), and a
// server block size that does not line up with block_tokens is said.
func preflightTraces(ctx context.Context, sc *scenarios.Scenario, t Target, p *plan.Plan, rep *PreflightReport) {
	for _, st := range p.Steps {
		tp := st.Trace
		if tp == nil {
			continue
		}
		// A trace without prefix information has no blocks for the server's to line up with.
		if note := blockSizeNote(rep.BlockSize, st.Step.BlockTokens); note != "" && (tp.Format == nil || tp.Format.PrefixInformation) {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("trace step %s: %s", st.ID, note))
		}
		if t.Engine.Def.NoIgnoreEOS {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("trace step %s: the engine takes no ignore_eos, so a request may stop before its output_length", st.ID))
		}
		if tp.PromptForm != scenarios.PromptFormText || len(tp.SampleIDs) == 0 {
			continue
		}
		b, err := prompts.NewBlockBuilder(prompts.BlockConfig{Seed: prompts.SaltedSeed(uint64(sc.RepetitionSeed(0)), sc.Prompt.Salt), BlockTokens: st.Step.BlockTokens})
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("trace step %s: %v", st.ID, err))
			continue
		}
		d, err := prompts.MeasureBlockDeviation(ctx, t.Engine.TextTokenCounter(sc.Target.Model), b, tp.SampleIDs)
		if err != nil {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("trace step %s: text blocks could not be measured with /tokenize (%s): their deviation from %d tokens is unknown", st.ID, redact.Text(err.Error()), st.Step.BlockTokens))
			continue
		}
		if rep.TraceTextBlocks == nil {
			rep.TraceTextBlocks = map[string]prompts.BlockDeviation{}
		}
		rep.TraceTextBlocks[st.ID] = d
		if !d.Exact() {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("trace step %s: text blocks are not exact under the server's tokenizer: %d of %d blocks are %d tokens (mean deviation %s, largest %d, %d across boundaries, %d added to a prompt); shared prefixes stay shared, block alignment does not (prompt_form = \"token_ids\" is exact)",
				st.ID, d.ExactBlocks, d.Blocks, d.BlockTokens, units.Number(d.MeanAbsDeviation), d.MaxAbsDeviation, d.JoinDeviation, d.AddedTokens))
		}
	}
}

// ReplicaWarning warns, when the counters show several replicas (data-parallel engines or
// one metrics URL per replica), that their caches are separate; "" for one replica.
func ReplicaWarning(snap metrics.Snapshot) string {
	n := len(snap.Replicas)
	if n < 2 {
		return ""
	}
	names := make([]string, n)
	for i, r := range snap.Replicas {
		names[i] = r.Replica
	}
	return fmt.Sprintf("%d replicas serve this endpoint (%s): each has its own prefix cache and CPU tier, so a replay the router sends to another replica than its original recomputes (diagnosis %s), and the capacity math sums their pools; pin the routing or measure one replica",
		n, strings.Join(names, ", "), verdict.DiagRoutedElsewhere)
}

// cachedTokensReported sends one short prompt twice: with prefix caching and
// --enable-prompt-tokens-details the second reports cached tokens (vLLM omits them when 0).
func cachedTokensReported(ctx context.Context, c *client.Client, model string) string {
	text := "kvbench preflight: checking whether usage reports cached prompt tokens. "
	for len(text) < 600 {
		text += "The quick brown fox jumps over the lazy dog near the quiet river bank. "
	}
	req := client.ChatRequest{Model: model, Messages: []prompts.Message{{Role: "user", Content: text}}, MaxTokens: 1, Timeout: time.Minute}
	var res client.Result
	for range 2 {
		if res = c.StreamChat(ctx, req, nil); res.Failed() {
			return "unknown: the check request failed: " + res.Error
		}
	}
	switch {
	case res.CachedPromptTokens != nil && *res.CachedPromptTokens > 0:
		return "yes"
	case !res.PromptTokensDetailsPresent:
		return "no: usage has no prompt_tokens_details (vLLM needs --enable-prompt-tokens-details); cached_fraction will be absent"
	default:
		return "unknown: prompt_tokens_details present but no cached tokens on a repeated prompt"
	}
}

// RecordCache is the record's cache section for a resolved setup.
func RecordCache(sc *scenarios.Scenario, rep *PreflightReport) record.Cache {
	c := record.Cache{
		MaxModelLen:            rep.MaxModelLen,
		GPUKVCacheTokens:       rep.Setup.GPUKVTokens,
		GPUKVCacheTokensSource: rep.Setup.GPUKVTokensSource,
		BlockSize:              rep.BlockSize,
		CPUOffloadGiB:          rep.Setup.CPUOffloadGiB,
		CPUOffloadGiBSource:    rep.Setup.CPUOffloadGiBSource,
	}
	if c.CPUOffloadGiBSource == "" {
		c.CPUOffloadGiBSource = "scenario"
	}
	_, c.BlockSizeSource = plan.BlockSizeOf(sc, rep.Cache)
	if len(rep.Cache.Engines) > 0 {
		if dt := rep.Cache.Engines[0].CacheDtype; dt != "" {
			c.KVDtype = &dt
		}
		c.PrefixCaching = rep.Cache.Engines[0].PrefixCaching
	}
	return c
}

func sourceOrAbsent(r metrics.Reading) string {
	if r.Unreadable != "" {
		return "unreadable: " + r.Unreadable + " (" + r.Source + ")"
	}
	if !r.Present {
		return "absent"
	}
	return r.Source
}
