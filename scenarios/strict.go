package scenarios

import (
	"errors"
	"strings"

	"github.com/BurntSushi/toml"
)

// MaxRepeat bounds a scenario's repeat count: each repetition sends every request again.
const MaxRepeat = 100

// Positions maps each key path of a TOML document ("target.endpoint", "claim[1].value") to
// the line defining it.
type Positions map[string]int

// KeyPositions finds the line of every key path of a TOML document.
func KeyPositions(src string) Positions { return keyLines(src) }

// Line finds key, or the nearest enclosing key that has a line; 0 when none does.
func (p Positions) Line(key string) int {
	for key != "" {
		if l := p[key]; l > 0 {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

// LineUnindexed finds a key given without array indices (as toml's MetaData names them).
func (p Positions) LineUnindexed(key string) int {
	best := 0
	for k, l := range p {
		if stripIndices(k) == key && (best == 0 || l < best) {
			best = l
		}
	}
	if best == 0 {
		if i := strings.LastIndex(key, "."); i > 0 {
			return p.LineUnindexed(key[:i])
		}
	}
	return best
}

// DecodeStrict decodes a TOML document into v the way scenario files are decoded: a syntax
// error, and every key v has no field for, is a Problem with its line (a typo must not
// silently change what is checked). Keys under a free prefix are free-form and allowed.
func DecodeStrict(data []byte, v any, free ...string) (Positions, []Problem) {
	pos := KeyPositions(string(data))
	md, err := toml.Decode(string(data), v)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return pos, []Problem{{Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}}
		}
		return pos, []Problem{{Msg: err.Error()}}
	}
	var problems []Problem
next:
	for _, k := range md.Undecoded() {
		key := k.String()
		for _, f := range free {
			if key == f || strings.HasPrefix(key, f+".") {
				continue next
			}
		}
		problems = append(problems, Problem{Line: pos.LineUnindexed(key), Key: key, Msg: "unknown key"})
	}
	return pos, problems
}
