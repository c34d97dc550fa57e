package runs

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
)

// maxIDInName is the longest step id a file name carries as is; a longer one is cut and
// suffixed with a hash of the whole id, so the name stays under the file system's 255 bytes.
const maxIDInName = 100

// journalSuffix ends a step's journal; the step file's name is the same with ".json".
const journalSuffix = ".partial.jsonl"

// ArtifactName is the file of repetition k's step i (0-based). Repetition 0 keeps the plain
// step-NN-<id>.json names, so readers of single runs see no difference.
func ArtifactName(k, i int, id string) string {
	if len(id) > maxIDInName {
		sum := sha256.Sum256([]byte(id))
		id = id[:maxIDInName-17] + "-" + hex.EncodeToString(sum[:8])
	}
	if k == 0 {
		return fmt.Sprintf("step-%02d-%s.json", i+1, id)
	}
	return fmt.Sprintf("repeat-%02d-step-%02d-%s.json", k, i+1, id)
}

// JournalName is the journal of the step whose file is artifact (an ArtifactName).
func JournalName(artifact string) string {
	return strings.TrimSuffix(artifact, ".json") + journalSuffix
}

// parseArtifactName returns the repetition and 0-based step index an ArtifactName (or its
// journal's name) encodes.
func parseArtifactName(name string) (k, i int, ok bool) {
	base := strings.TrimSuffix(strings.TrimSuffix(name, journalSuffix), ".json")
	var rest string
	if n, err := fmt.Sscanf(base, "repeat-%d-step-%d-%s", &k, &i, &rest); err == nil && n == 3 {
		return k, i - 1, i > 0
	}
	if n, err := fmt.Sscanf(base, "step-%d-%s", &i, &rest); err == nil && n == 2 {
		return 0, i - 1, i > 0
	}
	return 0, 0, false
}

// Journal is a step's append-only request journal, one JSON line per finished request.
// Append writes the line at once, so from then on a killed or crashed kvbench loses nothing
// (the kernel holds the line); an fsync within SyncInterval, or at Close, covers it against
// an OS crash or power loss too. After a failed write or fsync every later Append fails.
// The step file supersedes the journal when the step ends.
type Journal struct {
	mu       sync.Mutex
	synced   *sync.Cond // broadcast when an fsync ends
	f        *os.File
	path     string
	fsync    func() error // f.Sync; tests replace it
	written  uint64       // lines written
	durable  uint64       // lines covered by a completed fsync
	syncing  bool         // an fsync is in flight
	flushing bool         // a flush is scheduled
	err      error        // the first write or fsync error; the journal stays failed
}

// SyncInterval bounds how long a journal line waits for its fsync. One fsync per request
// cost a fifth of the client's CPU at 64 streams; lines written within an interval share one.
const SyncInterval = 100 * time.Millisecond

// OpenJournal creates the journal at path; it never opens an existing one.
func OpenJournal(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, recordPerm) // as private as the records
	if err != nil {
		return nil, fmt.Errorf("creating journal: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, fmt.Errorf("creating journal %s: %w", path, err)
	}
	j := &Journal{f: f, path: path, fsync: f.Sync}
	j.synced = sync.NewCond(&j.mu)
	return j, nil
}

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Append writes q as one line and schedules its fsync; an error of an earlier fsync is
// returned here.
func (j *Journal) Append(q record.Request) error {
	data, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("encoding journal line: %w", err)
	}
	data = append(data, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return j.err
	}
	if j.f == nil {
		return fmt.Errorf("writing %s: journal closed", j.path)
	}
	if _, err := j.f.Write(data); err != nil {
		// No later line is written: one cut short stays the last, which ReadJournal drops.
		j.err = fmt.Errorf("writing %s: %w", j.path, err)
		return j.err
	}
	j.written++
	if !j.flushing {
		j.flushing = true
		time.AfterFunc(SyncInterval, j.flush)
	}
	return nil
}

func (j *Journal) flush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.flushing = false
	j.syncLocked()
}

// syncLocked returns once every line written before the call is fsynced, or the journal
// failed or closed. The fsync runs unlocked, so Appends go on writing meanwhile.
func (j *Journal) syncLocked() {
	upTo := j.written
	for j.durable < upTo && j.err == nil && j.f != nil {
		if j.syncing {
			j.synced.Wait()
			continue
		}
		j.syncing = true
		covers := j.written
		j.mu.Unlock()
		err := j.fsync()
		j.mu.Lock()
		j.syncing = false
		if err != nil {
			// A later fsync may succeed although these lines were lost: stay failed.
			j.err = fmt.Errorf("syncing %s: %w", j.path, err)
		} else {
			j.durable = covers
		}
		j.synced.Broadcast()
	}
}

// Close fsyncs what is not yet and closes the journal's file, which stays. It returns
// the journal's write or fsync error if one happened.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.syncLocked()
	for j.syncing {
		j.synced.Wait()
	}
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return errors.Join(j.err, err)
}

// ReadJournal reads a journal's requests. A last line cut short (the process died inside
// the write) is dropped: its request had not been made durable; any other bad line, or one
// holding a value no measurement gives (record.ErrImpossible), is an error naming the line.
func ReadJournal(path string) ([]record.Request, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []record.Request
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	complete := bytes.HasSuffix(data, []byte("\n"))
	for line := 1; sc.Scan(); line++ {
		var q record.Request
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			if !complete && line == bytes.Count(data, []byte("\n"))+1 {
				break
			}
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if err := q.Check(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
