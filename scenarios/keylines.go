package scenarios

import (
	"fmt"
	"strings"
)

// keyLines maps each key path of a TOML document ("target.endpoint", "step[1].replay.step")
// to the line defining it. BurntSushi/toml does not expose key positions, and errors must
// name the line. It understands what scenarios use: tables, arrays of tables, dotted keys and
// one-line inline tables; multi-line strings and arrays are skipped over.
func keyLines(src string) map[string]int {
	lines := map[string]int{}
	counts := map[string]int{} // array-of-tables name -> entries so far
	table := ""
	inMultiline := ""
	for n, raw := range strings.Split(src, "\n") {
		line := strings.TrimSpace(raw)
		if inMultiline != "" {
			if strings.Contains(line, inMultiline) {
				inMultiline = ""
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		switch {
		case strings.HasPrefix(line, "[["):
			name := strings.TrimSpace(strings.TrimSuffix(strings.SplitN(line[2:], "]]", 2)[0], "]]"))
			table = fmt.Sprintf("%s[%d]", name, counts[name])
			counts[name]++
			lines[table] = n + 1
			if _, ok := lines[name]; !ok {
				lines[name] = n + 1
			}
			continue
		case line[0] == '[':
			table = strings.TrimSpace(strings.SplitN(line[1:], "]", 2)[0])
			lines[table] = n + 1
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq < 0 {
			continue
		}
		key := unquoteKey(strings.TrimSpace(line[:eq]))
		full := key
		if table != "" {
			full = table + "." + key
		}
		lines[full] = n + 1
		value := strings.TrimSpace(line[eq+1:])
		if strings.HasPrefix(value, "{") {
			for _, part := range strings.Split(strings.Trim(value, "{} "), ",") {
				if i := strings.IndexByte(part, '='); i > 0 {
					lines[full+"."+unquoteKey(strings.TrimSpace(part[:i]))] = n + 1
				}
			}
		}
		for _, q := range []string{`"""`, `'''`} {
			if strings.HasPrefix(value, q) && !strings.Contains(value[3:], q) {
				inMultiline = q
			}
		}
	}
	return lines
}

func unquoteKey(k string) string {
	parts := strings.Split(k, ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}
