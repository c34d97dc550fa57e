package redact

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrRedirect marks a request that a server answered with a redirect, which kvbench does not
// follow: a prompt sent to another host, or counters read from another server, would pass
// for the target's.
var ErrRedirect = errors.New("redirect refused")

// RefuseRedirect is an http.Client CheckRedirect that follows no redirect; its error names
// the URL asked for and the one the server pointed to, without their credentials.
func RefuseRedirect(req *http.Request, via []*http.Request) error {
	from := req.URL.String()
	if len(via) > 0 {
		from = via[0].URL.String()
	}
	return fmt.Errorf("%w: %s redirects to %s; kvbench does not follow redirects, name the final URL", ErrRedirect, URL(from), URL(req.URL.String()))
}

// NoRedirects returns a copy of hc (nil: http.DefaultClient) that refuses redirects.
func NoRedirects(hc *http.Client) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	c := *hc
	c.CheckRedirect = RefuseRedirect
	return &c
}
