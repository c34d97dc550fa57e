package record

import (
	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// The producers' own types become record fields here, and only here.

// ResultOf is a streamed request's measurements as the record keeps them.
func ResultOf(r client.Result) Result {
	out := Result{
		StartedAt: r.StartedAt, Model: r.Model, ServerModel: r.ServerModel,
		TimeToFirstOutputMS: r.TimeToFirstOutputMS, TimeToFirstVisibleTokenMS: r.TimeToFirstVisibleTokenMS,
		EndToEndMS: r.EndToEndMS, StreamMS: r.StreamMS,
		OutputTokens: r.OutputTokens, OutputTokensSource: r.OutputTokensSource, PromptTokens: r.PromptTokens,
		CachedPromptTokens: r.CachedPromptTokens, PromptTokensDetailsPresent: r.PromptTokensDetailsPresent,
		ReasoningTokens: r.ReasoningTokens, UsagePresent: r.UsagePresent,
		GeneratedChunks: r.GeneratedChunks, BatchedChunks: r.BatchedChunks,
		ReasoningChunks: r.ReasoningChunks, ReasoningBytes: r.ReasoningBytes, ContentChunks: r.ContentChunks, ContentBytes: r.ContentBytes,
		VisibleAnswer: r.VisibleAnswer, ReasoningOnly: r.ReasoningOnly, FinishReason: r.FinishReason,
		DecodeTokensPerSecond: r.DecodeTokensPerSecond, EffectivePrefillTokensPerSecond: r.EffectivePrefillTokensPerSecond,
		HTTPStatus: r.HTTPStatus, Error: r.Error, ErrorKind: r.ErrorKind, Answer: r.Answer, AnswerTruncated: r.AnswerTruncated,
		OutputText: r.OutputText, OutputTextTruncated: r.OutputTextTruncated,
		OutputTokenIDs: r.OutputTokenIDs, OutputTokenIDsTruncated: r.OutputTokenIDsTruncated,
	}
	if t := r.CachedTokensDetails; t != nil {
		out.CachedTokensDetails = &TierTokens{Device: t.Device, Host: t.Host, Storage: t.Storage, StorageBackend: t.StorageBackend}
	}
	if s := r.InterTokenMS; s != nil {
		out.InterTokenMS = &Spread{N: s.N, Median: s.Median, P90: s.P90, P99: s.P99, Max: s.Max}
	}
	return out
}

// PromptOf is a built prompt's identity as the record keeps it (not its text).
func PromptOf(p prompts.Prompt) Prompt {
	return Prompt{Tokens: p.Tokens, TokenCounting: p.TokenCounting, CountCalls: p.CountCalls, WithinTolerance: p.WithinTolerance,
		ToleranceTokens: p.ToleranceTokens, SharedPrefixTokens: p.SharedPrefixTokens, SharedPrefixSHA256: p.SharedPrefixSHA256,
		Identity: p.Identity, ExpectedAnswer: p.ExpectedAnswer, Shape: p.Shape}
}

// BlockDeviationOf is a text-form block measurement as the record keeps it.
func BlockDeviationOf(d prompts.BlockDeviation) *BlockDeviation {
	return &BlockDeviation{Blocks: d.Blocks, BlockTokens: d.BlockTokens, AddedTokens: d.AddedTokens, ExactBlocks: d.ExactBlocks,
		MeanAbsDeviation: d.MeanAbsDeviation, MaxAbsDeviation: d.MaxAbsDeviation, JoinDeviation: d.JoinDeviation}
}

// ReplayRefOf is a scenario's replay reference as the record keeps it.
func ReplayRefOf(r *scenarios.ReplayRef) *ReplayRef {
	if r == nil {
		return nil
	}
	return &ReplayRef{Step: r.Step, Request: r.Request}
}

// ReplicaOf is a replica attribution as the record keeps it; nil for nil.
func ReplicaOf(a *metrics.Attribution) *Replica {
	if a == nil {
		return nil
	}
	return &Replica{Replica: a.Replica, By: a.By}
}

// VerdictOf is a replay's decision, with the capacity math it weighed, as the record keeps it.
func VerdictOf(d verdict.Decision, a *capacity.Assessment) *Verdict {
	v := &Verdict{
		Verdict: d.Verdict, Reason: d.Reason, DecidedBy: d.DecidedBy, Notes: d.Notes,
		HitCoverage: d.HitCoverage, UsageAgrees: d.UsageAgrees,
		ExpectedLoadBytes: d.ExpectedLoadBytes, MeasuredLoadBytesPerToken: d.MeasuredLoadBytesPerToken,
		SetupValid: d.SetupValid, SetupReason: d.SetupReason, Interpretation: d.Interpretation,
		Capacity: CapacityOf(a),
	}
	if s := d.Slot; s != nil {
		v.Slot = &SlotAttribution{LiveTokens: s.LiveTokens, HostTokens: s.HostTokens, CommonPrefix: s.CommonPrefix, Slots: s.Slots, Tolerance: s.Tolerance}
	}
	for _, c := range d.CrossChecks {
		v.CrossChecks = append(v.CrossChecks, CrossCheck{Name: c.Name, Sources: c.Sources, Agrees: c.Agrees, Tolerance: c.Tolerance, Used: c.Used})
	}
	for _, g := range d.Diagnosis {
		v.Diagnosis = append(v.Diagnosis, Diagnosis{Cause: g.Cause, Detail: g.Detail})
	}
	if o := d.Offload; o != nil {
		v.Offload = &OffloadEvidence{StoreBytes: o.StoreBytes, StoreTokens: o.StoreTokens, StoresSkipped: o.StoresSkipped, AllocationFailures: o.AllocationFailures,
			TierHoldsSequence: o.TierHoldsSequence, TierTokens: o.TierTokens, UniqueTokens: o.UniqueTokens,
			RoutedElsewhere: o.RoutedElsewhere, OriginalReplica: o.OriginalReplica, ReplayReplica: o.ReplayReplica}
	}
	return v
}

// CapacityOf is a capacity assessment as the record keeps it; nil for nil.
func CapacityOf(a *capacity.Assessment) *Capacity {
	if a == nil {
		return nil
	}
	s := a.Setup
	return &Capacity{
		Setup: Setup{Topology: s.Topology, Slots: s.Slots, GPUKVTokens: s.GPUKVTokens, GPUKVTokensSource: s.GPUKVTokensSource,
			CPUOffloadGiB: s.CPUOffloadGiB, CPUOffloadGiBSource: s.CPUOffloadGiBSource, HostTierUnit: s.HostTierUnit, StoreBytesPerToken: s.StoreBytesPerToken, StoreBytesSource: s.StoreBytesSource,
			HostTierTokens: s.HostTierTokens, HostTierTokensSource: s.HostTierTokensSource},
		UniqueTokens: a.UniqueTokens, HostTokensNeeded: a.HostTokensNeeded, TokenCounting: a.TokenCounting,
		GPUPoolBytes: a.GPUPoolBytes, CPUTierBytes: a.CPUTierBytes, CPUTierTokens: a.CPUTierTokens,
		EvictionPressure: a.EvictionPressure, TierLargerThanGPU: a.TierLargerThanGPU, TierHoldsSequence: a.TierHoldsSequence,
		CanProveReload: a.CanProveReload, Findings: a.Findings,
	}
}

// Undecided is the verdict of a replay that was never measured, or whose verdict was never
// decided, with why: verdict's own words for it.
func Undecided(why string) *Verdict {
	return VerdictOf(verdict.Decide(verdict.Evidence{NotSent: why}), nil)
}
