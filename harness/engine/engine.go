// Package engine is kvbench's model of each server family, one definition per file: which
// metric names (with their generations) carry each counter, how the engine keeps KV state
// (a shared paged GPU pool, or one live slot per sequence, plus a host tier sized in GiB or
// MiB), where those sizes come from, how its /tokenize counts a prompt, how a request reports
// cached tokens, and which verdicts it can support with which evidence. plan, preflight, run,
// repetitions, the capacity math and the verdicts ask a Definition; nothing else in kvbench
// tests a backend's name. To add an engine, copy vllm.go (a shared pool with tier counters)
// or llamacpp.go (live slots with usage only), rename it, and register it in init.
package engine

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/prompts"
)

// Dialect is how an engine's /tokenize answers.
type Dialect string

const (
	// TokenizeCount is vLLM's POST /tokenize {model, messages} answering {"count": N}.
	TokenizeCount Dialect = "count"
	// TokenizeIDs is llama.cpp's POST /apply-template then POST /tokenize {content}, answering
	// {"tokens": [...]} with no count; the ids also serve slot attribution.
	TokenizeIDs Dialect = "tokens"
)

// Attribution is the evidence a replay's tier is decided on.
type Attribution string

const (
	// ByCounters: prefix-cache hit counters split GPU from external (offload) hits around the
	// isolated replay, and CPU->GPU bytes confirm a reload (verdict.Decide).
	ByCounters Attribution = "counters"
	// BySlot: usage's cached tokens beyond the common token prefix with the prompt the single
	// slot held before came from the host tier (verdict.DecideBySlot).
	BySlot Attribution = "slot"
)

// Support is one verdict an engine can reach and the evidence it rests on there.
type Support struct {
	Verdict  verdict.Verdict
	Evidence string
}

// Definition is one engine family.
type Definition struct {
	// Name is the scenario's target.backend value.
	Name        string
	Description string
	// Topology is how the device cache is shared; HostTier names the flag that sizes the
	// host tier and its unit ("GiB", "MiB").
	Topology     capacity.Topology
	HostTierFlag string
	HostTierUnit string
	// Sizes says where the capacity figures come from, in words (docs/engines.md and plan).
	Sizes string
	// Tokenize is the /tokenize dialect; CachedTokens says how a request reports its cached
	// prompt tokens.
	Tokenize     Dialect
	CachedTokens string
	Attribution  Attribution
	// Verdicts lists what the engine can prove and with what; Proves sums it up (docs/engines.md).
	Verdicts []Support
	Proves   string
	// Diagnoses lists the causes a recompute or partial replay can be traced to (see Diagnose).
	Diagnoses []string
	// OneConnectionPerRequest: the server closes a connection after a streamed response, and
	// Go does not resend a POST on a stale pooled one.
	OneConnectionPerRequest bool
	// ReadsSlots: the server's slot count (/props total_slots) decides attribution.
	ReadsSlots bool
	// Evidence names the counters and fields a verdict reads; Pitfalls the known upstream
	// traps (docs/domain.md).
	Evidence string
	Pitfalls string
	// TierUnknown, when set, says plainly why the engine cannot tell a host hit from a GPU
	// hit: plan prints it and every replay verdict is cache_hit_tier_unknown.
	TierUnknown string
	// RequestTier: a request asks the server to report its cached tokens per tier
	// (SGLang's return_cached_tokens_details), and the verdict rests on that first.
	RequestTier bool
	// Families names the prefix every family of the engine's own counters starts with and
	// what it means when none is served (AbsentFamilies): preflight says exactly that.
	Families string
	// FamiliesHint is what preflight says when no family with the Families prefix is served.
	FamiliesHint string
	// ReloadCounterHint is noted when the reload counter never moved while the engine's
	// matched tokens did (KVBM's known bug); "" for engines without the trap.
	ReloadCounterHint string
	// ConnectorHits names the connector's own hit counter and its traps, said when it
	// disagrees with the external hits (LMCache); LoadBytesCaveat what else moves the
	// load-byte counter (TensorRT-LLM); CountersLag why the counters may not include a
	// request when it ends (TensorRT-LLM). "" where the engine has no such trap.
	ConnectorHits   string
	LoadBytesCaveat string
	CountersLag     string
	// MetricsPath is where the server serves its Prometheus text when target.metrics names
	// no URL ("" means /metrics).
	MetricsPath string
	// Dialects are the upstream shapes of the engine's exposition kvbench recognises: each a
	// version range, a connector or a runtime mode whose names, labels or laziness differ.
	Dialects []MetricsDialect
	// Isolation is the request field that keeps a request's cache entries apart from other
	// requests' (vLLM's cache_salt); nil when the engine has none.
	Isolation *Isolation
	// ColdTwin is how a replay's cold twin is made to miss (twin.go).
	ColdTwin ColdTwin
	// TokenIDsField is the chat request field that makes the server stream its generated
	// token ids (vLLM's return_token_ids: choices[].token_ids); "" where none is known to
	// exist, and outputs are then compared as text.
	TokenIDsField string
	// TextPromptsOnly: the engine's /v1/completions takes no list of token ids, so a trace
	// step sends text blocks there (checked with /tokenize at preflight). Every engine
	// kvbench knows takes token ids (docs/traces.md, "Block-exact prompts on the wire").
	TextPromptsOnly bool
	// NoIgnoreEOS: the engine's completions request has no ignore_eos field, so a trace
	// step's requests may stop before their output_length. Every engine kvbench knows has it.
	NoIgnoreEOS bool
	profile     func() metrics.Profile
}

