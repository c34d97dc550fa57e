// Package sim is kvbench's embedded vLLM-compatible engine: an HTTP server that speaks the
// OpenAI chat and completions APIs, /tokenize and vLLM V1's /metrics, with a KV-cache model
// (GPU prefix cache plus a write-through CPU offload tier) that follows vLLM's counting
// rules closely enough to exercise every kvbench verdict without a GPU. It is not a
// replacement for vLLM. The counters and API shapes it reproduces are described in
// docs/domain.md.
//
// The package imports nothing else from kvbench; the harness meets it only over HTTP.
//
// # Tokenizer
//
// Text is cut into tokens by one deterministic rule, shared by /tokenize and the engine:
//
//   - a run of letters (ASCII letters and any byte >= 0x80) is one token per 7 bytes;
//   - a run of digits is one token per 3 digits;
//   - every other printable character (punctuation, symbols) is one token;
//   - every newline is one token;
//   - a single space before a token is part of that token; any other run of blanks
//     (spaces, tabs, carriage returns) is one token.
//
// English prose comes out at about 1.3 tokens per word. A token's id is a hash of its bytes
// (and of its leading space) modulo VocabSize, so ids, and the block hashes chained over
// them, are stable across runs and machines.
//
// Chat messages are rendered before tokenizing as "<|ROLE|>\n" + content + "\n" per message,
// followed by "<|assistant|>\n" when a generation prompt is added (always, for chat requests).
// A request's output length is drawn from its prompt and cut at max_tokens; ignore_eos = true
// makes it exactly max_tokens, and min_tokens extends a shorter one, as vLLM's sampling
// parameters do.
//
// # Completions
//
// POST /v1/completions takes prompt as a string, tokenized by the rule above with no
// template and no added token, or as a list of token ids in [0, VocabSize), taken as they
// are (a list holding one prompt of either kind is accepted; more than one prompt is a
// 400). Both feed the same KV engine as chat, so a token-id prompt reaches the prefix
// cache exactly as sent. max_tokens defaults to 16 as in vLLM's completions API;
// min_tokens, ignore_eos, stream and stream_options.include_usage work as for chat, and
// usage carries the same prompt_tokens_details. Chunks are vLLM's text_completion objects
// (choices[].text, finish_reason on the last token); the output has no reasoning part.
//
// # KV engine
//
// See Engine: a pool of GPU blocks with chained block hashes and an LRU free queue as in
// vLLM's block pool (a request's partial and decode blocks take the pool's room and are
// freed into the same queue, tail first), and an LRU CPU tier sized from the profile's
// cpu_offload_gib and stored bytes per token, kept as vLLM's offloading connector keeps it:
// at lookup every block of the request the tier holds is touched (GPU hits included); a
// request that loaded nothing offers all its whole blocks for storing, one that loaded some
// the blocks after them; a store larger than the tier stores nothing (an allocation
// failure); after a store the request's blocks are touched, its first the most recent.
// Decode blocks are neither hashed nor offloaded.
//
// # Outputs, salts and what a reload costs
//
// A request's output is drawn from what its prompt's KV holds, not from the request: a
// prompt computed once and reloaded from the CPU tier later produces the same output, at
// any temperature, because its blocks hold the same KV. A request's cache_salt (vLLM's
// field, on chat and completions; TensorRT-LLM's dialect refuses it on completions, as
// trtllm-serve does) enters the first block's hash and through the chain every block's, so
// a salted prompt shares no block with the unsalted one or another salt's, in the GPU pool
// and the CPU tier: a guaranteed miss on the same tokens, stored under its own hashes, with
// the same output. return_token_ids adds each chunk's generated token ids (choices[].token_ids,
// as vLLM streams them); each output word is one token.
//
// A prefill that loads from the CPU tier takes the copy (bytes over
// cpu_to_gpu_bytes_per_second, which the load seconds count) plus reload_latency, the
// fixed cost of a lookup and of the engine step the request waits for its load; a
// recompute takes prefill_tokens_per_second slowed by the context. Short prompts therefore
// recompute faster than they reload and long ones the other way round, so a reload curve
// has a break-even.
//
// # Time
//
// Every duration the engine models (overhead, CPU->GPU load, prefill, decode) is divided by
// the speed factor, and the time-valued metrics (offload seconds, latency histograms) report
// the scaled wall time the simulator actually spent, so bytes/seconds reads as the profile's
// bandwidth times the speed factor.
//
// Requests prefill independently unless the profile sets batch_scheduling: then every
// prefill's computed tokens queue on one compute budget, first come first served, so time
// to first token rises with load while host-tier loads (transfer time only) do not queue
// (see BatchProfile).
//
// # Faults
//
// A profile (or Options.Override, or kvbench sim's flags) can inject the faults a real server
// shows, to rehearse a client's handling of them; all are off by default:
//
//   - fail_every_nth_request = N: generation requests (chat and completions, counted
//     together) N, 2N, ... answer HTTP 500;
//   - cut_stream_after_tokens = K: streams drop the connection after K tokens, no [DONE];
//   - malformed_sse_at_token = K: a broken data: line precedes token K of every stream;
//   - restart_at_request = R: generation request R finds counters and caches reset and the
//     process start time moved, as after a restart (waiting requests fail, running ones
//     finish uncounted);
//   - metrics_delay = "2s": /metrics answers late (wall time, not scaled);
//   - metrics_fault = "error" or "hang", after metrics_fault_after good scrapes: /metrics
//     answers 500 or never answers;
//   - hang_every_nth_request = N: generation requests N, 2N, ... are read and never answered;
//   - allocation_fail_every_nth_store = N: block stores N, 2N, ... find no room in the CPU
//     tier (vllm:kv_offload_allocation_failure_total counts them);
//   - hang_paths = ["/v1/models"]: every request to these routes is read and never answered;
//   - omit_metrics = ["vllm:prefix_cache_hits_total"]: families left out of /metrics, as on
//     a server without them;
//   - metric_values = { "vllm:prompt_tokens_total" = nan }: every sample of a family reads
//     this value (nan, inf, -inf or a number);
//   - corrupt_reload = true: every block loaded from the CPU tier holds other KV than was
//     stored, so a reloaded prompt's output differs from its first computation's (and a
//     later GPU hit on such a block sees the same corruption until it is recomputed).
//
// store_threshold = N (N >= 2) is not a fault but vLLM's reuse filter: a block is stored only
// after N lookups, so a sequence seen once stores nothing (vllm:kv_offload_stores_skipped_total).
// As in vLLM's connector, a lookup counts only the whole blocks after the GPU prefix hits, in
// a table of vLLM's default 64,000 entries (least recent dropped): a block the GPU keeps
// serving is never counted, so never stored.
//
// A hang ends when its client goes away or the server closes; Close waits for it.
//
// # Dialects
//
// dialect = "vllm" (default), "lmcache", "sglang", "kvbm", "trtllm" or "llamacpp" makes the
// same KV model speak another engine's /metrics, usage fields and per-request details (kvbench
// sim --dialect NAME[:VERSION]); dialect_version picks the upstream version whose shape it
// writes (DialectVersions), because names, labels, units and laziness changed between
// releases: vLLM's offload families from none to labelled to flat, eager or bound on first use,
// and the simple offload connector that serves none; LMCache's label sets and vLLM's
// multi-process LMCache connector; SGLang's cached tokens without and with cache_source, its
// pool split with GPU->host backup counters, and its radix families labelled by rank on the
// unified tree (before that, at tensor_parallel_size > 1, the ranks' equal counts summed into
// one series); KVBM v1 and v2; TensorRT-LLM's collector
// with and without per-tier hits; llama-server with and without its cached-token counter, its
// values printed at 6 significant digits. Families SGLang and TensorRT-LLM create on first use
// are not declared before it, as prometheus_client's multiprocess collector does;
// multiprocess_exposition does the same for vLLM. counter_offset starts every counter at a
// value, as on a server that has run a while; kvbm_tier, storage_backend and
// sliding_window_pool make the model's tier pass for KVBM's disk tier or SGLang's storage
// tier, and give SGLang a sliding-window pool.
//
// # Data-parallel engines
//
// With data_parallel_engines = N the simulator runs one engine and splits its totals across
// N engine labels: a count v is reported as floor(v/N) on every engine plus one on the first
// v mod N engines, seconds and byte sums are divided evenly, and fractions such as
// kv_cache_usage_perc repeat on every engine. Sums over the engine label therefore equal the
// one-engine numbers exactly; cache behaviour is that of one shared pool.
//
// With data_parallel = N (kvbench sim --data-parallel N) the simulator instead runs N
// independent engines, each with the profile's GPU pool and CPU tier, behind the one endpoint,
// as vLLM's --data-parallel-size does: /metrics serves each engine's own counters under its
// engine label, and a request is served only by the replica the router picks. router =
// "round-robin" sends requests in turn; "prefix-affinity" sends each to the replica whose GPU
// pool or CPU tier holds the longest prefix of its blocks, ties in turn.
package sim
