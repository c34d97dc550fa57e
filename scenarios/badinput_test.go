package scenarios

import (
	"errors"
	"strings"
	"testing"
)

const oneStep = "[prompt]\ntoken_counting = \"estimate\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [1000]\n"

// TestDerivedNameFollowsTheNameRule: a name taken from the file name becomes the run
// directory's just as a written one does, so it meets the same rule, with a hint to set
// name in the file: a 245-byte file name is refused here, not after preflight, and "..toml"
// gets no "." name (a hidden run directory).
func TestDerivedNameFollowsTheNameRule(t *testing.T) {
	long := strings.Repeat("n", 245)
	cases := []struct {
		file string
		want string // "" when the file parses
	}{
		{"/tmp/" + long + ".toml", "/tmp/" + long + ".toml: name: is 245 bytes long; at most 200 (it becomes a directory name) (taken from the file name: set name = \"...\" in the file, or rename it)"},
		{"/tmp/..toml", `/tmp/..toml: name: "." must be letters, digits, '.', '-' and '_', starting with a letter or digit (it becomes a directory name) (taken from the file name`},
		{"/tmp/.hidden.toml", `name: ".hidden" must be letters`},
		{"/tmp/-flag.toml", `name: "-flag" must be letters`},
		{"/tmp/good-name_1.toml", ""},
	}
	for _, c := range cases {
		sc, err := Parse([]byte(oneStep), c.file)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.file, err)
		case c.want == "" && sc.Name != "good-name_1":
			t.Errorf("%s: name %q", c.file, sc.Name)
		case c.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v\nwant %s", c.file, err, c.want)
		}
	}
	// A name set in the file is used, however odd the file's own name.
	if sc, err := Parse([]byte("name = \"ok\"\n"+oneStep), "/tmp/..toml"); err != nil || sc.Name != "ok" {
		t.Errorf("named in the file: %v %v", sc, err)
	}
}

// TestEveryTypeErrorIsReported: all values of the wrong type in a file are reported at once,
// each with its line, with the unknown keys after them, as for every other problem.
func TestEveryTypeErrorIsReported(t *testing.T) {
	src := "name = \"types\"\nrepeat = \"three\"\n[target]\nsample_interval = 5\n[prompt]\nseed = \"x\"\n" +
		"[[step]]\nid = \"a\"\nplanned_context_tokens = [1000]\n[[step]]\nid = \"b\"\nrequests = \"two\"\nplanned_context_tokens = [1000]\nbogus = 1\n"
	_, err := Parse([]byte(src), "t.toml")
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v", err)
	}
	for _, want := range []string{
		"t.toml:2: repeat: incompatible types",
		"t.toml:4: target.sample_interval: invalid duration \"5\"",
		"t.toml:6: prompt.seed: incompatible types",
		"t.toml:12: step[1].requests: incompatible types",
		"t.toml:14: step.bogus: unknown key",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in\n%v", want, err)
		}
	}
	// A syntax error stops the reading: only it is reported.
	_, err = Parse([]byte("repeat = \"x\"\nname = = 1\n"), "s.toml")
	if err == nil || strings.Count(err.Error(), "s.toml:") != 1 || !strings.Contains(err.Error(), "s.toml:2:") {
		t.Errorf("syntax error: %v", err)
	}
}

// TestAPIKeyEnvIsAVariableName: api_key_env names a variable; anything else (a value pasted
// by mistake, text with escape sequences meant for a terminal) is refused with its line.
func TestAPIKeyEnvIsAVariableName(t *testing.T) {
	for _, bad := range []string{"sk-live-1234", "A B", "X\\u001b[2J", "1ABC"} {
		_, err := Parse([]byte("[target]\napi_key_env = \""+bad+"\"\n"+oneStep), "k.toml")
		if err == nil || !strings.Contains(err.Error(), "k.toml:2: target.api_key_env:") || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := Parse([]byte("[target]\napi_key_env = \"VLLM_API_KEY\"\n"+oneStep), "k.toml"); err != nil {
		t.Errorf("VLLM_API_KEY: %v", err)
	}
}
