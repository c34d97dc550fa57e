package runs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckOutput: the one rule of user-named outputs. Nothing goes into a run or sweep
// directory (also one whose run.json is lost, also through a link), no kvbench record is
// replaced, and other files are replaced only by writers that replace.
func TestCheckOutput(t *testing.T) {
	root := t.TempDir()
	mk := func(rel, content string) string {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	runJSON := `{"schema": "anvil-serving.kv-offload-replay/v1", "status": "completed"}`
	mk("run/run.json", runJSON)
	mk("run/step-01-a.json", `{"schema": "anvil-serving.kvbench-step/v1"}`)
	mk("sweep/sweep.json", `{"schema": "anvil-serving.kvbench-sweep/v1", "levels": []}`)
	mk("lost/step-01-a.partial.jsonl", `{"step":"a"}`+"\n")
	// The schema after a large nested value is still found.
	mk("out/study.json", `{"runs": [{"a": [1, 2, {"b": "schema"}]}], "note": "x", "schema": "anvil-serving.kv-offload-replay/v1"}`)
	mk("out/old.prom", "# HELP kvbench_run_info x\n")
	mk("out/notes.txt", "mine")
	mk("project/run.json", `{"name": "my own run.json, not kvbench's"}`)
	if err := os.Symlink(filepath.Join(root, "run"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		path    string
		replace bool
		want    error // nil: allowed
	}{
		{"run/run.json", true, ErrInsideRun},
		{"run/new.prom", true, ErrInsideRun},
		{"run/report.html", false, ErrInsideRun},
		{"run/sub/x.json", false, ErrInsideRun},
		{"link/x.html", false, ErrInsideRun},
		{"sweep/report.html", false, ErrInsideRun},
		{"lost/x.prom", true, ErrInsideRun},
		{"out/study.json", true, ErrIsRecord},
		{"out/study.json", false, ErrIsRecord},
		{"out/old.prom", true, nil},
		{"out/old.prom", false, fs.ErrExist},
		{"out/notes.txt", false, fs.ErrExist},
		{"out", true, fs.ErrExist},
		{"out/new.json", false, nil},
		{"project/report.html", false, nil},
		{"missing/dir/x.html", false, nil}, // the write itself says the directory is missing
	}
	for _, c := range cases {
		err := CheckOutput(filepath.Join(root, c.path), c.replace)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("CheckOutput(%s, replace %v) = %v, want %v", c.path, c.replace, err, c.want)
		}
	}

	// The writers apply it, and leave the refused file as it was.
	if err := ReplaceOutput(filepath.Join(root, "run/run.json"), []byte("x"), 0o644); !errors.Is(err, ErrInsideRun) {
		t.Errorf("ReplaceOutput over run.json: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "run/run.json")); string(data) != runJSON {
		t.Errorf("run.json changed: %s", data)
	}
	if _, err := WriteOutputJSON(filepath.Join(root, "out/study.json"), map[string]int{}); !errors.Is(err, ErrIsRecord) {
		t.Errorf("WriteOutputJSON over a study record: %v", err)
	}
	prom := filepath.Join(root, "out/old.prom")
	if err := ReplaceOutput(prom, []byte("new\n"), 0o644); err != nil {
		t.Fatalf("ReplaceOutput over its own earlier file: %v", err)
	}
	if st, err := os.Stat(prom); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("replaced file: %v %v", st, err)
	}
}

// TestCheckOutputDirRefusesWhatMkdirWouldMeet: an --out that is a dangling link or a file
// is refused when named, not after preflight as "mkdir: file exists".
func TestCheckOutputDirRefusesWhatMkdirWouldMeet(t *testing.T) {
	root := t.TempDir()
	dangling := filepath.Join(root, "results")
	if err := os.Symlink(filepath.Join(root, "gone"), dangling); err != nil {
		t.Fatal(err)
	}
	err := CheckOutputDir(dangling)
	if err == nil || !strings.Contains(err.Error(), dangling+" is a symbolic link to "+filepath.Join(root, "gone")+", which does not exist") {
		t.Errorf("dangling link: %v", err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckOutputDir(file); err == nil || !strings.Contains(err.Error(), file+" is not a directory") {
		t.Errorf("a file: %v", err)
	}
	if err := os.Mkdir(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "dir"), filepath.Join(root, "good")); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"dir", "good", "not-yet"} {
		if err := CheckOutputDir(filepath.Join(root, ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestWriteErrorsNameTheRealFile: a failed write names the file the caller gave, never the
// hidden temp file beside it.
func TestWriteErrorsNameTheRealFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	for name, write := range map[string]func(string) error{
		"ReplaceJSON":   func(p string) error { _, err := ReplaceJSON(p, 1); return err },
		"WriteFile":     func(p string) error { _, err := WriteFile(p, nil); return err },
		"ReplaceOutput": func(p string) error { return ReplaceOutput(p, nil, 0o644) },
	} {
		path := filepath.Join(missing, "run.json")
		err := write(path)
		if err == nil || strings.Contains(err.Error(), ".tmp-") || !strings.Contains(err.Error(), path) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v; want the real path, no temp name, ErrNotExist", name, err)
		}
	}
	// A run directory whose name cannot be made is named, not its hidden build directory.
	_, err := CreateRunDir(t.TempDir(), strings.Repeat("n", 250), time.Now(), map[string]string{})
	if err == nil || strings.Contains(err.Error(), ".creating-") || !strings.Contains(err.Error(), "creating run directory") {
		t.Errorf("CreateRunDir with an overlong name: %v", err)
	}
}

// TestJournalIsPrivate: a journal holds what a record holds, so it gets a record's mode.
func TestJournalIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "step-01-a.partial.jsonl")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		t.Fatalf("journal mode %v, want 0600 like the records", st.Mode().Perm())
	}
	rec, err := WriteJSON(filepath.Join(filepath.Dir(path), "x.json"), 1)
	if err != nil || rec == "" {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(filepath.Dir(path), "x.json")); st.Mode().Perm() != 0o600 {
		t.Fatalf("record mode %v", st.Mode().Perm())
	}
}

