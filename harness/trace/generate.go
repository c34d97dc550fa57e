package trace

import (
	"bufio"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"
)

// Length is a token-length distribution: lognormal with the given mean and shape Sigma (the
// standard deviation of the length's logarithm; 0 makes every length the mean).
type Length struct {
	Mean  float64
	Sigma float64
}

// GeneratorConfig shapes a generated trace. Conversations start as a Poisson process at
// Rate/Turns per second; each has 1 + Geometric turns (mean Turns), the next turn coming an
// exponential think time (mean ThinkTime) after the previous one, so the trace carries Rate
// requests per second once conversations are under way. A conversation opens with one of
// SystemPrompts shared system prompts (Zipf popularity, the first the most used) and a first
// user message; each later turn's prompt is the previous prompt, the previous output and a
// new user message, so turn k+1 repeats turn k's whole blocks and adds new ones. Hash ids
// are numbered in order of first appearance, as in the public traces. Scale multiplies
// every token length (not the block size), so a small-scale trace keeps its shape in blocks
// when BlockTokens is scaled alike.
type GeneratorConfig struct {
	Seed        uint64
	Requests    int
	Rate        float64 // requests per second
	BlockTokens int
	Scale       float64

	SystemPrompts      int // 0: conversations open with their first message alone
	SystemPromptTokens int // per system prompt; its whole blocks are what conversations share
	FirstTurn          Length
	FollowUp           Length // tokens a later turn's new user message adds
	Output             Length
	Turns              float64 // mean turns per conversation, at least 1
	ThinkTime          time.Duration
	// MaxInputTokens caps a prompt: a first turn is cut to it, and a conversation ends before
	// a turn that would exceed it.
	MaxInputTokens int
}

// DefaultGeneratorConfig resembles the public Mooncake conversation trace: 12,031 requests
// in an hour, about 12k input and 350 output tokens per request on average.
func DefaultGeneratorConfig() GeneratorConfig {
	return GeneratorConfig{
		Seed:               1,
		Requests:           12031,
		Rate:               12031.0 / 3600,
		BlockTokens:        DefaultBlockTokens,
		Scale:              1,
		SystemPrompts:      16,
		SystemPromptTokens: 1536,
		FirstTurn:          Length{Mean: 8000, Sigma: 1},
		FollowUp:           Length{Mean: 2500, Sigma: 1},
		Output:             Length{Mean: 350, Sigma: 0.8},
		Turns:              2,
		ThinkTime:          90 * time.Second,
		MaxInputTokens:     131072,
	}
}

// MaxGeneratedInputTokens bounds a generated prompt, --scale included: the largest prompt a
// scenario may send. Beyond it a conversation's block ids would not fit in memory.
const MaxGeneratedInputTokens = 10_000_000

