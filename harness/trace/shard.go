package trace

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Shard is one of Count disjoint parts of a window (--shard K/N): a client replays its part
// and the Count parts together are the window, each request at its own trace time. A
// request of an AIPerf session goes with its session (a hash of its session_id), so a
// conversation's turns hit the cache their earlier turns filled; any other request goes by
// its position in the window, round robin. The zero Shard is the whole window.
type Shard struct {
	Index int `json:"index"` // 1-based
	Count int `json:"count"`
}

// ParseShard reads "K/N", 1 <= K <= N.
func ParseShard(s string) (Shard, error) {
	k, n, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, fmt.Errorf("shard %q is not K/N (e.g. 1/4)", s)
	}
	ki, errK := strconv.Atoi(strings.TrimSpace(k))
	ni, errN := strconv.Atoi(strings.TrimSpace(n))
	if errK != nil || errN != nil {
		return Shard{}, fmt.Errorf("shard %q is not K/N with whole numbers (e.g. 1/4)", s)
	}
	sh := Shard{Index: ki, Count: ni}
	return sh, sh.Validate()
}

// Validate checks 1 <= Index <= Count (or the zero Shard).
func (s Shard) Validate() error {
	switch {
	case s.IsWhole():
		return nil
	case s.Count < 1:
		return errors.New("a shard count N is at least 1")
	case s.Index < 1 || s.Index > s.Count:
		return fmt.Errorf("shard %d/%d: K is from 1 to N", s.Index, s.Count)
	}
	return nil
}

// IsWhole reports whether the shard is the whole window (no --shard).
func (s Shard) IsWhole() bool { return s == Shard{} }

// String is "K/N".
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// keeps reports whether the window's request req, at 0-based position pos in the window,
// belongs to the shard.
func (s Shard) keeps(req *Request, pos int) bool {
	if s.Count <= 1 {
		return true
	}
	part := uint64(pos)
	if req.Session != 0 {
		part = mix64(req.Session)
	}
	return int(part%uint64(s.Count)) == s.Index-1
}

func (w Window) shardOrNil() *Shard {
	if w.Shard.IsWhole() {
		return nil
	}
	return &w.Shard
}
