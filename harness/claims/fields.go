package claims

import (
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// knownFields are the record paths a claim may name: the JSON fields of a step's record
// section (sequence, replay or control), nested ones as "evidence.hit_coverage". A field that
// holds free-form JSON (an `any`) admits every path below it.
var knownFields, openFields = func() (map[string][]reflect.Type, map[string]bool) {
	known, open := map[string][]reflect.Type{}, map[string]bool{}
	for _, v := range []any{record.SequenceSection{}, record.ReplaySection{}, record.ControlSection{}} {
		addFields(reflect.TypeOf(v), "", known, open, 0)
	}
	// A reload curve's points, as the record's reload_curves list them (record.CurvePoint).
	addFields(reflect.TypeOf(record.CurvePoint{}), CurvePrefix, known, open, 0)
	return known, open
}()

func addFields(t reflect.Type, prefix string, known map[string][]reflect.Type, open map[string]bool, depth int) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || depth > 4 {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := prefix + name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		known[path] = append(known[path], ft) // sections may give one name different types
		switch ft.Kind() {
		case reflect.Interface, reflect.Map:
			open[path] = true
		case reflect.Struct:
			addFields(ft, path+".", known, open, depth+1)
		}
	}
}

// KnownField reports whether path names a field of a step's record section, or of a reload
// curve's points (under CurvePrefix).
func KnownField(path string) bool {
	if _, ok := knownFields[path]; ok {
		return true
	}
	for p := path; ; {
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return false
		}
		if p = p[:i]; openFields[p] {
			return true
		}
	}
}

// verdictWords are the values a verdict field holds.
var verdictWords = func() []string {
	var out []string
	for _, v := range verdict.All {
		out = append(out, string(v))
	}
	return out
}()

// answerWords are the values of a yes/no/unknown field (setup_valid, eviction_pressure).
var answerWords = []string{string(capacity.Yes), string(capacity.No), string(capacity.Unknown)}

// fieldKind is what a known field holds in the record sections that have it: a number,
// text, or something that is not one value (a list, a group of fields).
type fieldKind struct {
	number, text, other bool
	// words are the only values the text can take; nil when any text can be.
	words []string
}

// kindOf says what path holds; ok is false below a field of free-form JSON, whose values
// are known only when a record is read.
func kindOf(path string) (k fieldKind, ok bool) {
	types, known := knownFields[path]
	if !known {
		return k, false
	}
	last := path[strings.LastIndexByte(path, '.')+1:]
	anyText := false
	for _, t := range types {
		var words []string
		switch {
		case t == reflect.TypeOf(capacity.Answer("")):
			words = answerWords
		case t.Kind() == reflect.Bool:
			words = []string{"true", "false"}
		case t.Kind() == reflect.String && (last == "verdict" || last == "replay_verdict"):
			words = verdictWords
		case t.Kind() == reflect.String:
			anyText = true
		case t.Kind() >= reflect.Int && t.Kind() <= reflect.Float64:
			k.number = true
			continue
		default: // a list, a struct, a map or an any
			if t.Kind() == reflect.Interface || t.Kind() == reflect.Map {
				return fieldKind{}, false
			}
			k.other = true
			continue
		}
		k.text = true
		for _, w := range words { // a field of several sections lists its words once
			if !slices.Contains(k.words, w) {
				k.words = append(k.words, w)
			}
		}
	}
	if anyText {
		k.words = nil
	}
	return k, true
}

// closestField suggests the known field or alias nearest to a misspelled name.
func closestField(name string) string {
	candidates := make([]string, 0, len(knownFields)+len(Aliases))
	for k := range knownFields {
		candidates = append(candidates, k)
	}
	for k := range Aliases {
		candidates = append(candidates, k)
	}
	return closest(name, candidates)
}

// closest is the candidate nearest to a misspelled name; "" when none is close.
func closest(name string, candidates []string) string {
	best, bestDist := "", len(name)/3+2 // only close matches are suggestions
	candidates = slices.Clone(candidates)
	sort.Strings(candidates)
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
