package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
	"golang.org/x/sys/unix"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteRowsPerInsert is how many rows one INSERT statement carries. Fewer
// statements amortise the driver's per-call cost; 13 columns × 64 rows stays
// well under SQLite's limit of 32,766 bound parameters.
const sqliteRowsPerInsert = 64

// SQLite is the embedded store: one file, no server.
type SQLite struct {
	db       *sql.DB
	path     string
	readOnly bool
}

// OpenSQLite opens (creating if needed) the SQLite store at path and brings
// its schema up to date. A path may end in "?mode=ro" to open read-only.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	file, params, _ := strings.Cut(path, "?")
	s := &SQLite{path: file, readOnly: strings.Contains(params, "mode=ro")}
	fail := func(what string, err error) (*SQLite, error) {
		if s.db != nil {
			s.db.Close()
		}
		return nil, fmt.Errorf("store sqlite:%s: %s: %s", file, what, oneLine(err))
	}
	if !s.readOnly {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return fail("creating its directory", err)
		}
	}
	if !s.readOnly && unix.Access(filepath.Dir(file), unix.W_OK) == unix.EROFS {
		// A read-only file system: SQLite could not even keep its WAL
		// index there, so read the file as immutable.
		s.readOnly = true
	}
	dsn := "file:" + file + "?_busy_timeout=10000&_txlock=immediate"
	if s.readOnly {
		dsn += "&mode=ro"
		if unix.Access(filepath.Dir(file), unix.W_OK) == unix.EROFS {
			dsn += "&immutable=1"
		}
	} else {
		dsn += "&_journal_mode=WAL&_synchronous=NORMAL&_pragma=cache_size(-65536)"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fail("opening", err)
	}
	s.db = db
	if err := db.PingContext(ctx); err != nil {
		return fail("opening", err)
	}
	if !s.readOnly {
		if ro, err := s.probeReadOnly(ctx); err != nil {
			return fail("checking write access", err)
		} else if ro {
			s.readOnly = true
		}
	}
	if s.readOnly {
		v, err := s.Version(ctx)
		if err != nil {
			return fail("reading schema version", err)
		}
		if err := checkSchema(v, LatestVersion, true); err != nil {
			s.db.Close()
			return nil, fmt.Errorf("store sqlite:%s: %w", file, err) // one line; keeps ErrSchemaTooNew
		}
		return s, nil
	}
	if err := migrateUp(ctx, BackendSQLite, sqliteMigrator{db}); err != nil {
		if errors.Is(err, ErrSchemaTooNew) {
			db.Close()
			return nil, fmt.Errorf("store sqlite:%s: %w", file, err)
		}
		return fail("migrating", err)
	}
	return s, nil
}

// probeReadOnly takes the write lock and gives it back: the only reliable
// test, since root ignores file modes but not a read-only mount.
func (s *SQLite) probeReadOnly(ctx context.Context) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil) // _txlock=immediate: BEGIN IMMEDIATE
	if err != nil {
		if isReadOnly(err) {
			return true, nil
		}
		return false, err
	}
	_, err = tx.ExecContext(ctx, sqliteVersionTable)
	if err != nil {
		tx.Rollback()
		if isReadOnly(err) {
			return true, nil
		}
		return false, err
	}
	return false, tx.Commit()
}

func isReadOnly(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff
		return code == sqlite3.SQLITE_READONLY || code == sqlite3.SQLITE_CANTOPEN && strings.Contains(err.Error(), "read")
	}
	return strings.Contains(err.Error(), "readonly") || strings.Contains(err.Error(), "read-only")
}

// Describe implements Store.
func (s *SQLite) Describe() string { return "sqlite:" + s.path }

// Close implements Store.
func (s *SQLite) Close() error { return s.db.Close() }

// Version implements Store.
func (s *SQLite) Version(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	if err != nil && strings.Contains(err.Error(), "no such table") {
		return 0, nil
	}
	return v, err
}

