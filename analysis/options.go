package analysis

import "time"

// Options tune the alignment windows. The zero value means the defaults,
// which suit a LAN or a single machine; DefaultOptions documents them.
type Options struct {
	// Lookahead is how long after a failure the aligner waits for evidence
	// before it decides: an exit recorded a few milliseconds after the
	// client saw EOF, a node that observed the endpoint removal late, kernel
	// events stamped on another clock.
	Lookahead time.Duration
	// KernelWindow is how long before a failure a kernel event on the
	// client's connection (same client address and port) still counts as
	// evidence about it: a keep-alive connection closed at exit fails only
	// when the client next uses it.
	KernelWindow time.Duration
	// ExitBefore and ExitAfter bound how far a failure may precede or
	// follow a process exit to be attributed to it by timing alone.
	ExitBefore, ExitAfter time.Duration
	// ExitSlack: a connection the process closed itself this shortly
	// before its exit counts as closed at exit (runtimes close sockets in
	// their own teardown, Python 13 ms before exit).
	ExitSlack time.Duration
	// InFlightMin: a request that started at least this long before the
	// exit was in progress when the process ended (an in-flight cut); a
	// shorter one raced the close of an idle keep-alive connection.
	InFlightMin time.Duration
	// ProxyLag: a refused connection this shortly after the last node saw
	// the endpoint leave rotation is still an endpoint race (proxies
	// program their rules after the API change is observed).
	ProxyLag time.Duration
	// DataplaneSlack: where a node's proxy recorded its own removal of
	// the endpoint (dataplane events), a refused connection this shortly
	// after it may still have been routed before it (the removal is
	// stamped when the agent read the commit). Nodes seen only through
	// the watch get their measured lag, when one is, instead of ProxyLag.
	DataplaneSlack time.Duration
	// InUseWithin: a keep-alive connection the exit closed within this
	// long of its last packet was in use, and its client most likely
	// failed on its next request (an inferred failure the report calls
	// likely, not proven). Needs the idle time the kernel capture records.
	InUseWithin time.Duration
	// Retain is how long a pod that ended stays in memory after its last
	// event, so late failures can still be attributed to it.
	Retain time.Duration
	// Lead is how much history before the analysed window Analyze reads
	// so that pods deleted before it, and endpoint states, are known.
	Lead time.Duration
	// MaxFailures bounds the failures kept in Result.Failures (counts are
	// always exact); 0 means 10,000, negative means all.
	MaxFailures int
	// Examples is the number of example failures kept per cause.
	Examples int
	// Rules replaces the cause table; nil means Rules.
	Rules []Rule
	// NoEventViews leaves Result.Timelines' Events out, for a reader
	// that prints none of them (the text and markdown reports): building
	// the view of each event of each timeline was a sixth of a
	// 5,000-node report's CPU after its read.
	NoEventViews bool
}

// DefaultOptions returns the defaults the zero Options stand for.
func DefaultOptions() Options {
	return Options{
		Lookahead:      2 * time.Second,
		KernelWindow:   10 * time.Second,
		ExitBefore:     250 * time.Millisecond,
		ExitAfter:      time.Second,
		ExitSlack:      100 * time.Millisecond,
		InFlightMin:    50 * time.Millisecond,
		ProxyLag:       time.Second,
		DataplaneSlack: 20 * time.Millisecond,
		InUseWithin:    time.Second,
		Retain:         2 * time.Minute,
		Lead:           15 * time.Minute,
		MaxFailures:    10000,
		Examples:       3,
	}
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	d := DefaultOptions()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&o.Lookahead, d.Lookahead)
	set(&o.KernelWindow, d.KernelWindow)
	set(&o.ExitBefore, d.ExitBefore)
	set(&o.ExitAfter, d.ExitAfter)
	set(&o.ExitSlack, d.ExitSlack)
	set(&o.InFlightMin, d.InFlightMin)
	set(&o.ProxyLag, d.ProxyLag)
	set(&o.DataplaneSlack, d.DataplaneSlack)
	set(&o.InUseWithin, d.InUseWithin)
	set(&o.Retain, d.Retain)
	set(&o.Lead, d.Lead)
	if o.MaxFailures == 0 {
		o.MaxFailures = d.MaxFailures
	}
	if o.Examples == 0 {
		o.Examples = d.Examples
	}
	if o.Rules == nil {
		o.Rules = Rules
	}
	return o
}
