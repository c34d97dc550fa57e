//go:build !linux

package client

import (
	"context"
	"net/http"
	"time"
)

// The event loop needs epoll; elsewhere every chat stream uses net/http.
type loopTarget struct{}

func newLoopTarget(string, http.Header) *loopTarget { return nil }

func (c *Client) streamOnLoop(ctx, reqCtx context.Context, cancelCause context.CancelCauseFunc, headers *time.Timer,
	acc *streamAccumulator, body []byte, progress func(Progress)) {
	c.streamNetHTTP(ctx, reqCtx, cancelCause, headers, acc, body, progress)
}
