// Package redact removes credentials from URLs and from texts that quote URLs, so that
// records, step files, console lines and error messages never hold them. A URL's user info
// becomes REDACTED (http://REDACTED@host/v1), and so does the value of every query parameter
// whose name looks secret (/metrics?token=REDACTED). (*url.URL).Redacted hides only the
// password, and Go's net/http errors quote request URLs with their query.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Placeholder replaces every secret.
const Placeholder = "REDACTED"

// secretParams mark a query parameter whose value is likely a credential.
var secretParams = []string{"key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "signature", "sig", "session"}

// SecretParam reports whether a query parameter's name says it holds a credential.
func SecretParam(name string) bool {
	lower := strings.ToLower(name)
	for _, w := range secretParams {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// URL returns raw with its user info and secret query values replaced by REDACTED. Text it
// cannot parse as a URL is redacted as Text.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" && u.User == nil {
		return textURLs(raw, false)
	}
	changed := false
	if u.User != nil {
		u.User = url.User(Placeholder)
		changed = true
	}
	if q, ok := query(u.RawQuery); ok {
		u.RawQuery, changed = q, true
	}
	if !changed {
		return raw // keep the spelling as given
	}
	return u.String()
}

// query redacts the secret values of a raw query, keeping its order and spelling; ok is
// false when nothing needed redacting.
func query(raw string) (string, bool) {
	if raw == "" {
		return raw, false
	}
	parts := strings.Split(raw, "&")
	changed := false
	for i, p := range parts {
		name, value, hasValue := strings.Cut(p, "=")
		if unescaped, err := url.QueryUnescape(name); err == nil {
			name = unescaped
		}
		if hasValue && value != Placeholder && SecretParam(name) {
			parts[i] = p[:strings.IndexByte(p, '=')+1] + Placeholder
			changed = true
		}
	}
	return strings.Join(parts, "&"), changed
}

// urlPattern finds URLs inside a text; quotes and angle brackets end one, as in Go's
// `Get "http://...": ...` errors.
var urlPattern = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// Text redacts every URL in s.
func Text(s string) string { return textURLs(s, true) }

func textURLs(s string, parse bool) string {
	return urlPattern.ReplaceAllStringFunc(s, func(m string) string {
		if parse {
			if r := URL(m); r != m {
				return r
			}
		}
		return userInfo(m)
	})
}

// userInfo redacts by hand a URL that url.Parse refuses (a password with a '/' or a '#',
// say): everything before the last '@' ahead of the query, and the secret query values.
// It may redact more than the user info, never less.
func userInfo(m string) string {
	scheme, rest, ok := strings.Cut(m, "://")
	if !ok {
		return m
	}
	head, q, hasQuery := strings.Cut(rest, "?")
	if at := strings.LastIndexByte(head, '@'); at >= 0 {
		head = Placeholder + head[at:]
	}
	if hasQuery {
		q, _ = query(q)
		head += "?" + q
	}
	return scheme + "://" + head
}

// Error returns err with a redacted message; errors.Is and errors.As still see err.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := Text(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
