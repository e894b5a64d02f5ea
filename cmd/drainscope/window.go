package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/internal/duration"
)

// dayFlag is a duration flag that also takes days (30d); 0 lifts the bound
// it sets.
type dayFlag struct{ d time.Duration }

func (f *dayFlag) String() string {
	if f == nil {
		return ""
	}
	if f.d%duration.Day == 0 {
		return fmt.Sprintf("%dd", f.d/duration.Day)
	}
	return f.d.String()
}

func (f *dayFlag) Set(s string) error {
	d, err := duration.Parse(s)
	if err != nil {
		return errors.New("want a duration such as 720h or 30d (0 lifts the bound)")
	}
	f.d = d
	return nil
}

// windowFlags are --max-past and --max-ahead: the times ingest accepts,
// around the clock.
type windowFlags struct{ past, ahead dayFlag }

func registerWindow(fs *flag.FlagSet) *windowFlags {
	w := &windowFlags{past: dayFlag{ingest.DefaultMaxPast}, ahead: dayFlag{ingest.DefaultMaxAhead}}
	fs.Var(&w.past, "max-past", "refuse client failures older than `AGE` (a duration or days: 720h, 30d); 0 accepts any age")
	fs.Var(&w.ahead, "max-ahead", "refuse client failures more than `AGE` ahead of this machine's clock (24h, 1d); 0 accepts any")
	return w
}

// window is the ingest.TimeWindow the flags say; 0 lifts a bound.
func (w *windowFlags) window() ingest.TimeWindow {
	lift := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	return ingest.TimeWindow{Past: lift(w.past.d), Ahead: lift(w.ahead.d)}
}
