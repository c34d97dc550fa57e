//go:build !linux

package client

import "context"

// epollTarget is where the epoll transport sends chat requests; only Linux has one.
type epollTarget struct{}

func newEpollTarget(chatURL, apiKey string) *epollTarget { return nil }

func (c *Client) streamEpoll(ctx, reqCtx context.Context, cancel context.CancelCauseFunc, body []byte,
	acc *streamAccumulator, progress func(Progress), where string) bool {
	return false
}
