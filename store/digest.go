package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/event"
)

// Digest is what a reader computed from the events of Window, kept in the
// store so that a later reader, in any process, can serve it without
// reading the window again: it holds while the window holds Events events.
// Events are only ever added to a window (Append skips what it has) or
// pruned, and Prune deletes the digests of the windows it cuts into, so an
// unchanged count means unchanged events.
type Digest struct {
	Key      string
	Window   event.Window
	Events   int64
	Built    int64  // UTC ns
	Timeline []byte // what the timeline draws
	Analysis []byte // the whole analysis; GetDigest reads it only when asked
}

// Digests is implemented by the stores that keep digests (both do). A
// read-only store reads them and refuses to write them.
type Digests interface {
	// CountEvents counts the events in w.
	CountEvents(ctx context.Context, w event.Window) (int64, error)
	PutDigest(ctx context.Context, d Digest) error
	// GetDigest reads key's digest, with its Analysis when analysis is
	// set; ok is false when there is none.
	GetDigest(ctx context.Context, key string, analysis bool) (d Digest, ok bool, err error)
}

const (
	countEvents = "SELECT count(*) FROM events WHERE ts >= %s AND ts < %s"
	getDigest   = "SELECT from_ns, to_ns, events, built_ns, timeline, %s FROM digests WHERE key = %s"
	putDigest   = `INSERT INTO digests (key, from_ns, to_ns, events, built_ns, timeline, analysis) VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (key) DO UPDATE SET from_ns = excluded.from_ns, to_ns = excluded.to_ns, events = excluded.events,
	built_ns = excluded.built_ns, timeline = excluded.timeline, analysis = excluded.analysis`
	pruneDigests = "DELETE FROM digests WHERE from_ns < %s"
)

func digestColumn(analysis bool) string {
	if analysis {
		return "analysis"
	}
	return "''"
}

// CountEvents implements Digests.
func (s *SQLite) CountEvents(ctx context.Context, w event.Window) (int64, error) {
	var n int64
	q := strings.Replace(fmt.Sprintf(countEvents, "?", "?"), "FROM events", "FROM events INDEXED BY events_ts", 1)
	if err := s.db.QueryRowContext(ctx, q, w.From, w.To).Scan(&n); err != nil {
		return 0, fmt.Errorf("store sqlite:%s: counting events: %s", s.path, oneLine(err))
	}
	return n, nil
}

// PutDigest implements Digests.
func (s *SQLite) PutDigest(ctx context.Context, d Digest) error {
	if s.readOnly {
		return fmt.Errorf("store sqlite:%s: database is read-only; digest not kept", s.path)
	}
	_, err := s.db.ExecContext(ctx, fmt.Sprintf(putDigest, "?", "?", "?", "?", "?", "?", "?"),
		d.Key, d.Window.From, d.Window.To, d.Events, d.Built, d.Timeline, d.Analysis)
	if err != nil {
		return fmt.Errorf("store sqlite:%s: keeping a digest: %s", s.path, oneLine(err))
	}
	return nil
}

// GetDigest implements Digests.
func (s *SQLite) GetDigest(ctx context.Context, key string, analysis bool) (Digest, bool, error) {
	d := Digest{Key: key}
	err := s.db.QueryRowContext(ctx, fmt.Sprintf(getDigest, digestColumn(analysis), "?"), key).
		Scan(&d.Window.From, &d.Window.To, &d.Events, &d.Built, &d.Timeline, &d.Analysis)
	if errors.Is(err, sql.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("store sqlite:%s: reading a digest: %s", s.path, oneLine(err))
	}
	return d, true, nil
}

// PutDigest implements Digests.
func (s *Postgres) PutDigest(ctx context.Context, d Digest) error {
	if s.readOnly {
		return fmt.Errorf("store %s: database is read-only; digest not kept", s.name)
	}
	_, err := s.pool.Exec(ctx, fmt.Sprintf(putDigest, "$1", "$2", "$3", "$4", "$5", "$6", "$7"),
		d.Key, d.Window.From, d.Window.To, d.Events, d.Built, d.Timeline, d.Analysis)
	if err != nil {
		return fmt.Errorf("store %s: keeping a digest: %s", s.name, oneLine(err))
	}
	return nil
}

// GetDigest implements Digests.
func (s *Postgres) GetDigest(ctx context.Context, key string, analysis bool) (Digest, bool, error) {
	d := Digest{Key: key}
	col := digestColumn(analysis)
	if !analysis {
		col = "''::bytea"
	}
	err := s.pool.QueryRow(ctx, fmt.Sprintf(getDigest, col, "$1"), key).
		Scan(&d.Window.From, &d.Window.To, &d.Events, &d.Built, &d.Timeline, &d.Analysis)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("store %s: reading a digest: %s", s.name, oneLine(err))
	}
	return d, true, nil
}
