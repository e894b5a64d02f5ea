package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
)

// ScanAhead hands fn what Scan does, in the same order, from both real
// stores: more events than the batches in flight, so buffers are reused.
func TestContractScanAhead(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		in := eventgen.Rollout(5*aheadBatch*(aheadDepth+2)+7, day0, 3, "ahead")
		in[5].Attrs = map[string]string{"k": "v"}
		in[5].Seal()
		if err := s.Append(ctx, in); err != nil {
			t.Fatal(err)
		}
		want, err := Events(ctx, s, Query{})
		if err != nil {
			t.Fatal(err)
		}
		var got []event.Event
		if err := ScanAhead(ctx, s, Query{}, func(e *event.Event) error {
			got = append(got, e.Clone())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(got) != len(in) {
			t.Fatalf("ScanAhead read %d events, Scan %d, stored %d", len(got), len(want), len(in))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("event %d differs:\n ahead %+v\n scan  %+v", i, got[i], want[i])
			}
		}
	})
}

// countingStore scans n numbered events, failing after failAt of them when
// failAt ≥ 0, and records whether its Scan has returned.
type countingStore struct {
	Store
	n, failAt int
	returned  chan struct{}
}

var errRead = errors.New("read failed")

func (c *countingStore) Scan(ctx context.Context, _ Query, fn func(*event.Event) error) error {
	defer close(c.returned)
	var e event.Event
	for i := range c.n {
		if i == c.failAt {
			return errRead
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		e.Time = int64(i)
		if err := fn(&e); err != nil {
			return err
		}
	}
	return nil
}

func TestScanAheadErrors(t *testing.T) {
	const n = 10 * aheadBatch
	t.Run("fn fails", func(t *testing.T) {
		st := &countingStore{n: n, failAt: -1, returned: make(chan struct{})}
		stop := errors.New("stop")
		seen := 0
		err := ScanAhead(context.Background(), st, Query{}, func(e *event.Event) error {
			if e.Time != int64(seen) {
				return fmt.Errorf("event %d arrived as number %d", e.Time, seen)
			}
			if seen++; seen == aheadBatch+3 {
				return stop
			}
			return nil
		})
		if err != stop {
			t.Fatalf("ScanAhead = %v, want fn's error", err)
		}
		select {
		case <-st.returned:
		default:
			t.Fatal("ScanAhead returned while the store's Scan was still running")
		}
	})
	t.Run("read fails", func(t *testing.T) {
		st := &countingStore{n: n, failAt: 2*aheadBatch + 5, returned: make(chan struct{})}
		seen := 0
		err := ScanAhead(context.Background(), st, Query{}, func(e *event.Event) error {
			seen++
			return nil
		})
		if !errors.Is(err, errRead) {
			t.Fatalf("ScanAhead = %v, want the read's error", err)
		}
		if seen != st.failAt {
			t.Fatalf("fn saw %d events before the read failed, want all %d read", seen, st.failAt)
		}
	})
	t.Run("all", func(t *testing.T) {
		st := &countingStore{n: n + 1, failAt: -1, returned: make(chan struct{})}
		seen := 0
		if err := ScanAhead(context.Background(), st, Query{}, func(e *event.Event) error {
			seen++
			return nil
		}); err != nil || seen != n+1 {
			t.Fatalf("ScanAhead = %v after %d events, want nil after %d", err, seen, n+1)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		st := &countingStore{n: n, failAt: -1, returned: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		seen := 0
		err := ScanAhead(ctx, st, Query{}, func(e *event.Event) error {
			if seen++; seen == 3 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ScanAhead = %v after cancel, want context.Canceled", err)
		}
		if seen >= n {
			t.Fatalf("fn saw all %d events after cancel", seen)
		}
	})
}
