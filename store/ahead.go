package store

import (
	"context"

	"github.com/drainscope/drainscope/event"
)

// aheadBatch is how many events ScanAhead hands over at a time, and
// aheadDepth how many batches the reader may run ahead of the consumer: a
// channel send per event would cost more than the decoding it overlaps.
const (
	aheadBatch = 512
	aheadDepth = 4
)

// ScanAhead is s.Scan with the reading on a goroutine of its own, up to
// aheadDepth batches ahead of fn. Reading a store is mostly decoding rows
// (Postgres's wire format, SQLite's detail column), which then overlaps
// with whatever fn does with each event: the analysis of a busy cluster
// spends about as long in each. fn sees the same events in the same order
// as with s.Scan, on the caller's goroutine, and must not keep the pointer
// (the batches are reused). s.Scan's own callback work, such as a wrapping
// Store's, runs on the reading goroutine.
//
// The first error ends the scan: fn's, returned as is once the reader has
// stopped, or the read's, returned after fn has seen every event read
// before it.
func ScanAhead(ctx context.Context, s Store, q Query, fn func(*event.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // also ends the reader if fn panics
	full := make(chan []event.Event, aheadDepth)
	free := make(chan []event.Event, aheadDepth+2)
	for range aheadDepth + 2 {
		free <- make([]event.Event, 0, aheadBatch)
	}
	var readErr error // written before full is closed
	go func() {
		defer close(full)
		b := <-free
		send := func() error {
			select {
			case full <- b:
				b = nil // the consumer's now: never sent twice
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case b = <-free:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := s.Scan(ctx, q, func(e *event.Event) error {
			if b = append(b, *e); len(b) == cap(b) {
				return send()
			}
			return nil
		})
		if len(b) > 0 { // what was read before the end, or before an error
			select {
			case full <- b:
			case <-ctx.Done():
			}
		}
		readErr = err
	}()
	stop := func(err error) error {
		cancel()
		for range full {
		}
		return err
	}
	for b := range full {
		if err := ctx.Err(); err != nil {
			return stop(err) // the caller's: its batches in flight are not wanted
		}
		for i := range b {
			if err := fn(&b[i]); err != nil {
				return stop(err)
			}
		}
		clear(b) // let the collector have what fn did not keep
		free <- b[:0]
	}
	return readErr
}
