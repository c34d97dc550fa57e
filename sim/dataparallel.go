package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
)

// Router policies of the data-parallel mode (Profile.Router).
const (
	// RouterRoundRobin sends generation requests to the replicas in turn, blind to their caches.
	RouterRoundRobin = "round-robin"
	// RouterPrefixAffinity sends a request to the replica whose GPU pool or CPU tier holds
	// the longest prefix of its block hashes; ties go round-robin.
	RouterPrefixAffinity = "prefix-affinity"
)

// Routers lists the router policies.
var Routers = []string{RouterRoundRobin, RouterPrefixAffinity}

// replicaSet is the data-parallel mode: independent engines, each with its own GPU pool and
// CPU tier, behind one endpoint.
type replicaSet struct {
	engines []*Engine
	policy  string
	next    atomic.Uint64 // the round-robin turn
}

func newReplicaSet(p Profile) *replicaSet {
	n := max(p.DataParallel, 1)
	rs := &replicaSet{engines: make([]*Engine, n), policy: p.Router}
	for i := range rs.engines {
		rs.engines[i] = NewEngine(p)
	}
	return rs
}

// pick chooses the engine that serves prompt.
func (rs *replicaSet) pick(prompt []int32, blockSize int) *Engine {
	n := len(rs.engines)
	if n == 1 {
		return rs.engines[0]
	}
	start := int(rs.next.Add(1)-1) % n
	if rs.policy != RouterPrefixAffinity {
		return rs.engines[start]
	}
	hashes, _ := BlockHashes(prompt, blockSize)
	best, bestLen := start, -1
	for i := range n {
		idx := (start + i) % n
		if l := rs.engines[idx].cachedPrefixBlocks(hashes); l > bestLen {
			best, bestLen = idx, l
		}
	}
	return rs.engines[best]
}

func (rs *replicaSet) restart() {
	for _, e := range rs.engines {
		e.Restart()
	}
}

// cachedPrefixBlocks is how many leading blocks of hashes the GPU pool or the CPU tier holds,
// what a prefix-aware router scores a replica by.
func (e *Engine) cachedPrefixBlocks(hashes []uint64) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for ; n < len(hashes); n++ {
		if _, ok := e.pool.cached.get(hashes[n]); !ok && !e.cpu.contains(hashes[n]) {
			break
		}
	}
	return n
}

// replicasSummary says how many replicas serve and how they are routed; "" for one.
func (p Profile) replicasSummary() string {
	if p.DataParallel <= 1 {
		return ""
	}
	return fmt.Sprintf("; %d data-parallel replicas, each with this GPU pool and CPU tier, routed %s", p.DataParallel, p.Router)
}

// Engines are the server's engines, one per data-parallel replica.
func (s *Server) Engines() []*Engine { return s.replicas.engines }

// writeMetrics writes /metrics: one engine's exposition, or with several replicas each one's
// series under its own engine label, families merged.
func (s *Server) writeMetrics(w io.Writer) error {
	if len(s.replicas.engines) == 1 {
		return WriteMetrics(w, s.profile, s.replicas.engines[0].Counters())
	}
	one := s.profile
	one.DataParallelEngines = 1
	var order []string
	headers := map[string][]string{}
	samples := map[string][]string{}
	for i, e := range s.replicas.engines {
		var b bytes.Buffer
		if err := WriteMetrics(&b, one, e.Counters()); err != nil {
			return err
		}
		label := `engine="` + strconv.Itoa(i) + `"`
		family := ""
		sc := bufio.NewScanner(&b)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
				family, _, _ = strings.Cut(rest, " ")
				if _, seen := headers[family]; !seen {
					order = append(order, family)
				}
			}
			if strings.HasPrefix(line, "# ") {
				if i == 0 {
					headers[family] = append(headers[family], line)
				}
				continue
			}
			samples[family] = append(samples[family], strings.Replace(line, `engine="0"`, label, 1))
		}
		if err := sc.Err(); err != nil {
			return err
		}
	}
	var out bytes.Buffer
	for _, f := range order {
		for _, l := range append(headers[f], samples[f]...) {
			out.WriteString(l + "\n")
		}
	}
	_, err := w.Write(out.Bytes())
	return err
}
