package record

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"
)

// The JSON Schemas of docs/schemas are generated here, by reflection over the record's
// types, the way encoding/json writes them: a field tagged omitempty or omitzero may be
// left out, every other field is required; a pointer, slice or map may be null; no key
// outside the type is allowed. The few types whose JSON is written by hand (run.json and the
// study, whose sections sit under their step ids; the objects keyed by id; a counter's
// change) are described from the types their MarshalJSON writes. validate checks a document
// against the subset of JSON Schema written here.

//go:generate go test -run TestJSONSchemasAreCurrent -update .

var updateSchemas = flag.Bool("update", false, "rewrite docs/schemas from the record's types")

const schemaDir = "../../docs/schemas"

// schemaFiles are the published schemas: file name, the record it describes.
func schemaFiles() []struct {
	file   string
	schema map[string]any
} {
	return []struct {
		file   string
		schema map[string]any
	}{
		{"step.schema.json", document(StepSchema, "a step file, step-NN-<id>.json (record.StepArtifact)", reflect.TypeFor[StepArtifact](), nil)},
		{"journal-line.schema.json", document("", "one line of a step's request journal, step-NN-<id>.partial.jsonl (record.Request)", reflect.TypeFor[Request](), nil)},
		{"run.schema.json", runDocument()},
		{"study.schema.json", studyDocument()},
		{"sweep.schema.json", document(SweepSchema, "a sweep's sweep.json (record.Sweep)", reflect.TypeFor[Sweep](), nil)},
	}
}

// schemaGen collects the named types a schema refers to under $defs.
type schemaGen struct{ defs map[string]any }

// document is the schema of type t as a file's root; schema, when set, is the only value
// its "schema" key may hold; extra replaces properties of the root.
func document(schema, title string, t reflect.Type, build func(g *schemaGen) map[string]any) map[string]any {
	g := &schemaGen{defs: map[string]any{}}
	var root map[string]any
	if build != nil {
		root = build(g)
	} else {
		root = g.object(t)
	}
	if schema != "" {
		root["properties"].(map[string]any)["schema"] = map[string]any{"const": schema}
	}
	out := map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title}
	for k, v := range root {
		out[k] = v
	}
	if len(g.defs) > 0 {
		out["$defs"] = g.defs
	}
	return out
}