// Append implements Store: one transaction, INSERT OR IGNORE so that events
// already stored are skipped.
func (s *SQLite) Append(ctx context.Context, batch []event.Event) error {
	if len(batch) == 0 {
		return nil
	}
	if s.readOnly {
		return fmt.Errorf("store sqlite:%s: database is read-only; %d events not written", s.path, len(batch))
	}
	if err := checkBatch(batch); err != nil {
		return fmt.Errorf("store sqlite:%s: %w", s.path, err)
	}
	fail := func(err error) error {
		if isReadOnly(err) {
			return fmt.Errorf("store sqlite:%s: database is read-only; %d events not written", s.path, len(batch))
		}
		return wrapLine(fmt.Sprintf("store sqlite:%s: appending %d events", s.path, len(batch)), err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	// Below database/sql, straight on the driver: its per-call argument
	// conversion was a tenth of the ingest time, and one row binds 13 values.
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(sqliteDriverConn)
		if !ok {
			return fmt.Errorf("driver connection %T lacks BeginTx/PrepareContext", dc)
		}
		tx, err := c.BeginTx(ctx, driver.TxOptions{})
		if err != nil {
			return err
		}
		if err := sqliteInsertBatch(ctx, c, batch); err != nil {
			tx.Rollback()
			return err
		}
		if err := sqliteUpsertEntities(ctx, c, batchEntities(batch)); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return fail(err)
	}
	return nil
}

type sqliteDriverConn interface {
	driver.ConnBeginTx
	driver.ConnPrepareContext
}

func sqliteInsertBatch(ctx context.Context, c sqliteDriverConn, batch []event.Event) error {
	prepare := func(rows int) (driver.StmtExecContext, func(), error) {
		st, err := c.PrepareContext(ctx, sqliteInsert(rows))
		if err != nil {
			return nil, nil, err
		}
		se, ok := st.(driver.StmtExecContext)
		if !ok {
			st.Close()
			return nil, nil, fmt.Errorf("driver statement %T lacks ExecContext", st)
		}
		return se, func() { st.Close() }, nil
	}
	vals := make([]any, 0, len(sqliteWriteColumns)*sqliteRowsPerInsert)
	args := make([]driver.NamedValue, len(sqliteWriteColumns)*sqliteRowsPerInsert)
	var buf []byte
	exec := func(stmt driver.StmtExecContext, rows []event.Event) error {
		vals, buf = vals[:0], buf[:0]
		for i := range rows {
			vals, buf = appendSQLiteRow(vals, buf, &rows[i])
		}
		for i, v := range vals {
			args[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
		}
		_, err := stmt.ExecContext(ctx, args[:len(vals)])
		return err
	}
	// Full statements of sqliteRowsPerInsert rows, prepared only when a
	// full one is needed, then one statement for the tail.
	whole := len(batch) - len(batch)%sqliteRowsPerInsert
	if whole > 0 {
		full, closeFull, err := prepare(sqliteRowsPerInsert)
		if err != nil {
			return err
		}
		defer closeFull()
		for start := 0; start < whole; start += sqliteRowsPerInsert {
			if err := exec(full, batch[start:start+sqliteRowsPerInsert]); err != nil {
				return err
			}
		}
	}
	if tail := batch[whole:]; len(tail) > 0 {
		st, closeSt, err := prepare(len(tail))
		if err != nil {
			return err
		}
		defer closeSt()
		if err := exec(st, tail); err != nil {
			return err
		}
	}
	return nil
}

func sqliteInsert(rows int) string {
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", len(sqliteWriteColumns)), ",") + ")"
	return "INSERT OR IGNORE INTO events (" + strings.Join(sqliteWriteColumns, ", ") + ") VALUES " +
		strings.TrimSuffix(strings.Repeat(one+",", rows), ",")
}

// Scan implements Store.
func (s *SQLite) Scan(ctx context.Context, q Query, fn func(*event.Event) error) error {
	// The flags live in the packed detail: ObservedOnlyIn filters the
	// decoded events, and so counts Limit itself.
	observedIn, lifecycle, limit, kept := q.ObservedOnlyIn, q.Lifecycle, q.Limit, 0
	filtered := observedIn != "" || lifecycle
	if filtered {
		q.ObservedOnlyIn, q.Limit = "", 0
	}
	query, args := selectEvents(q, sqliteColumns, sqlitePlaceholder)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("store sqlite:%s: querying events: %s", s.path, oneLine(err))
	}
	defer rows.Close()
	var (
		e                          event.Event
		id, signal                 int64
		kind, source, wkind, wname string
		detail                     []byte
	)
	dest := []any{&e.Time, &id, &kind, &e.Node, &source,
		&e.Pod.Namespace, &e.Pod.Name, &e.Pod.UID, &e.Pod.Container, &wkind, &wname, &signal, &detail}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("store sqlite:%s: reading events: %w", s.path, err)
		}
		e.ID, e.Kind, e.Source, e.Signal = event.ID(id), event.Kind(kind), event.Source(source), int32(signal)
		e.Workload = event.Workload{Kind: wkind, Name: wname}
		if err := unpackDetail(detail, &e); err != nil {
			return fmt.Errorf("store sqlite:%s: event %s at %d: %w", s.path, e.ID, e.Time, err)
		}
		if filtered {
			if observedIn != "" && e.Flags.Has(event.FlagObserved) && e.Pod.Namespace != observedIn && e.Pod.Namespace != "" {
				continue
			}
			if lifecycle && !LifecycleRow(&e) {
				continue
			}
			if limit > 0 && kept == limit {
				break
			}
			kept++
		}
		if err := fn(&e); err != nil {
			return err
		}
	}
	return rows.Err()
}

