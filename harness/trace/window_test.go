package trace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// sixRequests arrive at 0, 1, 2, 3, 4 and 5 s; the one at 2 s is 5,000 tokens long, the
// others 1,000.
func sixRequests() string {
	var b strings.Builder
	for i := range 6 {
		n := 1000
		if i == 2 {
			n = 5000
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 1, "hash_ids": [%d]}`+"\n", i*1000, n, i)
	}
	return b.String()
}

func TestWindowSelects(t *testing.T) {
	cases := []struct {
		name    string
		window  Window
		lines   []int // lines kept
		dropped int
	}{
		{"whole trace", Window{}, []int{1, 2, 3, 4, 5, 6}, 0},
		{"from 1.5 s", Window{Start: 1500 * time.Millisecond}, []int{3, 4, 5, 6}, 0},
		// [1 s, 3 s) holds the requests at 1 s and 2 s; 3 s is outside.
		{"from 1 s for 2 s", Window{Start: time.Second, Duration: 2 * time.Second}, []int{2, 3}, 0},
		{"2 requests from 3 s", Window{Start: 3 * time.Second, Requests: 2}, []int{4, 5}, 0},
		{"cap drops the long one", Window{MaxInputTokens: 4000}, []int{1, 2, 4, 5, 6}, 1},
		// The cap applies before the count: 3 kept requests, the dropped one in between.
		{"3 requests under the cap", Window{Start: time.Second, Requests: 3, MaxInputTokens: 4000}, []int{2, 4, 5}, 1},
		{"a cap at the length keeps it", Window{MaxInputTokens: 5000}, []int{1, 2, 3, 4, 5, 6}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.window.Validate(); err != nil {
				t.Fatal(err)
			}
			sel := Select(NewReader(strings.NewReader(sixRequests()), "six.jsonl", 512), c.window)
			var lines []int
			var req Request
			for range 100 {
				err := sel.Next(&req)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				lines = append(lines, req.Line)
			}
			if fmt.Sprint(lines) != fmt.Sprint(c.lines) || sel.Dropped() != c.dropped || sel.Kept() != len(c.lines) {
				t.Errorf("kept lines %v (%d), dropped %d; want %v, dropped %d", lines, sel.Kept(), sel.Dropped(), c.lines, c.dropped)
			}
		})
	}
}

// TestWindowStopsReading: a window that ends early does not read, nor fail on, the rest.
func TestWindowStopsReading(t *testing.T) {
	text := sixRequests() + "this line is not JSON\n"
	for _, w := range []Window{{Requests: 2}, {Duration: 3 * time.Second}} {
		a, err := Analyze(Select(NewReader(strings.NewReader(text), "t.jsonl", 512), w), Config{})
		if err != nil || a.Requests == 0 {
			t.Errorf("window %s: %v", w, err)
		}
	}
	_, err := Analyze(Select(NewReader(strings.NewReader(text), "t.jsonl", 512), Window{}), Config{})
	if !errors.Is(err, ErrNotJSON) || !strings.Contains(err.Error(), "t.jsonl:7:") {
		t.Errorf("whole trace: %v, want the bad line 7", err)
	}
}

func TestWindowErrors(t *testing.T) {
	invalid := []Window{
		{Start: -time.Second}, {Duration: -1}, {Requests: -1}, {MaxInputTokens: -1},
		{Duration: time.Second, Requests: 3},
	}
	for _, w := range invalid {
		if w.Validate() == nil {
			t.Errorf("window %+v validates", w)
		}
	}
	_, err := AnalyzeFile(context.Background(), "testdata/does-not-exist.jsonl", Window{}, Config{})
	if err == nil || !strings.Contains(err.Error(), "does-not-exist.jsonl") {
		t.Errorf("missing file: %v", err)
	}
	sel := Select(NewReader(strings.NewReader(sixRequests()), "six.jsonl", 512), Window{Start: time.Hour})
	var req Request
	if err := sel.Next(&req); !errors.Is(err, ErrEmptyWindow) || !strings.Contains(err.Error(), "from 1h0m0s to the end") {
		t.Errorf("a window past the end: %v", err)
	}
	sel = Select(NewReader(strings.NewReader(sixRequests()), "six.jsonl", 512), Window{MaxInputTokens: 10})
	if err := sel.Next(&req); !errors.Is(err, ErrEmptyWindow) || !strings.Contains(err.Error(), "6 dropped over max_input_tokens") {
		t.Errorf("a cap below every request: %v", err)
	}
}

// TestSubsetKeepsPositions: a subset hands out the requests at its positions only, in
// order, and reads no further than the last.
func TestSubsetKeepsPositions(t *testing.T) {
	cases := []struct {
		keep  []int
		lines []int
	}{
		{[]int{0, 2, 3}, []int{1, 3, 4}},
		{[]int{5}, []int{6}},
		{nil, nil},
		{[]int{4, 9}, []int{5}}, // the source ends first
	}
	for _, c := range cases {
		r := NewReader(strings.NewReader(sixRequests()), "t.jsonl", 0)
		s := SubsetOf(r, c.keep)
		var got []int
		var req Request
		for {
			err := s.Next(&req)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%v: %v", c.keep, err)
			}
			got = append(got, req.Line)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.lines) {
			t.Errorf("subset %v: lines %v, want %v", c.keep, got, c.lines)
		}
	}
	// Reading stops at the last kept position: the source's next request is the one after.
	r := NewReader(strings.NewReader(sixRequests()), "t.jsonl", 0)
	s := SubsetOf(r, []int{1})
	var req Request
	if err := s.Next(&req); err != nil || req.Line != 2 {
		t.Fatalf("first: line %d, %v", req.Line, err)
	}
	if err := s.Next(&req); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last: %v", err)
	}
	if err := r.Next(&req); err != nil || req.Line != 3 {
		t.Errorf("the source went on to line %d (%v), want 3", req.Line, err)
	}
}