// of is t's schema as encoding/json writes it.
func (g *schemaGen) of(t reflect.Type) map[string]any {
	switch t {
	case reflect.TypeFor[time.Time]():
		return map[string]any{"type": "string", "format": "date-time"}
	case reflect.TypeFor[json.RawMessage]():
		return map[string]any{} // kept as written: the scenario, the preflight report
	case reflect.TypeFor[CounterChange]():
		return g.named("CounterChange", reflect.TypeFor[counterChangeJSON]())
	case reflect.TypeFor[RepeatSteps]():
		return keyed(g.of(reflect.TypeFor[RepeatStep]()))
	}
	switch t.Kind() {
	case reflect.Pointer:
		return nullable(g.of(t.Elem()))
	case reflect.Struct:
		if t.Name() == "" {
			return g.object(t)
		}
		return g.named(t.Name(), t)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": []any{"string", "null"}}
		}
		return map[string]any{"type": []any{"array", "null"}, "items": g.of(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": []any{"object", "null"}, "additionalProperties": g.of(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	}
	panic(fmt.Sprintf("no JSON Schema for %v", t))
}

// named is a reference to t's object under $defs, built once.
func (g *schemaGen) named(name string, t reflect.Type) map[string]any {
	if _, ok := g.defs[name]; !ok {
		g.defs[name] = nil // a type that holds itself refers to its definition
		g.defs[name] = g.object(t)
	}
	return map[string]any{"$ref": "#/$defs/" + name}
}

// object is struct t's fields as encoding/json writes them; embedded structs' fields are
// the struct's own.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if tag == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				walk(ft)
				continue
			}
			if name == "" {
				name = f.Name
			}
			props[name] = g.of(f.Type)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
		}
	}
	walk(t)
	slices.Sort(required)
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// nullable is s or null.
func nullable(s map[string]any) map[string]any {
	if ty, ok := s["type"].(string); ok {
		out := map[string]any{}
		for k, v := range s {
			out[k] = v
		}
		out["type"] = []any{ty, "null"}
		return out
	}
	if _, ok := s["type"].([]any); ok || len(s) == 0 {
		return s // already takes null (a list, a map), or anything
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}

// keyed is an object keyed by id whose every value is s (marshalKeyed).
func keyed(s map[string]any) map[string]any {
	return map[string]any{"type": "object", "additionalProperties": s}
}

// field is one fixed key of a record whose JSON is written by hand.
type field struct {
	key      string
	schema   map[string]any
	required bool
}

func fixed(fields []field, other map[string]any) map[string]any {
	props := map[string]any{}
	var required []string
	for _, f := range fields {
		props[f.key] = f.schema
		if f.required {
			required = append(required, f.key)
		}
	}
	slices.Sort(required)
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": other}
}

// sections is what may sit under a step id (or a control run's study key).
func (g *schemaGen) sections() map[string]any {
	var alts []any
	for _, t := range []reflect.Type{reflect.TypeFor[SequenceSection](), reflect.TypeFor[ReplaySection](),
		reflect.TypeFor[ConversationSection](), reflect.TypeFor[TraceSection](), reflect.TypeFor[ControlSection]()} {
		alts = append(alts, g.of(t))
	}
	return map[string]any{"anyOf": alts}
}

// sourcesSchema is the sources list: the artifacts, then the references (sources()).
func (g *schemaGen) sourcesSchema() map[string]any {
	return map[string]any{"type": []any{"array", "null"}, "items": map[string]any{"anyOf": []any{g.of(reflect.TypeFor[ArtifactRef]()), g.of(reflect.TypeFor[Source]())}}}
}

// runDocument is run.json as Run.MarshalJSON writes it: its fixed keys, and each step's
// section under the step's id.
func runDocument() map[string]any {
	return document(RunSchema, "a run record, run.json (record.Run)", nil, func(g *schemaGen) map[string]any {
		of := func(t reflect.Type) map[string]any { return g.of(t) }
		return fixed([]field{
			{"schema", nil, true},
			{"observed_at", of(reflect.TypeFor[string]()), true},
			{"status", map[string]any{"enum": []any{StatusRunning, StatusCompleted, StatusInterrupted, StatusFailed}}, true},
			{"stop_reason", of(reflect.TypeFor[string]()), false},
			{"model", of(reflect.TypeFor[Model]()), true},
			{"runtime", of(reflect.TypeFor[Runtime]()), true},
			{"topology", map[string]any{"type": "object"}, true},
			{"cache", of(reflect.TypeFor[Cache]()), true},
			{"steps", map[string]any{"type": []any{"array", "null"}, "items": map[string]any{"type": "string"}}, true},
			{"repeats", of(reflect.TypeFor[RepeatsSection]()), false},
			{"reload_curves", keyed(of(reflect.TypeFor[ReloadCurve]())), false},
			{"probes", keyed(of(reflect.TypeFor[ProbeResult]())), false},
			{"gates", of(reflect.TypeFor[[]GateResult]()), false},
			{"preflight", map[string]any{}, false},
			{"sources", g.sourcesSchema(), true},
			{"kvbench", of(reflect.TypeFor[Kvbench]()), true},
			{"scenario", map[string]any{}, true},
		}, g.sections())
	})
}

// studyDocument is a study as Study.MarshalJSON writes it.
func studyDocument() map[string]any {
	return document(RunSchema, "a study record, kvbench summarize's (record.Study)", nil, func(g *schemaGen) map[string]any {
		return fixed([]field{
			{"schema", nil, true},
			{"observed_at", g.of(reflect.TypeFor[string]()), true},
			{"model", g.of(reflect.TypeFor[Model]()), true},
			{"runtime", g.of(reflect.TypeFor[Runtime]()), true},
			{"topology", map[string]any{"type": "object"}, true},
			{"cache", g.of(reflect.TypeFor[Cache]()), true},
			{"sources", g.sourcesSchema(), true},
		}, g.sections())
	})
}

// validate checks doc (as json.Unmarshal into any decodes it) against schema s of root.
func validate(root, s map[string]any, doc any, at string) error {
	if ref, ok := s["$ref"].(string); ok {
		def, _ := root["$defs"].(map[string]any)[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		if def == nil {
			return fmt.Errorf("%s: unknown $ref %s", at, ref)
		}
		return validate(root, def, doc, at)
	}
	if c, ok := s["const"]; ok && !reflect.DeepEqual(c, doc) {
		return fmt.Errorf("%s: %v, want %v", at, doc, c)
	}
	if e, ok := s["enum"].([]any); ok && !slices.ContainsFunc(e, func(v any) bool { return reflect.DeepEqual(v, doc) }) {
		return fmt.Errorf("%s: %v is none of %v", at, doc, e)
	}
	if alts, ok := s["anyOf"].([]any); ok {
		var errs []string
		for _, a := range alts {
			err := validate(root, a.(map[string]any), doc, at)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("%s: matches no alternative: %s", at, strings.Join(errs, " | "))
		}
	}
	if ty, ok := s["type"]; ok {
		types, _ := ty.([]any)
		if t, isOne := ty.(string); isOne {
			types = []any{t}
		}
		if !slices.ContainsFunc(types, func(t any) bool { return isType(doc, t.(string)) }) {
			return fmt.Errorf("%s: %T, want %v", at, doc, ty)
		}
	}
	if m, ok := s["minimum"].(float64); ok {
		if n, isNum := doc.(float64); isNum && n < m {
			return fmt.Errorf("%s: %v below %v", at, n, m)
		}
	}
	switch v := doc.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		required, _ := s["required"].([]any)
		for _, k := range required {
			if _, ok := v[k.(string)]; !ok {
				return fmt.Errorf("%s: missing required key %q", at, k)
			}
		}
		for k, val := range v {
			ps, known := props[k]
			if !known {
				switch extra := s["additionalProperties"].(type) {
				case bool:
					if !extra {
						return fmt.Errorf("%s: key %q is not in the schema", at, k)
					}
					continue
				case map[string]any:
					ps = extra
				default:
					continue
				}
			}
			if ps == nil {
				continue
			}
			if err := validate(root, ps.(map[string]any), val, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, val := range v {
				if err := validate(root, items, val, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func isType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case float64:
		return t == "number" || (t == "integer" && x == math.Trunc(x))
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

// encodeSchema is a schema as the file holds it: indented, keys sorted (encoding/json sorts
// map keys), a trailing newline.
func encodeSchema(s map[string]any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	err := enc.Encode(s)
	return b.Bytes(), err
}

// loadSchema reads a published schema back as generic JSON, as validate takes it.
func loadSchema(file string) (map[string]any, error) {
	data, err := os.ReadFile(filepath.Join(schemaDir, file))
	if err != nil {
		return nil, err
	}
	var s map[string]any
	return s, json.Unmarshal(data, &s)
}
