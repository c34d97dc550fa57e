package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The ordinary token chunks of a stream take the template: if they stopped doing so, the
// per-token cost would quietly go back to a full scan.
func TestTemplateTakesTokenChunks(t *testing.T) {
	for _, stream := range [][]string{
		{textChunk(" the", ""), textChunk(" offload", ""), textChunk("", ""), textChunk("a \"quoted\"\n", "")},
		{deltaChunk("content", "x"), deltaChunk("content", " tok"), deltaChunk("content", "ü")},
		{deltaChunk("reasoning", "x"), deltaChunk("reasoning", "th\u00e9")},
		{deltaChunk("reasoning_content", "x"), deltaChunk("reasoning_content", "日本語")},
	} {
		var tpl chunkTemplate
		if _, err := decodeChunkReusing([]byte(stream[0]), nil, "m", &tpl); err != nil {
			t.Fatal(err)
		}
		for _, line := range stream[1:] {
			got, ok := tpl.decode([]byte(line), nil)
			want, err := slowDecodeChunk([]byte(line))
			if !ok || err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("template on %s: ok %v, %+v vs encoding/json %+v (%v)", line, ok, got, want, err)
			}
		}
	}
}

// A chunk that differs anywhere but in the generated string is not read from the template.
func TestTemplateRefusesOtherChanges(t *testing.T) {
	prev := `{"choices":[{"index":0,"text":"a","finish_reason":null}]}`
	for _, next := range []string{
		`{"choices":[{"index":1,"text":"a","finish_reason":null}]}`,            // before the string
		`{"choices":[{"index":0,"text":"a","finish_reason":"stop"}]}`,          // after it
		`{"choices":[{"index":0,"text":"a","text":"b","finish_reason":null}]}`, // a quote inside
		`{"choices":[{"index":0,"text":"a\","finish_reason":null}]}`,           // its closing quote escaped
		`{"choices":[{"index":0,"text":"\u0041","finish_reason":null}]}`,
		`{"choices":[{"index":0,"text":"` + "\x01" + `","finish_reason":null}]}`,
		`{"choices":[{"index":0,"text":"` + "\xff" + `","finish_reason":null}]}`,
		`{"choices":[{"index":0,"text":null,"finish_reason":null}]}`,
	} {
		var tpl chunkTemplate
		if _, err := decodeChunkReusing([]byte(prev), nil, "", &tpl); err != nil || len(tpl.raw) == 0 {
			t.Fatalf("no template from %s (%v)", prev, err)
		}
		if got, ok := tpl.decode([]byte(next), nil); ok {
			t.Errorf("template decoded %s as %+v", next, got)
		}
	}
	// No template from a chunk with two generated strings or two choices.
	for _, line := range []string{
		`{"choices":[{"text":"a","delta":{"content":"b"}}]}`,
		`{"choices":[{"text":"a"},{"text":"b"}]}`,
	} {
		var tpl chunkTemplate
		if _, err := decodeChunkReusing([]byte(line), nil, "", &tpl); err != nil || len(tpl.raw) != 0 {
			t.Errorf("template from %s (%v)", line, err)
		}
	}
}

// FuzzChunkTemplate holds a chunk decoded from a template, whatever chunk the template came
// from, to encoding/json's decoding of the same bytes.
func FuzzChunkTemplate(f *testing.F) {
	for _, pair := range [][2]string{
		{textChunk("a", ""), textChunk("bb", "")},
		{textChunk("a", ""), textChunk("a", "length")},
		{deltaChunk("content", "x"), deltaChunk("content", "y\"z\\")},
		{deltaChunk("content", "x"), deltaChunk("reasoning", "x")},
		{roleChunk(), deltaChunk("content", "x")},
		{`{"choices":[{"text":"a"}]}`, `{"choices":[{"text":"a","text":"b"}]}`},
		{`{"choices":[{"text":"a"}]}`, `{"choices":[{"text":"a\"}]}`},
		{`{"choices":[{"text":"a"}]} `, `{"choices":[{"text":"\ud800"}]} `},
		{`{"choices":[{"delta":{"content":"a"}}]}`, `{"choices":[{"delta":{"content":"é\t"}}]}`},
	} {
		f.Add([]byte(pair[0]), []byte(pair[1]))
	}
	f.Fuzz(func(t *testing.T, prev, next []byte) {
		var tpl chunkTemplate
		if _, err := decodeChunkReusing(prev, nil, "m", &tpl); err != nil {
			return
		}
		got, ok := tpl.decode(next, nil)
		if !ok {
			return
		}
		want, err := slowDecodeChunk(next)
		if err != nil || !json.Valid(next) {
			t.Fatalf("template from %q accepted %q, encoding/json says %v", prev, next, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("template from %q decoded %q as %+v, encoding/json as %+v", prev, next, got, want)
		}
	})
}
