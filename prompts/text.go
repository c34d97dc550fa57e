package prompts

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// words is the vocabulary of the generated documents: common English of mixed lengths, so
// real tokenizers split it as they split ordinary prose.
var words = [...]string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
	"on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
	"had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
	"been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its",
	"may", "these", "than", "some", "time", "only", "them", "two", "first", "new", "could",
	"should", "each", "between", "through", "during", "before", "after", "around", "within",
	"system", "process", "record", "survey", "harbor", "council", "engine", "river", "market",
	"village", "garden", "station", "library", "archive", "ledger", "bridge", "valley",
	"measure", "journey", "lantern", "weather", "crystal", "history", "pattern", "memory",
	"question", "evidence", "schedule", "document", "material", "account", "function",
	"structure", "argument", "agreement", "committee", "direction", "following", "important",
	"different", "including", "available", "particular", "production", "government",
	"development", "information", "understanding", "considerable", "approximately",
	"carefully", "slowly", "quietly", "recently", "usually", "northern", "southern", "ancient",
	"modern", "careful", "simple", "narrow", "broad", "steady", "bright", "heavy", "light",
	"small", "large", "early", "late", "public", "private", "local", "general", "common",
	"built", "moved", "opened", "closed", "noted", "found", "kept", "shown", "placed",
	"described", "recorded", "measured", "repaired", "arranged", "delivered", "considered",
	"compared", "explained", "observed", "reported", "returned", "prepared", "collected",
}

// wordsSpaced holds each word followed by a space, the common case of the generator.
var wordsSpaced = func() (out [len(words)]string) {
	for i, w := range words {
		out[i] = w + " "
	}
	return out
}()

var sectionTitles = [...]string{
	"Background", "Observations", "Methods", "Inventory", "Correspondence", "Travel",
	"Accounts", "Maintenance", "Weather", "Planning", "Findings", "Appendix",
}

// textStream produces an endless deterministic document in small units (a word with its
// punctuation, or a heading). Its output is prefix-stable: a longer document is always a
// shorter one plus more text, so the builder can search for a token count by cutting it.
type textStream struct {
	rng  *rand.PCG // used directly: the rand.Rand wrapper's interface call dominated generation
	tag  string    // names the stream in its facts, so facts of different streams differ
	buf  []byte
	ends []int32 // buf offset just after each unit (int32 halves the index of a 1 MB prompt)

	section, paragraph, sentence, word int // position in the document's structure
	sentenceLen                        int
	sectionOpen                        bool
	queued                             []string // units of a heading and its fact still to emit
	facts                              []fact
}

// fact is a planted statement that the closing question asks about.
type fact struct {
	label string
	code  string
	end   int // buf offset just after the fact's sentence
}

func newTextStream(seed, stream uint64, tag string) *textStream {
	return &textStream{rng: rand.NewPCG(seed, stream), tag: tag}
}

// ensure extends the document until it holds at least n units.
func (s *textStream) ensure(n int) {
	for len(s.ends) < n {
		s.next()
	}
}

// ensureBytes extends the document until it holds at least n bytes.
func (s *textStream) ensureBytes(n int) {
	if cap(s.buf) < n {
		// Grow once: appending a megabyte word by word would copy it many times.
		s.buf = append(make([]byte, 0, n+n/8+64), s.buf...)
		s.ends = append(make([]int32, 0, (n+n/8)/5+16), s.ends...)
	}
	for len(s.buf) < n {
		s.next()
	}
}

func (s *textStream) next() {
	if !s.sectionOpen {
		s.startSection()
	}
	if len(s.queued) > 0 {
		s.buf = append(s.buf, s.queued[0]...)
		s.queued = s.queued[1:]
		if len(s.queued) == 0 {
			s.facts[len(s.facts)-1].end = len(s.buf)
			s.buf = append(s.buf, ' ')
		}
		s.ends = append(s.ends, int32(len(s.buf)))
		return
	}
	if s.sentenceLen == 0 {
		s.sentenceLen = 8 + s.intn(13)
	}
	// One draw per word: the word from the low bits, a comma from the high ones.
	r := s.rng.Uint64()
	i := (r & 0xffffffff) * uint64(len(words)) >> 32
	s.word++
	comma := (r>>32)%12 == 0
	if s.word > 1 && s.word < s.sentenceLen && !comma {
		// The common case: a mid-sentence word and its space in one append.
		s.buf = append(s.buf, wordsSpaced[i]...)
		s.ends = append(s.ends, int32(len(s.buf)))
		return
	}
	w := words[i]
	if s.word == 1 {
		s.buf = append(s.buf, w[0]-'a'+'A')
		s.buf = append(s.buf, w[1:]...)
	} else {
		s.buf = append(s.buf, w...)
	}
	if s.word < s.sentenceLen {
		if comma {
			s.buf = append(s.buf, ',')
		}
		s.buf = append(s.buf, ' ')
		s.ends = append(s.ends, int32(len(s.buf)))
		return
	}
	s.buf = append(s.buf, '.')
	s.word, s.sentenceLen = 0, 0
	s.sentence++
	switch {
	case s.sentence < 4+s.paragraph%3:
		s.buf = append(s.buf, ' ')
	case s.paragraph < 2:
		s.sentence = 0
		s.paragraph++
		s.buf = append(s.buf, "\n\n"...)
	default:
		s.sentence, s.paragraph = 0, 0
		s.sectionOpen = false // the next unit starts a section
		s.buf = append(s.buf, "\n\n"...)
	}
	s.ends = append(s.ends, int32(len(s.buf)))
}

func (s *textStream) startSection() {
	s.sectionOpen = true
	s.section++
	label := s.tag + "-" + strconv.Itoa(s.section)
	f := fact{label: label, code: s.code()}
	s.facts = append(s.facts, f)
	s.queued = append(s.queued,
		fmt.Sprintf("## %d. %s\n\n", s.section, sectionTitles[s.intn(len(sectionTitles))]),
		"Ledger ", "entry ", label+" ", "records ", "the ", "code ", f.code+".")
}

// intn returns a number in [0, n) by multiply-shift; its slight bias does not matter for text.
func (s *textStream) intn(n int) int {
	return int((s.rng.Uint64() >> 32) * uint64(n) >> 32)
}

func (s *textStream) code() string {
	const letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
	b := []byte{letters[s.intn(len(letters))], letters[s.intn(len(letters))], '-'}
	return string(strconv.AppendInt(b, int64(1000+s.intn(9000)), 10))
}

// text returns the first n units and the last fact wholly inside them (ok false if none).
func (s *textStream) text(n int) (text []byte, last fact, ok bool) {
	if n <= 0 {
		return nil, fact{}, false
	}
	s.ensure(n)
	end := int(s.ends[n-1])
	for i := len(s.facts) - 1; i >= 0; i-- {
		if s.facts[i].end > 0 && s.facts[i].end <= end {
			return s.buf[:end], s.facts[i], true
		}
	}
	return s.buf[:end], fact{}, false
}

// unitsWithin returns how many units end at or below n bytes.
func (s *textStream) unitsWithin(n int) int {
	if n <= 0 {
		return 0
	}
	s.ensureBytes(n + 1)
	lo, hi := 0, len(s.ends)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if int(s.ends[mid]) <= n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
