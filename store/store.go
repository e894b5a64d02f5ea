// Package store keeps events. One contract, two implementations: Postgres
// (pgx, partitioned by time, for clusters) and an embedded SQLite file (the
// default, so one machine needs no database server). Both pass the same
// contract tests (contract_test.go).
package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// Store is where events are written and read back.
type Store interface {
	// Append writes a batch atomically: all of it or none of it. Events
	// already stored (same Time and ID) are skipped, so a retried batch
	// stores nothing twice. On error the caller still owns the batch and
	// should retry it later; nothing was lost.
	Append(ctx context.Context, batch []event.Event) error
	// Scan calls fn for each event matching q, in time order, without
	// holding all of them in memory. fn must not keep the pointer, and
	// must not write to the event's Attrs: events may share one map.
	Scan(ctx context.Context, q Query, fn func(*event.Event) error) error
	// StateAt returns, for every entity (an endpoint, a pod's readiness or
	// lifecycle, a container, a Service, a workload, a node proxy's
	// endpoint: see event.Event.Entity), its newest state event at or
	// before at (UTC ns), however old, in time order; namespace "" for
	// all. An entity whose newest event says it is gone (endpoint_removed,
	// a Service deleted) is returned too: the caller decides. Its cost
	// grows with the entities, not with the history stored.
	StateAt(ctx context.Context, at int64, namespace string) ([]event.Event, error)
	// Prune deletes events older than before (UTC ns) and reports how many
	// went. It works in short steps beside the writers (see Retention,
	// which calls it on a schedule).
	Prune(ctx context.Context, before int64) (int64, error)
	// Version is the schema version of the database.
	Version(ctx context.Context) (int, error)
	// Describe names the backend and where it is, for logs.
	Describe() string
	Close() error
}

// Query selects events. Zero fields select everything.
type Query struct {
	Window    event.Window
	Kinds     []event.Kind
	PodUIDs   []string
	Namespace string
	Workload  event.Workload // with Namespace
	Node      string
	// ObservedOnlyIn, when set, leaves out the events flagged
	// event.FlagObserved of every other namespace: a read of one
	// namespace's history keeps that namespace's re-observed states,
	// those that name no namespace and every namespace's transitions, not
	// the watcher's periodic re-observation of the rest of the cluster
	// (63 % of a 5,000-node read's rows; docs/scale.md).
	ObservedOnlyIn string
	// Lifecycle narrows the read to the lifecycle the account of
	// disruptions reads (analysis.FindDisruptions): every kind but a
	// connection's and a client's failure (IsLifecycle; Kinds narrows them
	// further), without the re-observed states (event.FlagObserved) but a
	// pod's deletion or finish and its running containers, and without the
	// exits of processes that are not their container's main one
	// (event.FlagMain): no connection, no exec probe's exit (LifecycleRow). A partial index holds these
	// rows alone (migration 0006), so the read does not walk the window's
	// connections.
	Lifecycle bool
	Limit     int // at most this many events; 0 means no limit
}

// Events collects the events matching q.
func Events(ctx context.Context, s Store, q Query) ([]event.Event, error) {
	var out []event.Event
	err := s.Scan(ctx, q, func(e *event.Event) error {
		out = append(out, e.Clone())
		return nil
	})
	return out, err
}

// ErrSchemaTooNew is returned when the database was migrated by a newer
// drainscope than this one.
var ErrSchemaTooNew = errors.New("database schema is newer than this drainscope knows")

// DefaultPath is the SQLite file used when no DSN is given:
// $XDG_DATA_HOME/drainscope/events.db, or ~/.local/share/drainscope/events.db.
func DefaultPath() string {
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "drainscope.db"
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "drainscope", "events.db")
}

// Kind of backend a DSN names.
const (
	BackendPostgres = "postgres"
	BackendSQLite   = "sqlite"
)

// Backend tells which backend dsn selects and the address or path to hand
// it: "postgres://…" and "postgresql://…" (or key=value strings with host=)
// choose Postgres; "sqlite:PATH", "file:PATH" or a plain path choose SQLite;
// an empty DSN chooses SQLite at DefaultPath.
func Backend(dsn string) (backend, target string, err error) {
	switch {
	case dsn == "":
		return BackendSQLite, DefaultPath(), nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return BackendPostgres, dsn, nil
	case strings.Contains(dsn, "host=") || strings.Contains(dsn, "dbname="):
		return BackendPostgres, dsn, nil
	case strings.HasPrefix(dsn, "sqlite:"):
		p := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if p == "" {
			return "", "", fmt.Errorf("store %q: sqlite: needs a file path, as in sqlite:/var/lib/drainscope/events.db", dsn)
		}
		return BackendSQLite, p, nil
	case strings.Contains(dsn, "://"):
		scheme, _, _ := strings.Cut(dsn, "://")
		return "", "", fmt.Errorf("store %q: unknown scheme %q (want postgres://, postgresql://, sqlite: or a file path)", Redact(dsn), scheme)
	default:
		return BackendSQLite, dsn, nil
	}
}
