package runs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
)

// TestJournalReadsBackWhatWasAppended: every appended request reads back in order; a last
// line cut short is dropped, a bad line elsewhere is an error naming file and line.
func TestJournalReadsBackWhatWasAppended(t *testing.T) {
	path := filepath.Join(t.TempDir(), JournalName("step-01-seq.json"))
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := j.Append(record.Request{Step: "seq", IndexInStep: i}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	if _, err := OpenJournal(path); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("reopening a journal: %v", err)
	}
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"step":"seq","ind`)
	f.Close()
	got, err := ReadJournal(path)
	if err != nil || len(got) != 3 || got[2].IndexInStep != 2 {
		t.Fatalf("read %+v, %v", got, err)
	}
	data, _ := os.ReadFile(path)
	os.WriteFile(path, append([]byte("{oops\n"), data...), 0o644)
	if _, err := ReadJournal(path); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("a bad first line: %v", err)
	}
}

func TestArtifactNames(t *testing.T) {
	long := strings.Repeat("s", 300)
	for _, c := range []struct {
		k, i int
		id   string
	}{{0, 0, "replay"}, {3, 11, "eviction_sequence"}, {0, 104, long}, {2, 1, long}} {
		name := ArtifactName(c.k, c.i, c.id)
		if len(JournalName(name)) > 255 {
			t.Fatalf("%q: journal name of %d bytes", name, len(JournalName(name)))
		}
		for _, n := range []string{name, JournalName(name)} {
			if k, i, ok := parseArtifactName(n); !ok || k != c.k || i != c.i {
				t.Fatalf("%q parsed as %d %d %v, want %d %d", n, k, i, ok, c.k, c.i)
			}
		}
	}
	if ArtifactName(0, 0, "replay") != "step-01-replay.json" || ArtifactName(1, 0, "replay") != "repeat-01-step-01-replay.json" {
		t.Fatal("short ids must keep their names")
	}
	if ArtifactName(0, 0, long) == ArtifactName(0, 0, long[:299]+"t") {
		t.Fatal("two long ids share a file name")
	}
}

// TestReplaceJSONReplacesAtomically: run.json's rewrite replaces the file and leaves no
// temporary file; WriteJSON still refuses the same path.
func TestReplaceJSONReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "run.json")
	for i := 1; i <= 3; i++ {
		sum, err := ReplaceJSON(p, map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := FileSHA256(p); got != sum {
			t.Fatalf("returned sha %s, file has %s", sum, got)
		}
	}
	data, _ := os.ReadFile(p)
	if string(data) != "{\n  \"n\": 3\n}\n" {
		t.Fatalf("file %q", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
	if _, err := WriteJSON(p, 1); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteJSON over run.json: %v", err)
	}
}

// TestCreateRunDirNeverReuses: a run directory appears with its run.json in it, under a
// fresh name each time, and no temporary directory stays behind.
func TestCreateRunDirNeverReuses(t *testing.T) {
	parent := t.TempDir()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var dirs []string
	for i := 0; i < 3; i++ {
		d, err := CreateRunDir(parent, "eviction/6x", at, map[string]int{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.Base(d))
		if _, err := os.Stat(filepath.Join(d, "run.json")); err != nil {
			t.Fatal(err)
		}
	}
	if dirs[0] != "eviction_6x-20261130T100000Z" || dirs[1] != dirs[0]+"-1" || dirs[2] != dirs[0]+"-2" {
		t.Fatalf("dirs %v", dirs)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 3 {
		t.Fatalf("entries %v", entries)
	}
}
