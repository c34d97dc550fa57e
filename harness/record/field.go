package record

import (
	"encoding/json"
	"fmt"
	"strings"
)

// FieldValue is one field of a section, read by the name run.json gives it: a number, a
// word (strings and booleans), or absent (null) when nothing measured it.
type FieldValue struct {
	Number *float64
	Text   string
	IsText bool
	Absent bool
}

// Field reads a field of the section by its run.json path ("cached_fraction",
// "evidence.external_hits_delta"); ok is false when the section has no such field. This is
// how claim files name what they check, so the names are the record's own.
func (s Section) Field(path string) (v FieldValue, ok bool) { return FieldOf(s.value(), path) }

// FieldOf reads a field of x, any record type, by the path its JSON gives it, as Field
// reads a section's (a reload curve's point: "gain", "verdict").
func FieldOf(x any, path string) (v FieldValue, ok bool) {
	data, err := json.Marshal(x)
	if err != nil {
		return v, false
	}
	var cur any
	if json.Unmarshal(data, &cur) != nil {
		return v, false
	}
	for _, part := range strings.Split(path, ".") {
		obj, isObj := cur.(map[string]any)
		if !isObj {
			return v, false
		}
		if cur, ok = obj[part]; !ok {
			return v, false
		}
	}
	switch x := cur.(type) {
	case float64:
		v.Number = &x
	case string:
		v.Text, v.IsText = x, true
	case bool:
		v.Text, v.IsText = fmt.Sprint(x), true
	case nil:
		v.Absent = true
	default: // an object or list is not one value
		v.Absent = true
	}
	return v, true
}
