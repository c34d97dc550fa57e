package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestChunkKeysLowercase holds the fast decoder's key tables to what keyMatch assumes:
// lowercase ASCII, so that a key without capitals folds onto one only by equality.
func TestChunkKeysLowercase(t *testing.T) {
	for _, names := range [][]string{topLevelKeys, choiceKeys, deltaKeys} {
		for _, name := range names {
			if name != strings.ToLower(name) || !isASCII(name) {
				t.Errorf("key %q is not lowercase ASCII", name)
			}
		}
	}
	for _, c := range []struct {
		key   string
		index int
		ok    bool
	}{
		{"choices", 0, true}, {"id", -1, true}, {"Choices", -1, false}, {"CHOICES", -1, false},
		{"Id", -1, true}, {"choiſes", -1, false}, {"model", 5, true},
	} {
		if index, ok := keyMatch([]byte(c.key), topLevelKeys); index != c.index || ok != c.ok {
			t.Errorf("keyMatch(%q) = %d, %v; want %d, %v", c.key, index, ok, c.index, c.ok)
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func FuzzDecodeChunk(f *testing.F) {
	seeds := []string{
		roleChunk(),
		deltaChunk("reasoning", "th\u00e9"),
		deltaChunk("reasoning_content", "日本語"),
		deltaChunk("content", "\U0001F600 emoji"),
		finishChunk("length"),
		usageChunk(10, 2, `,"prompt_tokens_details":{"cached_tokens":0}`),
		usageChunk(10, 2, `,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":1}`),
		`{"choices":null,"usage":null}`,
		`{"choices":[{}]}`,
		`{"choices":[{"delta":null,"finish_reason":null}]}`,
		`{"choices":[{"delta":{"content":null,"reasoning":null}}]}`,
		`{"choices":[]}`,
		`{}`,
		`null`,
		`[]`,
		`{"choices":[{"delta":{"content":"\ud800"}}]}`,
		`{"choices":[{"delta":{"content":"a","reasoning":"b","reasoning_content":"c"}},{"delta":{"content":"d"}}]}`,
		`{"object":"error","message":"boom"}`,
		textChunk("tok", ""),
		textChunk("", "length"),
		`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":null,"text":"a"}]}`,
		`{"choices":[{"Text":"a","delta":{"content":"b"}}]}`,
		`{"usage":{"prompt_tokens":-1,"completion_tokens":1e3}}`,
		`{"choices":[{"delta":{"content":1}}]}`,
		`{"choices":[{"delta":{"content":"x"`,
		`{"choices":[{"delta":{"Content":"x"}}]}`,
		`{"choices":[{"delta":{"content":"a","content":"b"}}]}`,
		`{"choices":[{"delta":{"content":"a\n\t\"q\" \u00e9 \ud83d\ude00"}}]}`,
		`{"choiceſ":[]}`,
		`{"choices":[null,{"finish_reason":"stop","index":0}]} `,
		`{"id":"x","created":-1.5e+3,"extra":[true,false,null,{"a":[]}],"choices":[]}`,
		`{"choices":[{"delta":{"content":"ÿ"}}]}`,
		`{"choices":[]}x`,
		`{"choices":[{"delta":{"content":"a b"}}]}`,
		`{"choices":[{"finish_reason":01}]}`,
		`{"choices":[{"delta":{"content":" the"},"token_ids":[279]}]}`,
		`{"choices":[{"delta":{},"token_ids":[1, 22 ,333],"finish_reason":"length"}]}`,
		`{"choices":[{"token_ids":[]}]}`,
		`{"choices":[{"token_ids":null}]}`,
		`{"choices":[{"token_ids":[-1]}]}`,
		`{"choices":[{"token_ids":[1.5]}]}`,
		`{"choices":[{"token_ids":[1e3]}]}`,
		`{"choices":[{"token_ids":[99999999999999999999]}]}`,
		`{"choices":[{"token_ids":[0,01]}]}`,
		`{"choices":[{"token_ids":[1],"token_ids":[2]}]}`,
		`{"choices":[{"token_ids":["1"]}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		slow, slowErr := slowDecodeChunk(data)
		if fast, ok := fastDecodeChunk(data); ok {
			if slowErr != nil {
				t.Fatalf("fast path accepted %q, encoding/json says %v", data, slowErr)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast path decoded %q as %+v, encoding/json as %+v", data, fast, slow)
			}
		}
		chunk, err := decodeChunk(data)
		if (err == nil) != (slowErr == nil) {
			t.Fatalf("decodeChunk error %v, encoding/json error %v", err, slowErr)
		}
		if err != nil {
			return
		}
		_ = slow
		if !json.Valid(data) {
			t.Fatalf("decoded invalid JSON %q", data)
		}
		var res Result
		acc := streamAccumulator{res: &res, progress: func(Progress) {}, start: time.Now(), interval: time.Millisecond}
		acc.observe(chunk, time.Now(), 1)
		acc.finish()

		var wantContent, wantReasoning int
		for _, c := range chunk.Choices {
			wantContent += len(c.Delta.Content) + len(c.Text)
			wantReasoning += len(c.Delta.Reasoning) + len(c.Delta.ReasoningContent)
		}
		if chunk.Object == "error" {
			wantContent, wantReasoning = 0, 0
		}
		if res.ContentBytes != wantContent || res.ReasoningBytes != wantReasoning {
			t.Errorf("content/reasoning bytes %d/%d, want %d/%d", res.ContentBytes, res.ReasoningBytes, wantContent, wantReasoning)
		}
		if res.VisibleAnswer != (wantContent > 0) || res.ReasoningOnly != (wantContent == 0 && wantReasoning > 0) {
			t.Errorf("visible %v reasoning_only %v for content %d reasoning %d", res.VisibleAnswer, res.ReasoningOnly, wantContent, wantReasoning)
		}
		if len(res.Answer) > AnswerCapBytes || !strings.HasPrefix(joinedContent(chunk), res.Answer) {
			t.Errorf("answer %q is not a capped prefix of the content", res.Answer)
		}
		if utf8.ValidString(joinedContent(chunk)) && !utf8.ValidString(res.Answer) {
			t.Errorf("answer cut inside a rune: %q", res.Answer)
		}
		if _, err := json.Marshal(res); err != nil {
			t.Errorf("result does not encode: %v", err)
		}
	})
}

func joinedContent(chunk streamChunk) string {
	if chunk.Object == "error" {
		return ""
	}
	var b strings.Builder
	for _, c := range chunk.Choices {
		b.WriteString(c.Delta.Content)
		b.WriteString(c.Text)
	}
	return b.String()
}

// The fast path must take vLLM's ordinary token chunks, or the per-token cost regresses.
func TestFastDecodeTakesTokenChunks(t *testing.T) {
	for _, line := range []string{roleChunk(), deltaChunk("content", "a \"b\"\n"), deltaChunk("reasoning", "ü"),
		deltaChunk("reasoning_content", "x"), finishChunk("stop"), textChunk(" the", ""), textChunk("", "length"),
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":null}`} {
		fast, ok := fastDecodeChunk([]byte(line))
		slow, err := slowDecodeChunk([]byte(line))
		if !ok || err != nil || !reflect.DeepEqual(fast, slow) {
			t.Errorf("fast path on %s: ok %v, %+v vs encoding/json %+v (%v)", line, ok, fast, slow, err)
		}
	}
}

// FuzzEventReader holds the SSE reader, whatever sizes the body's reads come in, to the
// payloads a plain split of the whole body into lines gives.
func FuzzEventReader(f *testing.F) {
	for _, seed := range []string{
		"data: {}\n\ndata: [DONE]\n\n",
		": ping\r\nevent: message\r\nid: 7\r\ndata:{}\r\n\r\n",
		"data: a\ndata:b\n\ndata:  \tc \n",
		"data: unterminated",
		"\n\n\r\n data: x\n",
		"data: " + strings.Repeat("y", 300) + "\ndata: z",
	} {
		f.Add([]byte(seed), uint8(1))
		f.Add([]byte(seed), uint8(7))
	}
	f.Fuzz(func(t *testing.T, body []byte, size uint8) {
		var want []string
		lines := strings.Split(string(body), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		for _, line := range lines {
			line = strings.TrimSpace(line)
			if p, ok := strings.CutPrefix(line, "data:"); ok {
				want = append(want, strings.TrimLeft(p, " \t"))
			}
		}
		r := newEventReader(piecesReader{bytes.NewReader(body), int(size) + 1}, nil)
		defer r.release()
		var got []string
		for range len(body) + 2 { // a read per byte at most, and the end
			_, err := r.read(nil)
			for p, ok := r.next(); ok; p, ok = r.next() {
				got = append(got, string(p))
			}
			if err != nil {
				break
			}
		}
		if !r.eof || !slices.Equal(got, want) {
			t.Fatalf("reads of %d bytes: payloads %q (end seen: %v), want %q", size+1, got, r.eof, want)
		}
		if r.examined > int64(len(body))+1 {
			t.Errorf("searched %d bytes of a %d-byte body", r.examined, len(body))
		}
	})
}
