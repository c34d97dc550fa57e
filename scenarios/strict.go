package scenarios

import (
	"errors"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Ceilings of a scenario's sizes and counts. No server takes more, and kvbench builds every
// prompt of a pass before sending it, so a larger value only ends in running out of memory.
const (
	// MaxRepeat bounds a scenario's repeat count: each repetition sends every request again.
	MaxRepeat = 100
	// MaxPromptTokens bounds planned_context_tokens, shared_prefix_tokens and max_tokens.
	MaxPromptTokens = 10_000_000
	// MaxRequestsPerStep bounds a step's requests.
	MaxRequestsPerStep = 100_000
	// MaxConcurrency bounds a step's requests in flight at once.
	MaxConcurrency = 4096
	// MaxPlannedTokens bounds the planned tokens of all requests of one pass summed: about
	// 400 MB of prompt text held at once.
	MaxPlannedTokens = 100_000_000
	// MaxNameBytes bounds a scenario name and a step id, which become file names.
	MaxNameBytes = 200
)

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

// wellFormed reports whether doc is TOML at all, whatever its values' types.
func wellFormed(doc string) bool {
	var m map[string]any
	_, err := toml.Decode(doc, &m)
	return err == nil
}

// maxTypeErrors bounds the values of the wrong type one file's error reports.
const maxTypeErrors = 50

// typeErrorPattern matches the errors toml.Decode returns for a value of the wrong type,
// which are not ParseErrors: `toml: line 6 (last key "step.requests"): incompatible types: ...`.
var typeErrorPattern = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "([^"]*)"\): (.*)$`)

// decodeProblem turns a toml.Decode error into a Problem naming the line and the key, indexed
// ("step[1].requests") where the line tells which entry of an array of tables it is.
func decodeProblem(err error, pos Positions) Problem {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return Problem{Line: pe.Position.Line, Key: pos.indexedKey(pe.LastKey, pe.Position.Line), Msg: pe.Message}
	}
	if m := typeErrorPattern.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		if line == 0 {
			line = pos.LineUnindexed(m[2])
		}
		return Problem{Line: line, Key: pos.indexedKey(m[2], line), Msg: m[3]}
	}
	return Problem{Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// indexedKey finds the key path defined on line that is key without its array indices;
// key itself when none is.
func (p Positions) indexedKey(key string, line int) string {
	if line <= 0 {
		return key
	}
	for k, l := range p {
		if l == line && stripIndices(k) == key {
			return k
		}
	}
	return key
}

// DecodeStrict decodes a TOML document into v the way scenario files are decoded: a syntax
// error, and every key v has no field for, is a Problem with its line (a typo must not
// silently change what is checked). Keys under a free prefix are free-form and allowed.
// decoded is false when the document could not be decoded at all (syntax or type errors).
//
// BurntSushi/toml stops at the first value of the wrong type, so every such value is found by
// decoding again with its line blanked out (at most maxTypeErrors of them), until the file
// decodes or blanking a line breaks its syntax.
func DecodeStrict(data []byte, v any, free ...string) (pos Positions, problems []Problem, decoded bool) {
	pos = KeyPositions(string(data))
	md, err := toml.Decode(string(data), v)
	if err == nil {
		return pos, unknownKeys(md, pos, free), true
	}
	problems = []Problem{decodeProblem(err, pos)}
	if !wellFormed(string(data)) || reflect.TypeOf(v).Kind() != reflect.Pointer {
		return pos, problems, false // a syntax error: nothing after it can be read
	}
	lines := strings.Split(string(data), "\n")
	for len(problems) < maxTypeErrors {
		l := problems[len(problems)-1].Line
		if l < 1 || l > len(lines) || lines[l-1] == "" {
			break
		}
		lines[l-1] = ""
		doc := strings.Join(lines, "\n")
		if !wellFormed(doc) {
			break // the value spans lines: what follows cannot be read without it
		}
		md, err := toml.Decode(doc, reflect.New(reflect.TypeOf(v).Elem()).Interface())
		if err == nil {
			problems = append(problems, unknownKeys(md, pos, free)...)
			break
		}
		problems = append(problems, decodeProblem(err, pos))
	}
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
	return pos, problems, false
}

// unknownKeys lists the keys of a decoded document that its type has no field for, except
// those under a free prefix.
func unknownKeys(md toml.MetaData, pos Positions, free []string) []Problem {
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
	return problems
}