// FuzzTopLevelSchema: whatever a file holds, reading its schema never panics, and for a
// JSON object it agrees with decoding the whole object.
func FuzzTopLevelSchema(f *testing.F) {
	for _, s := range []string{
		`{"schema": "anvil-serving.kv-offload-replay/v1"}`,
		`{"a": [1, {"schema": "x"}], "schema": "anvil-serving.kvbench-sweep/v1"}`,
		`{"schema": 5}`, `[{"schema": "anvil-serving.x"}]`, `{"schema"`, "# HELP kvbench_x\n", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := topLevelSchema(strings.NewReader(s))
		var whole map[string]any
		if json.Unmarshal([]byte(s), &whole) != nil || err != nil {
			return
		}
		want, _ := whole["schema"].(string)
		if _, dup := whole["schema"]; dup && got != want && strings.Count(s, `"schema"`) == 1 {
			t.Fatalf("topLevelSchema(%q) = %q, the decoded object says %q", s, got, want)
		}
	})
}

// TestWriteOutputFrom: a streamed output lands whole with the sha256 of its bytes, or not at
// all: never over a file, never into a run directory, nothing left behind by a failed write.
func TestWriteOutputFrom(t *testing.T) {
	dir := t.TempDir()
	lines := func(w io.Writer) error {
		for i := range 50000 { // past the write buffer, so the stream is written in pieces
			if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
				return err
			}
		}
		return nil
	}
	path := filepath.Join(dir, "trace.jsonl")
	sum, err := WriteOutputFrom(path, lines)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := FileSHA256(path); err != nil || got != sum {
		t.Errorf("sha256 %s, file's %s (%v)", sum, got, err)
	}
	if data, _ := os.ReadFile(path); !strings.HasPrefix(string(data), "line 0\nline 1\n") || !strings.HasSuffix(string(data), "line 49999\n") {
		t.Errorf("file holds %d bytes, not the stream", len(data))
	}

	broken := errors.New("generator broke")
	for _, c := range []struct {
		name  string
		path  string
		write func(io.Writer) error
		want  error
	}{
		{"existing file", path, lines, fs.ErrExist},
		{"missing directory", filepath.Join(dir, "no", "such", "x.jsonl"), lines, fs.ErrNotExist},
		{"failed write", filepath.Join(t.TempDir(), "half.jsonl"), func(w io.Writer) error { _ = lines(w); return broken }, broken},
	} {
		_, err := WriteOutputFrom(c.path, c.write)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.path) || strings.Contains(err.Error(), ".tmp-") {
			t.Errorf("%s: %v, want %v naming %s", c.name, err, c.want, c.path)
		}
		if entries, _ := os.ReadDir(filepath.Dir(c.path)); c.want == broken && len(entries) != 0 {
			t.Errorf("%s left %v", c.name, entries)
		}
	}
	// With a run.json, dir is a run directory, which takes no user output.
	if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte(`{"schema": "anvil-serving.kv-offload-replay/v1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteOutputFrom(filepath.Join(dir, "x.jsonl"), lines); !errors.Is(err, ErrInsideRun) {
		t.Errorf("into a run directory: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("refused writes left files: %v", entries)
	}
}