// MetricsDialect is one upstream shape of an engine's exposition, recognised from a scrape,
// with what preflight says of it.
type MetricsDialect struct {
	Name string
	// Upstream says where and since when the shape exists (repository, commit or PR).
	Upstream string
	Match    func(metrics.Exposition) bool
	// Note is what preflight warns when the dialect is recognised; "" for none.
	Note string
	// HostTierUnreported: in this dialect the server's cache config does not size the host
	// tier (vLLM's LMCache multi-process connector ignores kv_offloading_size).
	HostTierUnreported bool
	// ExplainsAbsentFamilies: the dialect accounts for the engine's own families being
	// absent, so FamiliesHint would mislead.
	ExplainsAbsentFamilies bool
}

// DialectsOf lists the dialects a snapshot was recognised as.
func (d *Definition) DialectsOf(s metrics.Snapshot) []MetricsDialect {
	var out []MetricsDialect
	for _, m := range d.Dialects {
		if slices.Contains(s.Shapes, m.Name) {
			out = append(out, m)
		}
	}
	return out
}

// DefaultMetricsPath is the path of the server's Prometheus text under its root URL.
func (d *Definition) DefaultMetricsPath() string {
	if d.MetricsPath == "" {
		return "/metrics"
	}
	return d.MetricsPath
}

// Isolation is an engine's cache-isolation request field: requests that carry different
// values share no cache entry, though their prompt bytes are the same. It forces a miss on
// a prompt already cached (a cold twin sends a fresh value), and keeps one run's entries
// apart from another's (a salted run sends its salt). Where each engine's field comes from
// upstream, and what it leaves shared, is in docs/domain.md ("Cache isolation").
type Isolation struct {
	// Field is the request body field that carries the value.
	Field string
	// Isolates names the cache tiers the field keeps apart.
	Isolates string
	// Leaks names the tiers it does not keep apart, and why: "" when it isolates every
	// tier kvbench measures on the engine.
	Leaks string
}

// IsolationFields are the request body fields that give a request the isolation value
// (a run's salt, a cold twin's fresh value): nil when value is "", or when the engine has no
// field that keeps every tier apart (a field that leaks a tier would still let the request
// hit the entries it was to be kept from).
func (d *Definition) IsolationFields(value string) map[string]any {
	i := d.Isolation
	if value == "" || i == nil || i.Field == "" || i.Leaks != "" {
		return nil
	}
	return map[string]any{i.Field: value}
}

var registry []*Definition

