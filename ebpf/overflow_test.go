package ebpf

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// TestRingBufferOverflow overflows a one-page ring buffer (about 30
// records) and checks the accounting: every record the kernel produced was
// either delivered or counted as dropped, exactly.
func TestRingBufferOverflow(t *testing.T) {
	p := newTestPod(t, false)
	c := openCollector(t, Config{
		RingBufferSize: os.Getpagesize(),
		Signals:        []syscall.Signal{syscall.SIGUSR1},
	})
	if err := c.Track(p.PodCgroupID); err != nil {
		t.Fatal(err)
	}
	const burst1, burst2 = 2000, 20000

	// A burst while nobody reads: the ring fills and the rest is dropped.
	p.start(t, "signal-self", "DRAINSCOPE_HELPER_N="+strconv.Itoa(burst1)).Wait(t)

	// Then a slow reader (about 20 µs per event) under a larger burst.
	var delivered, signals atomic.Uint64
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(e *event.Event) {
			delivered.Add(1)
			if e.Kind == event.Signal {
				signals.Add(1)
			}
			for t0 := time.Now(); time.Since(t0) < 20*time.Microsecond; {
			}
		})
	}()
	p.start(t, "signal-self", "DRAINSCOPE_HELPER_N="+strconv.Itoa(burst2)).Wait(t)

	// Drain: wait until the counts balance and stay balanced.
	var s Stats
	deadline := time.Now().Add(20 * time.Second)
	for stable := 0; stable < 5; {
		var err error
		if s, err = c.Stats(); err != nil {
			t.Fatal(err)
		}
		if s.Produced == s.Delivered+s.DecodeErrors+s.Dropped {
			stable++
		} else {
			stable = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts never balanced: produced %d, delivered %d, decode errors %d, dropped %d",
				s.Produced, s.Delivered, s.DecodeErrors, s.Dropped)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	sig := s.ByKind[event.Signal]
	exit := s.ByKind[event.ProcessExit]
	t.Logf("produced %d = delivered %d + dropped %d (signals: produced %d, dropped %d; exits: produced %d, dropped %d)",
		s.Produced, s.Delivered, s.Dropped, sig.Produced, sig.Dropped, exit.Produced, exit.Dropped)
	if s.Produced != s.Delivered+s.Dropped || s.DecodeErrors != 0 {
		t.Errorf("produced %d != delivered %d + dropped %d (decode errors %d)", s.Produced, s.Delivered, s.Dropped, s.DecodeErrors)
	}
	if sig.Produced != burst1+burst2 || exit.Produced != 2 {
		t.Errorf("kernel counted %d signals and %d exits, want %d and 2", sig.Produced, exit.Produced, burst1+burst2)
	}
	if s.Dropped == 0 || sig.Dropped < burst1/2 {
		t.Errorf("ring buffer did not overflow: %d dropped", s.Dropped)
	}
	if delivered.Load() != s.Delivered {
		t.Errorf("emit saw %d events, Stats says %d delivered", delivered.Load(), s.Delivered)
	}
	if signals.Load() != sig.Produced-sig.Dropped {
		t.Errorf("emit saw %d signals, kernel submitted %d", signals.Load(), sig.Produced-sig.Dropped)
	}
}
