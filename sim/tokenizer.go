package sim

import "strings"

// VocabSize bounds token ids: ids are in [0, VocabSize).
const VocabSize = 129280

// Byte classes of the tokenizer rule in the package doc.
const (
	classOther = iota
	classLetter
	classDigit
	classBlank
	classNewline
)

const (
	letterPieceBytes = 7
	digitPieceBytes  = 3
)

var byteClass = func() (t [256]uint8) {
	for b := 0; b < 256; b++ {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= 0x80:
			t[b] = classLetter
		case b >= '0' && b <= '9':
			t[b] = classDigit
		case b == ' ', b == '\t', b == '\r':
			t[b] = classBlank
		case b == '\n':
			t[b] = classNewline
		default:
			t[b] = classOther
		}
	}
	return t
}()

// FNV-1a, 32 bit: cheap and stable.
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

func tokenID(text string, leadingSpace bool) int32 {
	h := uint32(fnvOffset32)
	if leadingSpace {
		h = (h ^ ' ') * fnvPrime32
	}
	for i := 0; i < len(text); i++ {
		h = (h ^ uint32(text[i])) * fnvPrime32
	}
	return int32(h % VocabSize)
}

// Tokenize returns the token ids of text under the package's tokenizer rule.
func Tokenize(text string) []int32 {
	// Most English text is about 4.5 bytes per token; one growth at most for typical input.
	return AppendTokens(make([]int32, 0, len(text)/4+8), text)
}

// CountTokens returns len(Tokenize(text)) without building the ids.
func CountTokens(text string) int {
	n := 0
	scanTokens(text, func(string, bool) { n++ })
	return n
}

// AppendTokens appends the token ids of text to dst.
func AppendTokens(dst []int32, text string) []int32 {
	scanTokens(text, func(piece string, space bool) { dst = append(dst, tokenID(piece, space)) })
	return dst
}

// scanTokens calls emit for each token of text with its bytes and whether a single leading
// space was folded into it.
func scanTokens(text string, emit func(piece string, leadingSpace bool)) {
	space := false
	for i := 0; i < len(text); {
		c := byteClass[text[i]]
		switch c {
		case classBlank:
			j := i + 1
			for j < len(text) && byteClass[text[j]] == classBlank {
				j++
			}
			foldable := text[j-1] == ' ' && j < len(text) && byteClass[text[j]] != classNewline
			if foldable {
				if j-1 > i {
					emit(text[i:j-1], false)
				}
				space = true
			} else {
				emit(text[i:j], false)
			}
			i = j
			continue
		case classLetter, classDigit:
			limit := letterPieceBytes
			if c == classDigit {
				limit = digitPieceBytes
			}
			j := i + 1
			for j < len(text) && byteClass[text[j]] == c {
				j++
			}
			for k := i; k < j; k += limit {
				end := min(k+limit, j)
				emit(text[k:end], space)
				space = false
			}
			i = j
		default: // punctuation, symbols and newlines: one token per byte
			emit(text[i:i+1], space)
			i++
		}
		space = false
	}
}

// ChatMessage is one message of a chat request, its content flattened to text.
type ChatMessage struct {
	Role    string
	Content string
}

// RenderChat renders messages through the simulator's fixed chat template.
func RenderChat(messages []ChatMessage, addGenerationPrompt bool) string {
	var b strings.Builder
	n := len("<|assistant|>\n")
	for _, m := range messages {
		n += len(m.Role) + len(m.Content) + 6
	}
	b.Grow(n)
	for _, m := range messages {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>\n")
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|assistant|>\n")
	}
	return b.String()
}