// register adds d; each definition file calls it from init.
func register(d *Definition) {
	if d.profile == nil || d.Name == "" {
		panic("engine: a definition needs a name and a metrics profile")
	}
	registry = append(registry, d)
}

// Default is the engine a scenario without target.backend runs against.
const Default = "vllm"

// Names lists the engines, the default first.
func Names() []string {
	names := []string{Default}
	for _, d := range registry {
		if d.Name != Default {
			names = append(names, d.Name)
		}
	}
	return names
}

// All returns every definition in Names order.
func All() []*Definition {
	out := make([]*Definition, 0, len(registry))
	for _, n := range Names() {
		out = append(out, lookup(n))
	}
	return out
}

func lookup(name string) *Definition {
	i := slices.IndexFunc(registry, func(d *Definition) bool { return d.Name == name })
	if i < 0 {
		return nil
	}
	return registry[i]
}

// ByName returns the engine called name; "" is the default.
func ByName(name string) (*Definition, error) {
	if name == "" {
		name = Default
	}
	if d := lookup(name); d != nil {
		return d, nil
	}
	return nil, fmt.Errorf("unknown backend %q (known: %v)", name, Names())
}

// Profile returns a fresh copy of the engine's metric names, with its dialects to recognise.
func (d *Definition) Profile() metrics.Profile {
	p := d.profile()
	for _, m := range d.Dialects {
		p.Shapes = append(p.Shapes, metrics.Shape{Name: m.Name, Match: m.Match})
	}
	return p
}

// Resolve is the capacity setup the sources give, in the engine's topology (see
// capacity.Resolve for the precedence).
func (d *Definition) Resolve(sources ...capacity.Figures) capacity.Setup {
	return capacity.Resolve(d.Topology, d.HostTierUnit, sources...)
}

// Traits is what the engine's definition tells a verdict about its evidence.
func (d *Definition) Traits() verdict.Engine {
	return verdict.Engine{BySlot: d.Attribution == BySlot, RequestTier: d.RequestTier, TierUnknown: d.TierUnknown, ReloadCounterHint: d.ReloadCounterHint,
		ConnectorHits: d.ConnectorHits, LoadBytesCaveat: d.LoadBytesCaveat, CountersLag: d.CountersLag}
}

// HTTPClient returns the HTTP client for the engine's chat stream: nil means the client
// package's default.
func (d *Definition) HTTPClient() *http.Client {
	if !d.OneConnectionPerRequest {
		return nil
	}
	return &http.Client{Transport: noKeepAlive()}
}

func noKeepAlive() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	return tr
}

// Needs says whether the engine's evidence uses counter c: a missing one earns a preflight
// warning only then.
func (d *Definition) Needs(c metrics.Counter) bool {
	if d.Attribution != ByCounters || d.TierUnknown != "" || d.RequestTier {
		return false
	}
	return c == metrics.GPUPrefixHits || c == metrics.ExternalPrefixHits
}

// AbsentFamilies says, from a snapshot, whether the engine's own families are all missing:
// then FamiliesHint is the whole diagnosis (LMCache without PROMETHEUS_MULTIPROC_DIR, KVBM
// without its metrics URL), unless a recognised dialect explains their absence.
func (d *Definition) AbsentFamilies(s metrics.Snapshot) bool {
	if d.Families == "" {
		return false
	}
	for _, m := range d.DialectsOf(s) {
		if m.ExplainsAbsentFamilies {
			return false
		}
	}
	for _, r := range s.Counters {
		if strings.HasPrefix(r.Source, d.Families) {
			return false
		}
	}
	for _, r := range s.Gauges {
		if strings.HasPrefix(r.Source, d.Families) {
			return false
		}
	}
	return true
}

// ReloadNeverMoved reports KVBM's known bug from one snapshot: the engine matched tokens in
// its tiers at some point, yet its cumulative reload counters read 0.
func (d *Definition) ReloadNeverMoved(s metrics.Snapshot) bool {
	if d.ReloadCounterHint == "" {
		return false
	}
	m, r, k := s.Counters[metrics.MatchedTokens], s.Counters[metrics.ReloadTokens], s.Counters[metrics.DiskReloadTokens]
	return m.Present && m.Value > 0 && r.Present && r.Value == 0 && (!k.Present || k.Value == 0)
}

