package trace

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Window selects part of a trace. Requests are considered in trace order from the first
// one at or after Start; a request longer than MaxInputTokens is dropped (and counted); the
// window ends at Start+Duration, or once Requests requests have been kept. The zero Window
// is the whole trace. Timestamps keep their trace time: a replay subtracts Start. A Shard
// keeps its part of the window's requests (the window's limits count the whole window's).
type Window struct {
	Start          time.Duration
	Duration       time.Duration // 0: until the trace ends
	Requests       int           // 0: no limit
	MaxInputTokens int           // 0: no limit
	Shard          Shard         // zero: every request of the window
}

// ErrEmptyWindow is a window that keeps no request.
var ErrEmptyWindow = errors.New("the window keeps no request")

// Validate checks the window's fields.
func (w Window) Validate() error {
	switch {
	case w.Start < 0:
		return fmt.Errorf("window start %s is negative", w.Start)
	case w.Duration < 0:
		return fmt.Errorf("window duration %s is negative", w.Duration)
	case w.Requests < 0:
		return fmt.Errorf("window requests %d is negative", w.Requests)
	case w.Duration > 0 && w.Requests > 0:
		return errors.New("a window has a duration or a request count, not both")
	case w.MaxInputTokens < 0:
		return fmt.Errorf("max_input_tokens %d is negative", w.MaxInputTokens)
	}
	return w.Shard.Validate()
}

// IsWhole reports whether the window keeps the whole trace.
func (w Window) IsWhole() bool { return w == Window{} }

// String describes the window for a console line.
func (w Window) String() string {
	if w.IsWhole() {
		return "whole trace"
	}
	s := fmt.Sprintf("from %s", w.Start)
	switch {
	case w.Duration > 0:
		s += fmt.Sprintf(" for %s", w.Duration)
	case w.Requests > 0:
		s += fmt.Sprintf(", %d requests", w.Requests)
	default:
		s += " to the end"
	}
	if w.MaxInputTokens > 0 {
		s += fmt.Sprintf(", input <= %d tokens", w.MaxInputTokens)
	}
	if !w.Shard.IsWhole() {
		s += ", shard " + w.Shard.String()
	}
	return s
}

// Selection is the part of a source a window keeps.
type Selection struct {
	src     Source
	window  Window
	inside  int           // the window's requests read (of every shard)
	first   time.Duration // the trace time of the window's first request
	kept    int
	dropped int
	done    bool
}

var _ Source = (*Selection)(nil)

// Select returns the requests of src that w keeps. w must be valid (see Window.Validate).
func Select(src Source, w Window) *Selection {
	return &Selection{src: src, window: w}
}

// Next fills req with the next kept request; io.EOF when the window ends. It stops reading
// src at the window's end, and returns ErrEmptyWindow when the window kept nothing.
func (s *Selection) Next(req *Request) error {
	w := s.window
	for !s.done {
		if w.Requests > 0 && s.inside >= w.Requests {
			s.done = true
			break
		}
		if err := s.src.Next(req); err != nil {
			if !errors.Is(err, io.EOF) {
				return err
			}
			s.done = true
			break
		}
		if req.Timestamp < w.Start {
			continue
		}
		if w.Duration > 0 && req.Timestamp >= w.Start+w.Duration {
			s.done = true
			break
		}
		if w.MaxInputTokens > 0 && req.InputLength > w.MaxInputTokens {
			s.dropped++
			continue
		}
		if s.inside == 0 {
			s.first = req.Timestamp
		}
		s.inside++
		if !w.Shard.keeps(req, s.inside-1) {
			continue
		}
		s.kept++
		return nil
	}
	if s.kept == 0 {
		if s.inside > 0 {
			return fmt.Errorf("%w (%s: the shard holds none of the window's %d requests)", ErrEmptyWindow, w, s.inside)
		}
		return fmt.Errorf("%w (%s; %d dropped over max_input_tokens)", ErrEmptyWindow, w, s.dropped)
	}
	return io.EOF
}

// Info is what the selection's source learned of its trace (a FormatReader's Info); false
// for a source that is not a trace file's reader.
func (s *Selection) Info() (Info, bool) {
	if r, ok := s.src.(FormatReader); ok {
		return r.Info(), true
	}
	return Info{}, false
}

// Kept is how many requests the selection has handed out.
func (s *Selection) Kept() int { return s.kept }

// First is the trace time of the window's first request, of every shard: a shard's replay
// counts its requests' times from it, so the shards together send the window's load.
func (s *Selection) First() time.Duration { return s.first }

// Dropped is how many requests inside the window were longer than MaxInputTokens.
func (s *Selection) Dropped() int { return s.dropped }

// Subset is the requests of a source at some positions only: a replay's ideal covers the
// requests that completed, not every one the window holds.
type Subset struct {
	src  Source
	keep []int // ascending positions in src, 0-based
	pos  int   // the position of src's next request
	next int   // index into keep of the next request to hand out
}

var _ Source = (*Subset)(nil)

// SubsetOf returns the requests of src at positions keep (0-based, ascending). It stops
// reading src after the last of them.
func SubsetOf(src Source, keep []int) *Subset {
	return &Subset{src: src, keep: keep}
}

// Next fills req with the next kept request; io.EOF after the last, or when src ends first.
func (s *Subset) Next(req *Request) error {
	for s.next < len(s.keep) {
		if err := s.src.Next(req); err != nil {
			return err
		}
		p := s.pos
		s.pos++
		if p == s.keep[s.next] {
			s.next++
			return nil
		}
	}
	return io.EOF
}
