package record

import (
	"encoding/json"
	"reflect"
	"testing"
)

func f(v float64) *float64 { return &v }

// TestCounterChangeJSON: the shape scripts read; before, after and delta are null where a
// side is absent, and the delta is recomputed when read back.
func TestCounterChangeJSON(t *testing.T) {
	tests := []struct {
		cc   CounterChange
		want string
	}{
		{CounterChange{Before: f(0), After: f(8), Source: "l", SourceBefore: "l (lazy, no series yet)"},
			`{"before":0,"after":8,"delta":8,"present":true,"decreased":false,"source":"l","source_before":"l (lazy, no series yet)"}`},
		{CounterChange{After: f(8), Source: "x"},
			`{"before":null,"after":8,"delta":null,"present":false,"decreased":false,"source":"x"}`},
		{CounterChange{Before: f(9), After: f(2), Source: "x", Decreased: true, Reason: "r"},
			`{"before":9,"after":2,"delta":-7,"present":true,"decreased":true,"reason":"r","source":"x"}`},
		{CounterChange{Before: f(9), Source: "x", Unreadable: true, Reason: "NaN after"},
			`{"before":9,"after":null,"delta":null,"present":false,"decreased":false,"unreadable":true,"reason":"NaN after","source":"x"}`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.cc)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("Marshal = %s\nwant      %s", got, tt.want)
		}
		var back CounterChange
		if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, tt.cc) {
			t.Errorf("round trip of %s = %+v, %v", got, back, err)
		}
	}
	// A delta in the file is not trusted: it is before and after that count.
	var cc CounterChange
	if err := json.Unmarshal([]byte(`{"before":1,"after":3,"delta":99,"present":true}`), &cc); err != nil || *cc.Delta() != 2 {
		t.Fatalf("delta %v, %v", cc.Delta(), err)
	}
}

// TestCountersV1Window: a span written by kvbench before the record owned its schema was
// {before: snapshot, after: snapshot, delta}; only the delta is read.
func TestCountersV1Window(t *testing.T) {
	old := `{"before":{"taken_at":"2026-12-01T14:36:25Z","counters":{"load_bytes":{"value":0,"present":true}}},
	"after":{"counters":{"load_bytes":{"value":8192,"present":true}}},
	"delta":{"before_at":"2026-12-01T14:36:25Z","counters":{"load_bytes":{"before":0,"after":8192,"delta":8192,"present":true,"decreased":false,"source":"vllm:kv_offload_load_bytes_total"}},"valid":true,"isolation":"clean: x"}}`
	var c Counters
	if err := json.Unmarshal([]byte(old), &c); err != nil {
		t.Fatal(err)
	}
	if !c.Valid || c.Isolation != "clean: x" || *c.Delta(Counter("load_bytes")) != 8192 || c.Values[Counter("load_bytes")].Source != "vllm:kv_offload_load_bytes_total" {
		t.Fatalf("%+v", c)
	}
	// And the current shape reads as written.
	data, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	var back Counters
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip: %s -> %+v, %v", data, back, err)
	}
}