// sqlitePruneChunk is how many rows one pruning statement deletes: each
// holds the write lock, which every Append waits for, a few milliseconds.
const sqlitePruneChunk = 5000

// ReadOnly reports whether the store was opened (or found) read-only.
func (s *SQLite) ReadOnly() bool { return s.readOnly }

// Prune implements Store. It deletes in chunks, each its own transaction,
// and rests between chunks as long as the chunk took, so that a writer
// waiting on the lock gets it: a prune of millions of rows never holds the
// write lock for more than one chunk.
func (s *SQLite) Prune(ctx context.Context, before int64) (int64, error) {
	if s.readOnly {
		return 0, fmt.Errorf("store sqlite:%s: database is read-only; nothing pruned", s.path)
	}
	nth := func(ctx context.Context, before int64, chunk int) (int64, bool, error) {
		var ts int64
		err := s.db.QueryRowContext(ctx, "SELECT ts FROM events WHERE ts < ? ORDER BY ts LIMIT 1 OFFSET ?", before, chunk).Scan(&ts)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return ts, err == nil, err
	}
	del := func(ctx context.Context, below int64, through bool) (int64, error) {
		q := "DELETE FROM events WHERE ts < ?"
		if through {
			q = "DELETE FROM events WHERE ts <= ?"
		}
		res, err := s.db.ExecContext(ctx, q, below)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	rest := func(took time.Duration) {
		time.Sleep(max(took, time.Millisecond))
	}
	// Digests of windows the cut falls in would no longer match their events.
	if _, err := s.db.ExecContext(ctx, fmt.Sprintf(pruneDigests, "?"), before); err != nil {
		return 0, fmt.Errorf("store sqlite:%s: pruning digests: %s", s.path, oneLine(err))
	}
	n, err := deleteOlder(ctx, before, sqlitePruneChunk, nth, del, rest)
	if err != nil {
		return n, fmt.Errorf("store sqlite:%s: pruning: %s", s.path, oneLine(err))
	}
	// Entities whose every event went with the cut.
	if _, err := s.db.ExecContext(ctx, "DELETE FROM entities WHERE last_ts < ?", before); err != nil {
		return n, fmt.Errorf("store sqlite:%s: pruning entities: %s", s.path, oneLine(err))
	}
	return n, nil
}

type sqliteMigrator struct{ db *sql.DB }

const sqliteVersionTable = "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"

// lock is a no-op: every migration runs in a BEGIN IMMEDIATE transaction,
// which already excludes other writers.
func (sqliteMigrator) lock(context.Context) (func(), error) { return func() {}, nil }

func (m sqliteMigrator) version(ctx context.Context) (int, error) {
	if _, err := m.db.ExecContext(ctx, sqliteVersionTable); err != nil {
		return 0, err
	}
	var v int
	err := m.db.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
}

func (m sqliteMigrator) apply(ctx context.Context, mg migration) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var done int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations WHERE version = ?", mg.version).Scan(&done); err != nil {
		return err
	}
	if done > 0 { // another process applied it while we waited for the lock
		return nil
	}
	if _, err := tx.ExecContext(ctx, mg.sql); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, datetime('now'))", mg.version, mg.name); err != nil {
		return err
	}
	return tx.Commit()
}

