package client

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/anvil-serving/kvbench/harness/stats"
)

// streamChunk is the part of a chat.completion.chunk (or a completion's text_completion
// chunk, whose choices carry text instead of a delta) that kvbench reads. go-openai's own
// type drops vLLM's newer delta.reasoning, so chunks are decoded from raw JSON into this.
type streamChunk struct {
	Choices []chunkChoice `json:"choices"`
	Usage   *chunkUsage   `json:"usage"`
	// Model is the model the server says answered.
	Model string `json:"model"`
	// Object and Message catch an error sent in place of a chunk ({"object":"error",...}),
	// the shape older vLLM servers use.
	Object  string `json:"object"`
	Message string `json:"message"`
	// SGLExt is SGLang's extension, with the cached tokens per tier when asked for.
	SGLExt *struct {
		CachedTokensDetails *TierTokens `json:"cached_tokens_details"`
	} `json:"sglext"`
}

type chunkChoice struct {
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
	// Text is a completion chunk's output (text_completion objects have no delta).
	Text string `json:"text"`
	// TokenIDs are the chunk's generated token ids (vLLM with return_token_ids).
	TokenIDs []int `json:"token_ids"`
}

type chunkDelta struct {
	Content          string `json:"content"`
	Reasoning        string `json:"reasoning"`         // vLLM after v0.11
	ReasoningContent string `json:"reasoning_content"` // vLLM up to v0.11, DeepSeek API
}

