package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Sentinels wrapped by the errors of the endpoint calls, so a CLI can map them to exit
// codes with errors.Is.
var (
	// ErrUnreachable: no HTTP response at all (connection refused, DNS, reset).
	ErrUnreachable = errors.New("server unreachable")
	// ErrHTTPStatus: the server answered with a non-2xx status; see *StatusError.
	ErrHTTPStatus = errors.New("unexpected http status")
	// ErrTimeout: the server took a connection but no complete answer came in time.
	ErrTimeout = errors.New("server did not answer in time")
	// ErrBadResponse: a 2xx answer that is not the expected JSON (an HTML page, say).
	ErrBadResponse = errors.New("unexpected response")
)

// StatusError is a non-2xx answer from an endpoint call. It matches ErrHTTPStatus.
type StatusError struct {
	Method string
	// URL is redacted: no user info, no secret query values.
	URL        string
	StatusCode int
	// Detail is the server's error message, or a redacted one-line snippet of the body.
	Detail string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %v: %d %s: %s", strings.ToLower(e.Method), e.URL, ErrHTTPStatus,
		e.StatusCode, http.StatusText(e.StatusCode), e.Detail)
}

// Is makes errors.Is(err, ErrHTTPStatus) hold.
func (e *StatusError) Is(target error) bool { return target == ErrHTTPStatus }

// Redact replaces every occurrence of secret in s. An empty secret changes nothing.
func Redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[REDACTED]")
}

// snippetBytes bounds the body text quoted in an error.
const snippetBytes = 200

// oneLine collapses whitespace runs, newlines included, into single spaces and caps the
// text, so error strings stay on one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= snippetBytes {
		return s
	}
	cut := snippetBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func snippet(b []byte) string {
	if len(b) > 4*snippetBytes {
		b = b[:4*snippetBytes]
	}
	return oneLine(string(b))
}

// errorBodyMessage extracts the message of an OpenAI-style error body, nested
// ({"error":{"message":...}}) or flat as older vLLM sends it ({"object":"error",
// "message":...}); otherwise it describes the body.
func errorBodyMessage(body []byte) string {
	var nested struct {
		Error *struct {
			Message json.RawMessage `json:"message"`
		} `json:"error"`
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(body, &nested) == nil {
		raw := nested.Message
		if nested.Error != nil {
			raw = nested.Error.Message
		}
		var msg string
		if json.Unmarshal(raw, &msg) == nil && msg != "" {
			return oneLine(msg)
		}
		if len(raw) > 0 {
			return snippet(raw)
		}
	}
	return describeBody("", body)
}

// describeBody says what came back, for errors about unexpected answers.
func describeBody(contentType string, body []byte) string {
	trimmed := strings.TrimSpace(string(body[:min(len(body), 4*snippetBytes)]))
	switch {
	case len(trimmed) == 0:
		return "an empty body"
	case strings.Contains(contentType, "html") || strings.HasPrefix(trimmed, "<"):
		return "an HTML page: " + oneLine(trimmed)
	case contentType != "":
		return contentType + " body: " + oneLine(trimmed)
	default:
		return "body: " + oneLine(trimmed)
	}
}