// sqliteUpsertEntities records the batch's entities in the entities table
// (see state.go), in the batch's transaction.
func sqliteUpsertEntities(ctx context.Context, c sqliteDriverConn, ents []entitySpan) error {
	if len(ents) == 0 {
		return nil
	}
	st, err := c.PrepareContext(ctx, `INSERT INTO entities (entity, namespace, first_ts, last_ts) VALUES (?, ?, ?, ?)
ON CONFLICT (entity) DO UPDATE SET first_ts = min(first_ts, excluded.first_ts), last_ts = max(last_ts, excluded.last_ts)
WHERE excluded.first_ts < first_ts OR excluded.last_ts > last_ts`)
	if err != nil {
		return err
	}
	defer st.Close()
	se, ok := st.(driver.StmtExecContext)
	if !ok {
		return fmt.Errorf("driver statement %T lacks ExecContext", st)
	}
	args := make([]driver.NamedValue, 4)
	for _, en := range ents {
		for i, v := range []any{en.key, en.namespace, en.first, en.last} {
			args[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
		}
		if _, err := se.ExecContext(ctx, args); err != nil {
			return err
		}
	}
	return nil
}

// sqliteStateAt probes events_entity_ts once per entity known at at: the
// newest time at or before at (bounded by the entity's last, so that the
// probe starts where the entity's events end), then that row by its
// primary key. CROSS JOIN makes entities the outer loop, as SQLite's
// planner would not (it scanned the index of every state event).
const sqliteStateAt = `SELECT e.ts, e.id, e.kind, e.node, e.source, e.namespace, e.pod, e.pod_uid, e.container,
	e.workload_kind, e.workload, e.signal, e.detail
FROM entities en CROSS JOIN events e ON e.entity = en.entity AND e.ts = (
	SELECT max(x.ts) FROM events x WHERE x.entity = en.entity AND x.ts <= min(?1, en.last_ts))
WHERE en.first_ts <= ?1`

// StateAt implements Store.
func (s *SQLite) StateAt(ctx context.Context, at int64, namespace string) ([]event.Event, error) {
	q, args := sqliteStateAt, []any{at}
	if namespace != "" {
		q += " AND en.namespace = ?2"
		args = append(args, namespace)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store sqlite:%s: querying the state at %d: %s", s.path, at, oneLine(err))
	}
	defer rows.Close()
	var out []event.Event
	r := newSQLiteRow()
	for rows.Next() {
		e, err := r.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("store sqlite:%s: %w", s.path, err)
		}
		out = append(out, e.Clone())
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store sqlite:%s: reading the state at %d: %s", s.path, at, oneLine(err))
	}
	return newestPerEntity(out), nil
}

// sqliteRow scans rows of sqliteColumns; reused across rows.
type sqliteRow struct {
	e                          event.Event
	id, signal                 int64
	kind, source, wkind, wname string
	detail                     []byte
	dest                       []any
}

func newSQLiteRow() *sqliteRow {
	r := &sqliteRow{}
	e := &r.e
	r.dest = []any{&e.Time, &r.id, &r.kind, &e.Node, &r.source,
		&e.Pod.Namespace, &e.Pod.Name, &e.Pod.UID, &e.Pod.Container, &r.wkind, &r.wname, &r.signal, &r.detail}
	return r
}

func (r *sqliteRow) scan(rows *sql.Rows) (*event.Event, error) {
	if err := rows.Scan(r.dest...); err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	e := &r.e
	e.ID, e.Kind, e.Source, e.Signal = event.ID(r.id), event.Kind(r.kind), event.Source(r.source), int32(r.signal)
	e.Workload = event.Workload{Kind: r.wkind, Name: r.wname}
	if err := unpackDetail(r.detail, e); err != nil {
		return nil, fmt.Errorf("event %s at %d: %w", e.ID, e.Time, err)
	}
	return e, nil
}
