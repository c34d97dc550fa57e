package export

import (
	"context"
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/events"
)

// Pusher is the sink that pushes a run to a Pushgateway when it ends, listed after the run
// directory's sink so that it pushes what is on disk (the run as 'kvbench push' would load
// it). A failed push does not stop the run (the records are its result): Err keeps it. A
// run that a signal stopped is refused, as 'kvbench push' refuses it, with a line on w.
type Pusher struct {
	ctx  context.Context
	opts PushOptions
	w    io.Writer
	err  error
}

var _ events.Sink = (*Pusher)(nil)

// NewPusher pushes with opts, bounded by ctx (a stop signal counts as an interrupted run);
// it says on w what it pushed or refused.
func NewPusher(ctx context.Context, opts PushOptions, w io.Writer) *Pusher {
	return &Pusher{ctx: ctx, opts: opts, w: w}
}

// Handle pushes on RunDone and ignores every other event.
func (p *Pusher) Handle(e events.Event) error {
	done, ok := e.(events.RunDone)
	if !ok {
		return nil
	}
	var r *runs.Run
	err := p.ctx.Err()
	if err != nil { // a stop signal: the run is interrupted, and kvbench push would refuse it
		err = &UnfinishedError{Dir: done.Dir, Status: record.StatusInterrupted, Reason: context.Cause(p.ctx).Error()}
	} else if r, err = runs.Load(done.Dir); err == nil {
		err = CheckPushable(r, false)
	}
	if err != nil {
		fmt.Fprintln(p.w, err) // refused: the run's own result says what it did
		return nil
	}
	if err := Push(p.ctx, r, p.opts); err != nil {
		p.err = fmt.Errorf("%v (the records are in %s; retry: kvbench push %s %s)", err, done.Dir, done.Dir, redact.URL(p.opts.URL))
		return nil
	}
	fmt.Fprintf(p.w, "pushed %s to %s\n", done.Dir, redact.URL(p.opts.URL))
	return nil
}

// Err is the push's failure, with where the records are and how to retry; nil when it
// pushed, refused an interrupted run, or the run never ended.
func (p *Pusher) Err() error { return p.err }
