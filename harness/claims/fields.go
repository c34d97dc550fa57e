package claims

import (
	"reflect"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
)

// knownFields are the record paths a claim may name: the JSON fields of a step's record
// section (sequence, replay or control), nested ones as "evidence.hit_coverage". A field that
// holds free-form JSON (an `any`) admits every path below it.
var knownFields, openFields = func() (map[string]bool, map[string]bool) {
	known, open := map[string]bool{}, map[string]bool{}
	for _, v := range []any{record.SequenceSection{}, record.ReplaySection{}, record.ControlSection{}} {
		addFields(reflect.TypeOf(v), "", known, open, 0)
	}
	return known, open
}()

func addFields(t reflect.Type, prefix string, known, open map[string]bool, depth int) {
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
		known[path] = true
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch ft.Kind() {
		case reflect.Interface, reflect.Map:
			open[path] = true
		case reflect.Struct:
			addFields(ft, path+".", known, open, depth+1)
		}
	}
}

// KnownField reports whether path names a field of a step's record section.
func KnownField(path string) bool {
	if knownFields[path] {
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

// closestField suggests the known field or alias nearest to a misspelled name.
func closestField(name string) string {
	best, bestDist := "", len(name)/3+2 // only close matches are suggestions
	candidates := make([]string, 0, len(knownFields)+len(Aliases))
	for k := range knownFields {
		candidates = append(candidates, k)
	}
	for k := range Aliases {
		candidates = append(candidates, k)
	}
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
