package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
)

// DefaultCoverageInterval is how often an agent writes the span it
// covered (recorder_coverage): the most of a node's record a SIGKILL can
// leave unvouched for. At 5,000 nodes it is 167 small rows a second.
const DefaultCoverageInterval = 30 * time.Second

// MaxCoverageInterval bounds Config.CoverageInterval: the analysis reads
// the spans around a window this far on either side (twice it).
const MaxCoverageInterval = 5 * time.Minute

// coverage writes the node's recorder_coverage spans: one when the agent
// is first ready, one every interval while it runs, one when it stops.
// Each span says what was captured over it and what was lost (the store
// buffer's drops, the kernel ring buffer's losses), so that the analysis
// can tell a time the node recorded nothing from a time nothing happened.
// The spans go through the same store buffer as the events they vouch
// for, behind them (a full buffer takes them still: Writer.AddOver): a
// span stored means the events before it were stored, or dropped and
// counted in it or an earlier span.
type coverage struct {
	a        *Agent
	interval time.Duration
	session  string

	mu      sync.Mutex
	last    time.Time // the end of the last span written; zero before the first
	dropped int64     // the writer's drops when it was written
	lost    uint64    // the kernel's losses when it was written
}

func newCoverage(a *Agent, interval time.Duration) *coverage {
	var b [8]byte
	rand.Read(b[:])
	return &coverage{a: a, interval: interval, session: hex.EncodeToString(b[:])}
}

// run writes the first span once the agent is ready, then one every
// interval until ctx ends. The last span is stop's.
func (c *coverage) run(ctx context.Context) {
	t := time.NewTicker(min(c.interval, time.Second))
	defer t.Stop()
	for c.a.Ready() != nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	c.write(time.Now(), event.CoverStarted)
	t.Reset(c.interval)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.write(now, event.CoverRunning)
		}
	}
}

// stop writes the last span, to at: when the agent began to shut down.
// Called after the producers stopped, before the store buffer's flush.
func (c *coverage) stop(at time.Time) {
	c.mu.Lock()
	started := !c.last.IsZero()
	c.mu.Unlock()
	if started {
		c.write(at, event.CoverStopped)
	}
}

func (c *coverage) write(now time.Time, reason string) {
	a := c.a
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(c.last) {
		now = c.last
	}
	var span time.Duration
	if !c.last.IsZero() {
		span = now.Sub(c.last)
	}
	// A tick this late means the process did not run (stopped, frozen):
	// what it saw meanwhile is not vouched for.
	if reason == event.CoverRunning && span > 2*c.interval {
		reason, span = event.CoverResumed, 0
	}
	dropped := a.writer.Stats().Dropped
	var lost uint64
	kernel := "off"
	a.kernelMu.Lock()
	k := a.kernel
	a.kernelMu.Unlock()
	if k != nil && a.probes.Load() {
		kernel = "on"
		if s, err := k.Stats(); err == nil {
			lost = s.Dropped
		}
	}
	dataplane := "off"
	if m := a.proxyMode.Load(); a.dp != nil && m != nil && m.Recorded {
		dataplane = "on"
	}
	e := event.Event{
		Time:     now.UnixNano(),
		Kind:     event.RecorderCoverage,
		Node:     a.cfg.Node,
		Source:   event.SourceAgent,
		Duration: int64(span),
		Reason:   reason,
		Attrs: map[string]string{
			event.AttrSession:        c.session,
			event.AttrInterval:       c.interval.String(),
			event.AttrCoverKernel:    kernel,
			event.AttrCoverSlices:    strconv.FormatBool(a.w.Stats().Leader),
			event.AttrCoverDataplane: dataplane,
			event.AttrDropped:        strconv.FormatInt(dropped-c.dropped, 10),
			event.AttrKernelLost:     strconv.FormatUint(lost-min(lost, c.lost), 10),
		},
	}
	if c.last.IsZero() {
		// The first span counts only what is lost from now on.
		e.Attrs[event.AttrDropped], e.Attrs[event.AttrKernelLost] = "0", "0"
	}
	c.last, c.dropped, c.lost = now, dropped, lost
	e.Seal()
	a.m.Observe(&e)
	a.writer.AddOver(e)
	if a.cfg.Sink != nil {
		a.cfg.Sink(e)
	}
}
