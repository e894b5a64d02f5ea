// Package lock lets one lab at a time own the host resources a lab creates.
// They are its bridge, namespaces, cgroups, nftables tables and processes. A
// second lab, a cleanup or a test that touches them takes the same lock first,
// so nobody removes what a running lab still uses.
package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Dir is where the lab keeps its lock and working files.
const Dir = "/run/drainscope-lab"

// Lock is a held lab lock.
type Lock struct{ f *os.File }

// ErrHeld says another process holds the lock.
var ErrHeld = errors.New("another drainscope lab is running on this machine")

// TryAcquire takes the lock or returns ErrHeld (wrapped with the holder's
// pid when known).
func TryAcquire() (*Lock, error) {
	f, err := open()
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := readPID(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if holder > 0 {
				return nil, fmt.Errorf("%w (pid %d); wait for it to finish or stop it", ErrHeld, holder)
			}
			return nil, ErrHeld
		}
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return stamp(f)
}

// Acquire waits for the lock until ctx ends.
func Acquire(ctx context.Context) (*Lock, error) {
	for {
		l, err := TryAcquire()
		if !errors.Is(err, ErrHeld) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the lab lock: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Release lets the next lab in.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing drops the flock
	l.f = nil
	return err
}

func open() (*os.File, error) {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", Dir, err)
	}
	f, err := os.OpenFile(filepath.Join(Dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the lab lock: %w", err)
	}
	return f, nil
}

func stamp(f *os.File) (*Lock, error) {
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	return pid
}