// Validate checks the configuration.
func (c GeneratorConfig) Validate() error {
	check := func(ok bool, format string, args ...any) error {
		if ok {
			return nil
		}
		return fmt.Errorf(format, args...)
	}
	lengthOK := func(l Length) bool { return l.Mean >= 0 && l.Sigma >= 0 && l.Sigma <= 4 }
	// scaled bounds a length once scaled; a bad scale or a NaN is refused on its own.
	scaled := func(tokens float64, what string) error {
		if !(c.Scale > 0) || math.IsInf(c.Scale, 0) || math.IsNaN(tokens) || tokens*c.Scale <= MaxGeneratedInputTokens {
			return nil
		}
		return fmt.Errorf("%s %g times scale %g is %g tokens, above the largest prompt of %d", what, tokens, c.Scale, tokens*c.Scale, MaxGeneratedInputTokens)
	}
	return errors.Join(
		check(c.Requests >= 1, "requests %d must be at least 1", c.Requests),
		check(c.Rate > 0 && !math.IsInf(c.Rate, 0), "rate %g must be > 0 requests/s", c.Rate),
		check(c.BlockTokens >= 1, "block tokens %d must be at least 1", c.BlockTokens),
		check(c.Scale > 0 && !math.IsInf(c.Scale, 0), "scale %g must be > 0", c.Scale),
		check(c.SystemPrompts >= 0, "system prompts %d must not be negative", c.SystemPrompts),
		check(c.SystemPromptTokens >= 0, "system prompt tokens %d must not be negative", c.SystemPromptTokens),
		check(lengthOK(c.FirstTurn), "first turn length: mean %g must be >= 0 and sigma %g in [0, 4]", c.FirstTurn.Mean, c.FirstTurn.Sigma),
		check(lengthOK(c.FollowUp), "follow-up length: mean %g must be >= 0 and sigma %g in [0, 4]", c.FollowUp.Mean, c.FollowUp.Sigma),
		check(lengthOK(c.Output), "output length: mean %g must be >= 0 and sigma %g in [0, 4]", c.Output.Mean, c.Output.Sigma),
		check(c.Turns >= 1, "turns %g must be at least 1", c.Turns),
		check(c.ThinkTime >= 0, "think time %s must not be negative", c.ThinkTime),
		check(c.MaxInputTokens >= 1, "max input tokens %d must be at least 1", c.MaxInputTokens),
		scaled(float64(c.MaxInputTokens), "max input tokens"),
		scaled(float64(c.SystemPromptTokens), "system prompt tokens"),
		scaled(c.FirstTurn.Mean, "first turn length mean"),
		scaled(c.FollowUp.Mean, "follow-up length mean"),
		scaled(c.Output.Mean, "output length mean"),
	)
}

// Generator produces a trace from a GeneratorConfig: the same configuration gives the same
// trace, request for request. It holds only the conversations under way.
type Generator struct {
	cfg        GeneratorConfig
	rng        *rand.Rand
	zipf       *rand.Zipf
	systems    [][]uint64 // each system prompt's block ids, numbered on first use
	systemLen  int        // scaled system prompt tokens
	maxInput   int
	nextID     uint64
	nextStart  float64 // seconds: the next conversation's start
	startRate  float64 // conversations per second
	open       conversationHeap
	emitted    int
	nextSerial uint64
}

var _ Source = (*Generator)(nil)

// conversation is one conversation under way.
type conversation struct {
	serial    uint64
	due       float64 // seconds: its next turn's arrival
	turnsLeft int
	input     int // the last turn's prompt tokens
	output    int // the last turn's output tokens
	ids       []uint64
}

// NewGenerator returns a generator for cfg.
func NewGenerator(cfg GeneratorConfig) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Generator{
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(cfg.Seed, 0x7472616365)), // "trace"
		systemLen: int(math.Round(float64(cfg.SystemPromptTokens) * cfg.Scale)),
		maxInput:  max(1, int(math.Round(float64(cfg.MaxInputTokens)*cfg.Scale))),
		startRate: cfg.Rate / cfg.Turns,
	}
	if cfg.SystemPrompts == 0 {
		g.systemLen = 0 // no system prompt to open a conversation with
	}
	if cfg.SystemPrompts > 1 {
		g.zipf = rand.NewZipf(g.rng, 1.2, 1, uint64(cfg.SystemPrompts-1))
	}
	g.systems = make([][]uint64, cfg.SystemPrompts)
	return g, nil // the first conversation starts at 0, the trace's start
}

// Next fills req with the next request in arrival order; io.EOF after cfg.Requests.
func (g *Generator) Next(req *Request) error {
	for g.emitted < g.cfg.Requests {
		var c *conversation
		if len(g.open) > 0 && g.open[0].due <= g.nextStart {
			c = heap.Pop(&g.open).(*conversation)
		} else {
			c = g.startConversation()
		}
		if !g.nextTurn(c) {
			continue // the turn would exceed the prompt cap: the conversation ends
		}
		g.emitted++
		req.Line = g.emitted
		req.Timestamp = time.Duration(math.Floor(c.due*1000)) * time.Millisecond
		req.InputLength = c.input
		req.OutputLength = c.output
		req.HashIDs = append(req.HashIDs[:0], c.ids...)
		c.turnsLeft--
		if c.turnsLeft > 0 {
			c.due += g.rng.ExpFloat64() * g.cfg.ThinkTime.Seconds()
			heap.Push(&g.open, c)
		}
		return nil
	}
	return io.EOF
}

