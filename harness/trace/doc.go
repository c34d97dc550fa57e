// Package trace reads, selects, generates and analyses KV-cache traces in the Mooncake
// format: JSONL, one request a line, {"timestamp": ms from the start, "input_length":
// tokens, "output_length": tokens, "hash_ids": [...]}, where each hash id names one block
// of block_tokens prompt tokens (512 in the public traces, the last block of a request
// partial) and identical ids are identical, reusable prefix blocks. It also reads the
// formats the field publishes (NewFormatReader: AIPerf's extensions of Mooncake's, Alibaba's
// Bailian traces, the BurstGPT and Azure CSVs, gzip-compressed or not), each mapped onto the
// same Request; the CSVs name no blocks, so their hit rates are unknown.
//
// The package is pure computation over an io.Reader: it opens no connection. Traces are
// streamed (Reader, Selection and Generator all hand out one Request at a time), so memory
// follows the number of distinct blocks the analysis must remember, not the number of
// requests. Analyze computes the ideal reference a replay's measured cache hits are held
// against: the prefix-cache hit rate of an LRU cache of a given capacity, and the GPU,
// host and recompute shares of a GPU tier plus a write-through host tier.
//
// The format, the validation rules, the ideal's definitions and what a mismatched block
// size breaks are specified in docs/traces.md.
package trace
