package trace

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// shardTrace is 40 requests: the even ones turns of 7 AIPerf sessions, the odd ones without
// a session.
func shardTrace() string {
	var b strings.Builder
	for i := range 40 {
		session := ""
		if i%2 == 0 {
			session = fmt.Sprintf(`, "session_id": "s%d"`, i%7)
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 100, "output_length": 1, "hash_ids": [%d]%s}`+"\n", i*10, i, session)
	}
	return b.String()
}

// shardLines reads the lines shard sh keeps of window w.
func shardLines(t *testing.T, w Window) []int {
	t.Helper()
	sel := Select(NewReader(strings.NewReader(shardTrace()), "shards.jsonl", 512), w)
	var lines []int
	var req Request
	for range 1000 {
		err := sel.Next(&req)
		if errors.Is(err, io.EOF) || errors.Is(err, ErrEmptyWindow) {
			return lines
		}
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, req.Line)
	}
	t.Fatal("the selection did not end")
	return nil
}

func TestShardsPartitionTheWindow(t *testing.T) {
	for _, base := range []Window{{}, {Requests: 25}} {
		whole := shardLines(t, base)
		for n := 1; n <= 5; n++ {
			owner := map[int]int{}
			for k := 1; k <= n; k++ {
				w := base
				w.Shard = Shard{Index: k, Count: n}
				for _, line := range shardLines(t, w) {
					if prev, ok := owner[line]; ok {
						t.Errorf("%s: line %d in shards %d and %d", w, line, prev, k)
					}
					owner[line] = k
				}
			}
			var union []int
			for line := range owner {
				union = append(union, line)
			}
			slices.Sort(union)
			if !slices.Equal(union, whole) {
				t.Errorf("%d shards of %s: union %v, want the window's %v", n, base, union, whole)
			}
			// A session's turns (lines 1, 15, 29: i%7 == 0 at i = 0, 14, 28) share a shard.
			if base.IsWhole() && (owner[1] != owner[15] || owner[15] != owner[29]) {
				t.Errorf("%d shards: session s0 split over shards %d, %d, %d", n, owner[1], owner[15], owner[29])
			}
		}
	}
}

func TestShardKeepsTraceTime(t *testing.T) {
	sel := Select(NewReader(strings.NewReader(shardTrace()), "shards.jsonl", 512), Window{Shard: Shard{Index: 2, Count: 2}})
	var req Request
	for range 100 {
		if err := sel.Next(&req); err != nil {
			break
		}
		if want := (req.Line - 1) * 10; req.Timestamp.Milliseconds() != int64(want) {
			t.Errorf("line %d at %s, want its trace time %d ms", req.Line, req.Timestamp, want)
		}
	}
}

func TestParseShard(t *testing.T) {
	if sh, err := ParseShard("2/3"); err != nil || sh != (Shard{Index: 2, Count: 3}) {
		t.Errorf("2/3: %+v, %v", sh, err)
	}
	for _, bad := range []string{"0/3", "4/3", "1/0", "-1/2", "1", "a/b", "1/2/3", ""} {
		if _, err := ParseShard(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