// startConversation opens the conversation starting at nextStart and draws the next start.
func (g *Generator) startConversation() *conversation {
	c := &conversation{serial: g.nextSerial, due: g.nextStart, turnsLeft: g.drawTurns()}
	g.nextSerial++
	g.nextStart += g.rng.ExpFloat64() / g.startRate
	return c
}

// drawTurns draws 1 + Geometric turns with mean cfg.Turns.
func (g *Generator) drawTurns() int {
	if g.cfg.Turns <= 1 {
		return 1
	}
	p := 1 / g.cfg.Turns
	u := 1 - g.rng.Float64() // (0, 1]
	return 1 + int(math.Floor(math.Log(u)/math.Log(1-p)))
}

// nextTurn sets c's next prompt (length, output and ids). It returns false, ending c, when a
// later turn would exceed the prompt cap.
func (g *Generator) nextTurn(c *conversation) bool {
	bt := g.cfg.BlockTokens
	output := g.draw(g.cfg.Output, 0)
	if c.ids == nil { // the first turn: a system prompt and a first message
		input := g.systemLen + g.draw(g.cfg.FirstTurn, 1)
		input = min(input, g.maxInput)
		c.ids = make([]uint64, 0, (input+bt-1)/bt)
		if len(g.systems) > 0 {
			c.ids = append(c.ids, g.systemIDs(min(g.systemLen, input)/bt)...)
		}
		c.input, c.output = input, output
		g.fillIDs(c)
		return true
	}
	input := c.input + c.output + g.draw(g.cfg.FollowUp, 1)
	if input > g.maxInput {
		return false
	}
	c.ids = c.ids[:c.input/bt] // the previous turn's whole blocks; its partial block grows
	c.input, c.output = input, output
	g.fillIDs(c)
	return true
}

// fillIDs numbers c's blocks past those it already has.
func (g *Generator) fillIDs(c *conversation) {
	for blocks := (c.input + g.cfg.BlockTokens - 1) / g.cfg.BlockTokens; len(c.ids) < blocks; {
		c.ids = append(c.ids, g.newID())
	}
}

// systemIDs returns the first n block ids of a system prompt drawn by popularity.
func (g *Generator) systemIDs(n int) []uint64 {
	i := 0
	if g.zipf != nil {
		i = int(g.zipf.Uint64())
	}
	for len(g.systems[i]) < n {
		g.systems[i] = append(g.systems[i], g.newID())
	}
	return g.systems[i][:n]
}

func (g *Generator) newID() uint64 {
	id := g.nextID
	g.nextID++
	return id
}

// draw draws a scaled length from l, at least least.
func (g *Generator) draw(l Length, least int) int {
	mean := l.Mean * g.cfg.Scale
	if mean <= 0 {
		return least
	}
	x := mean
	if l.Sigma > 0 {
		mu := math.Log(mean) - l.Sigma*l.Sigma/2
		x = math.Exp(mu + l.Sigma*g.rng.NormFloat64())
	}
	// A lognormal's tail is cut at the largest prompt, so the conversion to int holds.
	return max(least, int(math.Round(min(x, MaxGeneratedInputTokens))))
}

// conversationHeap orders conversations by their next turn, then by serial.
type conversationHeap []*conversation

func (h conversationHeap) Len() int { return len(h) }
func (h conversationHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].serial < h[j].serial
}
func (h conversationHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *conversationHeap) Push(x any)   { *h = append(*h, x.(*conversation)) }
func (h *conversationHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}

// WriteJSONL writes every request of src to w as Mooncake-format lines and returns how many.
// It buffers, so w sees large writes rather than one a line.
func WriteJSONL(w io.Writer, src Source) (int, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	var req Request
	var line []byte
	n := 0
	for {
		err := src.Next(&req)
		if errors.Is(err, io.EOF) {
			return n, bw.Flush()
		}
		if err != nil {
			return n, err
		}
		line = append(req.AppendJSON(line[:0]), '\n')
		if _, err := bw.Write(line); err != nil {
			return n, err
		}
		n++
	}
}
