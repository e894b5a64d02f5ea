package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/testenv"
)

// TestWriterSQLiteDiskFull: the embedded store on a real file system
// (a 32 MiB tmpfs) that fills up while events arrive. The writes fail,
// the writer holds the events and retries, nothing already stored is
// lost, and once space is freed every event held is stored, once.
func TestWriterSQLiteDiskFull(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=32m"); err != nil {
		testenv.Unavailable(t, "mounting a tmpfs (needs CAP_SYS_ADMIN): "+err.Error())
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	ctx := context.Background()
	s, err := OpenSQLite(ctx, filepath.Join(dir, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs := eventgen.Rollout(12_000, day0, 44, "checkout")
	if err := s.Append(ctx, evs[:2000]); err != nil {
		t.Fatal(err)
	}

	// Fill the file system.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<16)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	w := NewWriter(s, WriterOptions{Batch: 1000, Interval: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	w.Add(evs[2000:]...)
	deadline := time.Now().Add(time.Minute)
	for w.Stats().Failures < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	full := w.Stats()
	t.Logf("file system full: %+v", full)
	if full.Failures < 3 || full.Pending == 0 || full.Dropped != 0 || full.Rejected != 0 {
		t.Fatalf("with the disk full: %+v; want failed writes retried, the events held, none dropped or rejected", full)
	}
	if n := count(t, s, Query{}); n < 2000 {
		t.Fatalf("%d events stored with the disk full: the 2,000 stored before were lost", n)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Close(cctx); err != nil {
		t.Fatalf("after space was freed: %v", err)
	}
	st := w.Stats()
	n := count(t, s, Query{})
	ids := map[event.ID]bool{}
	if err := s.Scan(ctx, Query{}, func(e *event.Event) error { ids[e.ID] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	t.Logf("space freed: %+v; stored %d (%d distinct)", st, n, len(ids))
	if n != len(evs) || len(ids) != len(evs) || st.Written != int64(len(evs)-2000) || st.Dropped != 0 {
		t.Errorf("stored %d (%d distinct), written %d, dropped %d: want all %d events stored once", n, len(ids), st.Written, st.Dropped, len(evs))
	}
}