type chunkUsage struct {
	PromptTokens        *int `json:"prompt_tokens"`
	CompletionTokens    *int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens *int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// checkCounts refuses a chunk whose usage or tier details count a negative number of
// tokens: no server counts that, and a record must not carry it as measured.
func (c *streamChunk) checkCounts() error {
	if c.Usage == nil && c.SGLExt == nil {
		return nil // a token chunk: nothing counted
	}
	type count struct {
		field string
		v     *int
	}
	var counts []count
	if u := c.Usage; u != nil {
		counts = append(counts, count{"usage.prompt_tokens", u.PromptTokens}, count{"usage.completion_tokens", u.CompletionTokens})
		if d := u.PromptTokensDetails; d != nil {
			counts = append(counts, count{"usage.prompt_tokens_details.cached_tokens", d.CachedTokens})
		}
		if d := u.CompletionTokensDetails; d != nil {
			counts = append(counts, count{"usage.completion_tokens_details.reasoning_tokens", d.ReasoningTokens})
		}
	}
	if c.SGLExt != nil && c.SGLExt.CachedTokensDetails != nil {
		d := c.SGLExt.CachedTokensDetails
		counts = append(counts, count{"sglext.cached_tokens_details.device", &d.Device}, count{"sglext.cached_tokens_details.host", &d.Host}, count{"sglext.cached_tokens_details.storage", &d.Storage})
	}
	for _, c := range counts {
		if c.v != nil && *c.v < 0 {
			return fmt.Errorf("%s is %d: a token count cannot be negative", c.field, *c.v)
		}
	}
	return nil
}

// decodeChunk decodes one SSE data payload: token chunks on the fast path, the rest
// (usage, errors, anything unusual) with encoding/json.
func decodeChunk(data []byte) (streamChunk, error) {
	return decodeChunkReusing(data, nil, "", nil)
}

// decodeChunkReusing is decodeChunk with spare's array reused for a fast-path chunk's
// choices, model (the previous chunk's) reused for a model field equal to it, and tpl, when
// not nil, tried first and then kept up to date; the chunk is valid until spare is reused.
func decodeChunkReusing(data []byte, spare []chunkChoice, model string, tpl *chunkTemplate) (streamChunk, error) {
	if tpl != nil {
		if chunk, ok := tpl.decode(data, spare); ok {
			return chunk, nil
		}
	}
	s := chunkScanner{data: data, spare: spare, model: model}
	if chunk, ok := s.decode(); ok {
		if tpl != nil {
			tpl.note(&s, chunk)
		}
		return chunk, nil
	}
	return slowDecodeChunk(data)
}

func slowDecodeChunk(data []byte) (streamChunk, error) {
	var chunk streamChunk
	err := json.Unmarshal(data, &chunk)
	return chunk, err
}

// streamAccumulator folds decoded chunks into a Result as they arrive.
type streamAccumulator struct {
	start    time.Time
	res      *Result
	progress func(Progress)
	interval time.Duration

	chunks        int    // data payloads received, generated or not
	answer        []byte // visible content kept, copied to the Result at the end
	lastGenerated time.Time
	lastRead      int             // the read that brought the last generated chunk
	choices       []chunkChoice   // reused by the next chunk's decoding
	template      chunkTemplate   // the last token chunk, to decode the next from
	gaps          []time.Duration // between generated chunks that arrived in different reads
	lastProgress  time.Time
	serverError   string // set when a chunk turned out to be an error object
	// keepOutput keeps the generated text and token ids (ChatRequest.KeepOutput).
	keepOutput bool
	output     []byte
}

// add decodes and records one chunk that read number read brought at now.
func (a *streamAccumulator) add(data []byte, now time.Time, read int) error {
	a.chunks++
	chunk, err := decodeChunkReusing(data, a.choices, a.res.ServerModel, &a.template)
	if err != nil {
		return err
	}
	if err := chunk.checkCounts(); err != nil {
		return err
	}
	a.observe(chunk, now, read)
	if cap(chunk.Choices) > cap(a.choices) {
		a.choices = chunk.Choices
	}
	return nil
}

// maxGaps bounds the inter-token gaps kept per request (8 MiB).
const maxGaps = 1 << 20

// observe records one decoded chunk that read number read brought at now. Chunks of one
// read share its arrival time: the gap between two of them is not measured but counted
// in BatchedChunks.
func (a *streamAccumulator) observe(chunk streamChunk, now time.Time, read int) {
	res := a.res
	if chunk.Object == "error" {
		a.serverError = oneLine(chunk.Message)
		if a.serverError == "" {
			a.serverError = "error object without a message"
		}
		return
	}
	if chunk.Model != "" && res.ServerModel == "" {
		res.ServerModel = chunk.Model
	}
	generated := false
	for i := range chunk.Choices {
		choice := &chunk.Choices[i]
		reasoning := len(choice.Delta.Reasoning) + len(choice.Delta.ReasoningContent)
		if reasoning > 0 {
			res.ReasoningChunks++
			res.ReasoningBytes += reasoning
			generated = true
			a.keepText(choice.Delta.Reasoning)
			a.keepText(choice.Delta.ReasoningContent)
		}
		a.keepTokenIDs(choice.TokenIDs)
		content := choice.Delta.Content
		if choice.Text != "" {
			content += choice.Text
		}
		if content != "" {
			if !res.VisibleAnswer {
				res.VisibleAnswer = true
				res.TimeToFirstVisibleTokenMS = msSince(a.start, now)
			}
			res.ContentChunks++
			res.ContentBytes += len(content)
			a.keepAnswer(content)
			a.keepText(content)
			generated = true
		}
		if choice.FinishReason != nil && *choice.FinishReason != "" {
			res.FinishReason = *choice.FinishReason
		}
	}
	if chunk.Usage != nil {
		a.observeUsage(chunk.Usage)
	}
	if chunk.SGLExt != nil && chunk.SGLExt.CachedTokensDetails != nil {
		d := *chunk.SGLExt.CachedTokensDetails
		res.CachedTokensDetails = &d
	}
	if !generated {
		return
	}
	if res.GeneratedChunks > 0 {
		if read == a.lastRead {
			res.BatchedChunks++
		} else if len(a.gaps) < maxGaps {
			a.gaps = append(a.gaps, now.Sub(a.lastGenerated))
		}
	}
	res.GeneratedChunks++
	a.lastGenerated, a.lastRead = now, read
	if res.TimeToFirstOutputMS == nil {
		res.TimeToFirstOutputMS = msSince(a.start, now)
		a.report(PhaseDecode, now)
	} else if now.Sub(a.lastProgress) >= a.interval {
		a.report(PhaseDecode, now)
	}
}

func (a *streamAccumulator) observeUsage(u *chunkUsage) {
	res := a.res
	res.UsagePresent = true
	if u.PromptTokens != nil {
		res.PromptTokens = intPtr(*u.PromptTokens)
	}
	if u.CompletionTokens != nil {
		res.OutputTokens = *u.CompletionTokens
		res.OutputTokensSource = OutputTokensFromUsage
	}
	if u.PromptTokensDetails != nil {
		res.PromptTokensDetailsPresent = true
		if u.PromptTokensDetails.CachedTokens != nil {
			res.CachedPromptTokens = intPtr(*u.PromptTokensDetails.CachedTokens)
		}
	}
	if u.CompletionTokensDetails != nil && u.CompletionTokensDetails.ReasoningTokens != nil {
		res.ReasoningTokens = intPtr(*u.CompletionTokensDetails.ReasoningTokens)
	}
}

// keepAnswer appends visible content up to AnswerCapBytes, cut on a rune boundary.
func (a *streamAccumulator) keepAnswer(content string) {
	if a.res.AnswerTruncated {
		return
	}
	room := AnswerCapBytes - len(a.answer)
	if len(content) <= room {
		a.answer = append(a.answer, content...)
		return
	}
	for room > 0 && !utf8.RuneStart(content[room]) {
		room--
	}
	a.answer = append(a.answer, content[:room]...)
	a.res.AnswerTruncated = true
}

// keepText appends generated text to the kept output up to OutputTextCapBytes, cut on a
// rune boundary, when the request asked for it.
func (a *streamAccumulator) keepText(text string) {
	if !a.keepOutput || text == "" || a.res.OutputTextTruncated {
		return
	}
	room := OutputTextCapBytes - len(a.output)
	if len(text) <= room {
		a.output = append(a.output, text...)
		return
	}
	for room > 0 && !utf8.RuneStart(text[room]) {
		room--
	}
	a.output = append(a.output, text[:room]...)
	a.res.OutputTextTruncated = true
}

// keepTokenIDs appends a chunk's generated token ids up to OutputTokenIDsCap, when the
// request asked for them.
func (a *streamAccumulator) keepTokenIDs(ids []int) {
	res := a.res
	if !a.keepOutput || ids == nil || res.OutputTokenIDsTruncated {
		return
	}
	if res.OutputTokenIDs == nil {
		res.OutputTokenIDs = make([]int, 0, len(ids))
	}
	room := OutputTokenIDsCap - len(res.OutputTokenIDs)
	if len(ids) > room {
		ids, res.OutputTokenIDsTruncated = ids[:room], true
	}
	res.OutputTokenIDs = append(res.OutputTokenIDs, ids...)
}

func (a *streamAccumulator) report(phase string, now time.Time) {
	a.lastProgress = now
	a.progress(Progress{Phase: phase, Tokens: a.res.GeneratedChunks, Elapsed: now.Sub(a.start)})
}

// finish fills the fields known only at the end; the caller sends the last progress
// report (doneProgress) once the Result is final.
func (a *streamAccumulator) finish() {
	res := a.res
	end := time.Now()
	res.StreamMS = durationMS(end.Sub(a.start))
	res.Answer = string(a.answer)
	if a.keepOutput {
		res.OutputText = string(a.output)
	}
	if !a.lastGenerated.IsZero() {
		res.EndToEndMS = msSince(a.start, a.lastGenerated)
	}
	if res.OutputTokensSource != OutputTokensFromUsage {
		res.OutputTokens = res.GeneratedChunks
	}
	res.ReasoningOnly = res.GeneratedChunks > 0 && !res.VisibleAnswer
	res.InterTokenMS = gapSpread(a.gaps)
	res.DecodeTokensPerSecond = DecodeTokensPerSecond(res.OutputTokens, res.TimeToFirstOutputMS, res.EndToEndMS)
	res.EffectivePrefillTokensPerSecond = EffectivePrefillTokensPerSecond(res.PromptTokens, res.TimeToFirstOutputMS)
}

// gapSpread summarizes measured gaps by nearest rank; nil when there are none.
func gapSpread(gaps []time.Duration) *Spread {
	if len(gaps) == 0 {
		return nil
	}
	ms := make([]float64, len(gaps))
	for i, g := range gaps {
		ms[i] = durationMS(g)
	}
	slices.Sort(ms)
	at := func(q float64) float64 { return stats.NearestRank(ms, q) }
	return &Spread{N: len(ms), Median: at(0.5), P90: at(0.9), P99: at(0.99), Max: ms[len(ms)-1]}
}

func msSince(start, now time.Time) *float64 {
	ms := durationMS(now.Sub(start))
	return &ms
}

func durationMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func intPtr(v int) *int { return &v }
