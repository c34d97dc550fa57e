package metrics

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/common/model"
)

// ErrBadSelector is wrapped by errors from ParseSelector.
var ErrBadSelector = errors.New("bad metric selector")

// Label is one matcher of a Selector: the label's value equals Value, or, when Regex is
// set, matches Value as a regular expression anchored at both ends (PromQL's =~). A missing
// label reads as "", so `pool=""` selects the series that do not carry pool at all.
type Label struct {
	Name  string
	Value string
	Regex bool
	re    *regexp.Regexp
}

// matches reports whether got (the series' value, "" when it lacks the label) satisfies l.
func (l Label) matches(got string) bool {
	if l.Regex {
		return l.re.MatchString(got)
	}
	return got == l.Value
}

// Selector names a metric family and, optionally, the label values a series must carry,
// as in vllm:kv_offload_total_bytes_total{transfer_type="GPU_to_CPU"} or
// sglang:cached_tokens_total{cache_source=~"storage_.*"} (every storage backend's series).
type Selector struct {
	Metric string
	Labels []Label // sorted by name
}

// String returns the selector in the syntax ParseSelector reads.
func (s Selector) String() string {
	if len(s.Labels) == 0 {
		return s.Metric
	}
	var b strings.Builder
	b.WriteString(s.Metric)
	b.WriteByte('{')
	for i, l := range s.Labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.Name)
		if l.Regex {
			b.WriteString("=~")
		} else {
			b.WriteByte('=')
		}
		b.WriteString(strconv.Quote(l.Value))
	}
	b.WriteByte('}')
	return b.String()
}

// ParseSelector reads `name` or `name{label="value",label=~"regex",...}`. Equality and
// anchored regular-expression matchers exist (no negations): a counter must come from one
// well-defined set of series, which a regex may widen only to series that add up (every
// storage backend of one tier).
func ParseSelector(text string) (Selector, error) {
	text = strings.TrimSpace(text)
	name, rest, hasLabels := strings.Cut(text, "{")
	name = strings.TrimSpace(name)
	if !model.IsValidLegacyMetricName(name) {
		return Selector{}, fmt.Errorf("%w %q: invalid metric name %q", ErrBadSelector, text, name)
	}
	sel := Selector{Metric: name}
	if !hasLabels {
		return sel, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return Selector{}, fmt.Errorf("%w %q: missing closing '}'", ErrBadSelector, text)
	}
	seen := map[string]bool{}
	for {
		body = strings.TrimLeft(body, " \t")
		if body == "" {
			break
		}
		label, after, ok := strings.Cut(body, "=")
		label = strings.TrimSpace(label)
		if !ok || !model.LegacyValidation.IsValidLabelName(label) {
			return Selector{}, fmt.Errorf("%w %q: want label=\"value\" near %q", ErrBadSelector, text, body)
		}
		regex := strings.HasPrefix(after, "~")
		value, after, err := cutQuoted(strings.TrimLeft(strings.TrimPrefix(after, "~"), " \t"))
		if err != nil {
			return Selector{}, fmt.Errorf("%w %q: label %s: %v", ErrBadSelector, text, label, err)
		}
		if seen[label] {
			return Selector{}, fmt.Errorf("%w %q: label %s given twice", ErrBadSelector, text, label)
		}
		seen[label] = true
		l := Label{Name: label, Value: value, Regex: regex}
		if regex {
			if l.re, err = regexp.Compile("^(?:" + value + ")$"); err != nil {
				return Selector{}, fmt.Errorf("%w %q: label %s: bad regular expression: %v", ErrBadSelector, text, label, err)
			}
		}
		sel.Labels = append(sel.Labels, l)
		after = strings.TrimLeft(after, " \t")
		if after == "" {
			break
		}
		if after[0] != ',' {
			return Selector{}, fmt.Errorf("%w %q: want ',' near %q", ErrBadSelector, text, after)
		}
		body = after[1:]
	}
	sort.Slice(sel.Labels, func(i, j int) bool { return sel.Labels[i].Name < sel.Labels[j].Name })
	return sel, nil
}

// cutQuoted reads a double-quoted Go/Prometheus string at the start of s.
func cutQuoted(s string) (value, rest string, err error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", errors.New("value must be double-quoted")
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			v, err := strconv.Unquote(s[:i+1])
			if err != nil {
				return "", "", fmt.Errorf("bad escape in %s", s[:i+1])
			}
			return v, s[i+1:], nil
		}
	}
	return "", "", errors.New("unterminated quoted value")
}

func mustSelector(text string) Selector {
	s, err := ParseSelector(text)
	if err != nil {
		panic(err)
	}
	return s
}
