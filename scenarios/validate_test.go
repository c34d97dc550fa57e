package scenarios

import (
	"encoding"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// docKey is one key of the README's annotated example: its path, the kind of step whose
// [[step]] block holds it, and the text of its line (value and comment, with the comment
// lines that continue it).
type docKey struct {
	key  string
	kind kinds
	text string
}

var (
	docHeader = regexp.MustCompile(`^(\[\[?)([a-z_.]+)\]\]?`)
	docKeyRE  = regexp.MustCompile(`^([a-z_]+)\s*=\s*(.*)$`)
)

var kindOfName = map[string]kinds{`"conversation"`: kConversation, `"trace"`: kTrace, `"reload-curve"`: kCurve}

// readmeKeys reads the keys of the README's ```toml example, commented ones included.
func readmeKeys(t *testing.T) []docKey {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "```toml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Fatal("README.md has no ```toml example")
	}
	var out []docKey
	table, stepStart := "", -1
	endStep := func() {
		if stepStart < 0 {
			return
		}
		k := kSequence
		for _, d := range out[stepStart:] {
			if d.key == "step[].kind" {
				k = kindOfName[strings.Fields(d.text)[0]]
			} else if d.key == "step[].replay" && k == kSequence {
				k = kReplay
			}
		}
		for i := stepStart; i < len(out); i++ {
			out[i].kind = k
		}
		stepStart = -1
	}
	for _, line := range strings.Split(block, "\n") {
		text := strings.TrimSpace(line)
		if rest, commented := strings.CutPrefix(text, "#"); commented {
			text = strings.TrimSpace(rest)
			if !docHeader.MatchString(text) && !docKeyRE.MatchString(text) {
				if len(out) > 0 { // a comment continuing the key above
					out[len(out)-1].text += " " + strings.TrimSpace(strings.TrimPrefix(text, "#"))
				}
				continue
			}
		}
		if m := docHeader.FindStringSubmatch(text); m != nil {
			endStep()
			table = m[2]
			if m[1] == "[[" {
				table += "[]"
			}
			if table == "step[]" {
				stepStart = len(out)
			}
			continue
		}
		if m := docKeyRE.FindStringSubmatch(text); m != nil {
			key := m[1]
			if table != "" {
				key = table + "." + key
			}
			out = append(out, docKey{key: key, text: m[2]})
		}
	}
	endStep()
	return out
}

// covers reports whether r is a row for key (or, for a free table, any key under it).
func (r *rule) covers(key string) bool {
	return r.key == key || r.free && strings.HasPrefix(key, r.key+".")
}

// takes reports whether the step kinds k take the key under step[]: a row on k names it,
// and no row on k refuses it.
func takes(key string, k kinds) (named, refused bool) {
	name := strings.TrimPrefix(key, "step[].")
	for i := range rules {
		r := &rules[i]
		if r.scope() != "step" || r.on&k == 0 {
			continue
		}
		if slices.Contains(r.excludes, name) {
			refused = true
		} else if r.covers(key) {
			named = true
		}
	}
	return named, refused
}

// TestRulesMatchReadme walks the key table against the README's example, both ways: every
// key it documents is a key of the table (under a step kind that takes it), every key of
// the table is documented, and the README says of each key what its rule checks.
func TestRulesMatchReadme(t *testing.T) {
	docs := readmeKeys(t)
	if len(docs) < 60 {
		t.Fatalf("read only %d keys from the README's example", len(docs))
	}
	for _, d := range docs {
		if strings.HasPrefix(d.key, "step[].") {
			named, refused := takes(d.key, d.kind)
			if !named || refused {
				t.Errorf("README documents %s in a step of kind %s, which the table does not let it take", d.key, kindNames(d.kind))
			}
			continue
		}
		if !slices.ContainsFunc(rules, func(r rule) bool { return r.covers(d.key) }) {
			t.Errorf("README documents %s, which is no key of the table", d.key)
		}
	}
	for _, r := range rules {
		var texts []string
		for _, d := range docs {
			onKind := r.scope() != "step" || d.kind&r.on != 0
			if d.key == r.key && onKind {
				texts = append(texts, d.text)
			}
		}
		parent := r.key[:max(strings.LastIndex(r.key, "."), 0)]
		documented := slices.ContainsFunc(docs, func(d docKey) bool {
			return d.key == r.key || d.key == parent || strings.HasPrefix(d.key, r.key+".") || strings.HasPrefix(d.key, r.key+"[].")
		})
		if !documented {
			t.Errorf("%s is not documented in the README's example", r.key)
		}
		for _, phrase := range r.says {
			if !slices.ContainsFunc(texts, func(s string) bool { return strings.Contains(s, phrase) }) {
				t.Errorf("README's %s (on %s) does not say %q, as its rule checks", r.key, kindNames(r.on), phrase)
			}
		}
	}
}

func kindNames(k kinds) string {
	var out []string
	for bit, n := range map[kinds]string{kSequence: "sequence", kReplay: "replay", kConversation: "conversation", kTrace: "trace", kCurve: "reload-curve"} {
		if k&bit != 0 {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "any"
	}
	return strings.Join(out, "|")
}

// TestRulesCoverDecoder: the table names every key the decoder accepts, and no other.
func TestRulesCoverDecoder(t *testing.T) {
	var decoded []string
	tomlKeys(reflect.TypeOf(Scenario{}), "", &decoded)
	table := map[string]bool{}
	for _, r := range rules {
		table[r.key] = true
	}
	for _, k := range decoded {
		if !table[k] {
			t.Errorf("the decoder takes %s, which has no row in the key table", k)
		}
		delete(table, k)
	}
	for k := range table {
		// rows on a table or an array of tables itself ("step", "step[].replay") check its keys together
		if !slices.ContainsFunc(decoded, func(d string) bool { return strings.HasPrefix(d, k+".") || strings.HasPrefix(d, k+"[].") }) {
			t.Errorf("the key table has %s, which the decoder does not take", k)
		}
	}
}

var (
	textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
	tomlUnmarshaler = reflect.TypeOf((*toml.Unmarshaler)(nil)).Elem()
)

// tomlKeys lists the key paths of type t, as the rows of the table name them.
func tomlKeys(t reflect.Type, prefix string, out *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		if f.Anonymous && tag == "" {
			tomlKeys(f.Type, prefix, out)
			continue
		}
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		leaf := ft.Kind() != reflect.Struct || reflect.PointerTo(ft).Implements(textUnmarshaler) || reflect.PointerTo(ft).Implements(tomlUnmarshaler)
		switch {
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			tomlKeys(ft.Elem(), key+"[].", out)
		case leaf:
			*out = append(*out, key)
		default:
			tomlKeys(ft, key+".", out)
		}
	}
}

// TestRulesOrderedByScope: the loop runs the rows of one scope together, so a table whose
// step rows were split by a top row would check some steps' rules out of order.
func TestRulesOrderedByScope(t *testing.T) {
	var scopes []string
	for _, r := range rules {
		if (r.scope() == "step") != (r.on != 0) {
			t.Errorf("%s: a row on step keys names the kinds it runs on, and only such a row", r.key)
		}
		if sc := r.scope(); len(scopes) == 0 || scopes[len(scopes)-1] != sc {
			scopes = append(scopes, sc)
		}
	}
	want := []string{"", "step", "", "gate", "probe", "", "source"}
	if !slices.Equal(scopes, want) {
		t.Errorf("scopes of the table in order: %q, want %q", scopes, want)
	}
}

// TestRulesRefuseWhatTheyExclude walks the table's exclusions: a step of each kind a row
// runs on that sets a key the row excludes is refused, at the row's key.
func TestRulesRefuseWhatTheyExclude(t *testing.T) {
	set := map[string]string{
		"requests": "2", "planned_context_tokens": "[500]", "replay": `{ step = "a", request = 0 }`,
		"concurrency": "2", "cold_twin": "true", "max_tokens": "10", "min_tokens": "1",
		"file": `"t.jsonl"`, "block_tokens": "16", "start": `"1s"`, "duration": `"1s"`, "time_scale": "2",
		"max_input_tokens": "100", "prompt_form": `"text"`, "format": `"burstgpt"`,
		"from_tokens": "2048", "to_tokens": "4096", "factor": "3",
		"users": "2", "turns": "2", "turn_tokens": "10", "system_prompt_tokens": "10",
		"think_time": `"1s"`, "arrival": `"ramp"`, "ramp": `"1s"`,
	}
	base := map[kinds]map[string]string{
		kSequence:     {"planned_context_tokens": "[500]"},
		kReplay:       {"replay": `{ step = "a", request = 0 }`},
		kConversation: {"kind": `"conversation"`, "users": "2", "turns": "2", "turn_tokens": "10"},
		kTrace:        {"kind": `"trace"`, "file": `"t.jsonl"`},
		kCurve:        {"kind": `"reload-curve"`},
	}
	checked := 0
	for _, r := range rules {
		for k, fields := range base {
			if r.on&k == 0 {
				continue
			}
			for _, ex := range r.excludes {
				step := maps.Clone(fields)
				step[ex] = set[ex]
				if ex == "replay" {
					delete(step, "planned_context_tokens")
				}
				src := validBase + "[[step]]\nid = \"a\"\nplanned_context_tokens = [500]\n[[step]]\nid = \"b\"\n"
				for _, f := range slices.Sorted(maps.Keys(step)) {
					src += f + " = " + step[f] + "\n"
				}
				_, err := Parse([]byte(src), "t.toml")
				if want := "step[1]." + r.name() + ": "; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("a %s step setting %s: got %v, want a problem at %s", kindNames(k), ex, err, want)
				}
				checked++
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d exclusions checked", checked)
	}
}