// Server is a connected engine: the calls kvbench makes beyond chat and metrics.
type Server struct {
	Def  *Definition
	chat *client.Client
	ids  *LlamaTokenClient // TokenizeIDs engines only
}

// Connect returns the engine's calls on the server behind chat; callTimeout bounds each
// token and slot call like /tokenize.
func (d *Definition) Connect(chat *client.Client, callTimeout time.Duration) *Server {
	s := &Server{Def: d, chat: chat}
	if d.Tokenize == TokenizeIDs {
		hc := &http.Client{Timeout: callTimeout}
		if d.OneConnectionPerRequest {
			hc.Transport = noKeepAlive()
		}
		s.ids = NewLlamaTokenClient(chat.RootURL(), hc)
	}
	return s
}

// TokenCounter counts prompts for model in the engine's /tokenize dialect.
func (s *Server) TokenCounter(model string) prompts.TokenCounter {
	if s.ids != nil {
		return s.ids
	}
	return s.chat.Tokenizer(model)
}

// TextTokenCounter counts plain prompts for model (no chat template), in the engine's
// /tokenize dialect: what a completions endpoint makes of a text prompt.
func (s *Server) TextTokenCounter(model string) prompts.TextTokenCounter {
	if s.ids != nil {
		return s.ids
	}
	return s.chat.Tokenizer(model)
}

// TokenIDs returns the function that reads a prompt's token ids, nil when the engine's
// attribution does not use them.
func (s *Server) TokenIDs() func(ctx context.Context, msgs []prompts.Message) ([]int, error) {
	if s.ids == nil || s.Def.Attribution != BySlot {
		return nil
	}
	return s.ids.TokenIDs
}

// ChatTokenIDs returns the prompt token ids model's tokenizer on the server makes of msgs,
// rendered with its chat template and the generation prompt as its chat endpoint renders
// them, in the engine's /tokenize dialect.
func (s *Server) ChatTokenIDs(ctx context.Context, model string, msgs []prompts.Message) ([]int, error) {
	if s.ids != nil {
		return s.ids.TokenIDs(ctx, msgs)
	}
	tok, err := s.chat.Tokenize(ctx, model, msgs)
	return tokenIDs(tok, err)
}

// TextTokenIDs returns the token ids a plain prompt becomes on the server's completions
// endpoint (no chat template), in the engine's /tokenize dialect.
func (s *Server) TextTokenIDs(ctx context.Context, model, text string) ([]int, error) {
	if s.ids != nil {
		return s.ids.TextTokenIDs(ctx, text)
	}
	tok, err := s.chat.TokenizeText(ctx, model, text)
	return tokenIDs(tok, err)
}

// tokenIDs checks that a count-dialect answer lists its ids: a server that only counts
// cannot say which prompts share a prefix.
func tokenIDs(tok client.Tokenization, err error) ([]int, error) {
	if err != nil {
		return nil, err
	}
	if len(tok.Tokens) != tok.Count {
		return nil, fmt.Errorf("/tokenize answered %d token ids for a count of %d", len(tok.Tokens), tok.Count)
	}
	return tok.Tokens, nil
}

// Sizes is what a slot engine reports of its own capacity.
type Sizes struct {
	Slots       int
	SlotContext int // tokens of one slot's live cache; 0 when not reported
	Source      string
}

// Sizes reads the server's slot count and per-slot context; ok is false when the engine
// has no slots to read.
func (s *Server) Sizes(ctx context.Context) (z Sizes, ok bool, err error) {
	if !s.Def.ReadsSlots || s.ids == nil {
		return Sizes{}, false, nil
	}
	p, err := s.ids.Props(ctx)
	return Sizes{Slots: p.Slots, SlotContext: p.SlotContext, Source: "/props"}, true, err
}
