package store

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// partitionSpan is the width of one events partition. Retention drops
// whole partitions, so it is also the granularity of Prune.
const partitionSpan = int64(24 * time.Hour)

// Postgres is the store for clusters: many agents write into one database.
type Postgres struct {
	pool     *pgxpool.Pool
	name     string // DSN with the password hidden, for messages
	readOnly bool

	mu         sync.Mutex
	partitions map[int64]bool // partition start (ns) → known to exist
}

// OpenPostgres connects to dsn, checks it, and brings the schema up to date.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	name := redact(dsn)
	fail := func(what string, err error) (*Postgres, error) {
		return nil, fmt.Errorf("store %s: %s: %s", name, what, oneLine(err))
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the whole DSN, password included.
		msg := strings.ReplaceAll(oneLine(err), dsn, name)
		return nil, fmt.Errorf("store %s: bad DSN: %s", name, msg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail("connecting", err)
	}
	s := &Postgres{pool: pool, name: name, partitions: map[int64]bool{}}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return fail("connecting", err)
	}
	var ro string
	if err := pool.QueryRow(ctx, "SELECT current_setting('transaction_read_only')").Scan(&ro); err != nil {
		pool.Close()
		return fail("checking write access", err)
	}
	s.readOnly = ro == "on"
	if s.readOnly {
		v, err := s.Version(ctx)
		if err != nil {
			pool.Close()
			return fail("reading schema version", err)
		}
		if err := checkSchema(v, LatestVersion, true); err != nil {
			pool.Close()
			return nil, fmt.Errorf("store %s: %w", name, err) // one line; keeps ErrSchemaTooNew
		}
		return s, nil
	}
	if err := migrateUp(ctx, BackendPostgres, pgMigrator{pool}); err != nil {
		pool.Close()
		if errors.Is(err, ErrSchemaTooNew) {
			return nil, fmt.Errorf("store %s: %w", name, err)
		}
		if isPgReadOnly(err) {
			return fail("migrating", errors.New("database is read-only"))
		}
		return fail("migrating", err)
	}
	return s, nil
}

func isPgReadOnly(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "25006" || pe.Code == "42501") // read_only_sql_transaction, insufficient_privilege
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Describe implements Store.
func (s *Postgres) Describe() string { return s.name }

// Close implements Store.
func (s *Postgres) Close() error { s.pool.Close(); return nil }

// Version implements Store.
func (s *Postgres) Version(ctx context.Context) (int, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := s.pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
}

// Append implements Store. The common case is one COPY in a transaction. A
// batch that overlaps stored events (a retry after a lost acknowledgement)
// makes COPY fail on the primary key; it is then copied into a temporary
// table and inserted with ON CONFLICT DO NOTHING, in one transaction again.
func (s *Postgres) Append(ctx context.Context, batch []event.Event) error {
	if len(batch) == 0 {
		return nil
	}
	fail := func(err error) error {
		if isPgReadOnly(err) {
			return fmt.Errorf("store %s: database is read-only; %d events not written", s.name, len(batch))
		}
		return fmt.Errorf("store %s: appending %d events: %s", s.name, len(batch), oneLine(err))
	}
	if s.readOnly {
		return fmt.Errorf("store %s: database is read-only; %d events not written", s.name, len(batch))
	}
	if err := checkBatch(batch); err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	if err := s.ensurePartitions(ctx, batch); err != nil {
		return fail(err)
	}
	var err error
	// A connection the server dropped while idle fails on first use; one
	// more try on a fresh connection is safe because writes are idempotent.
	for attempt := 0; attempt < 2; attempt++ {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, columns, newPgRows(batch))
			return err
		})
		if err == nil || pgCode(err) != "" || ctx.Err() != nil {
			break
		}
	}
	if pgCode(err) == "23505" { // unique_violation
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "CREATE TEMP TABLE events_in (LIKE events INCLUDING DEFAULTS) ON COMMIT DROP"); err != nil {
				return err
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events_in"}, columns, newPgRows(batch)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO events SELECT * FROM events_in ON CONFLICT DO NOTHING")
			return err
		})
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// pgRows feeds a batch to CopyFrom, reusing one values slice: pgx encodes
// each row before asking for the next.
type pgRows struct {
	batch []event.Event
	i     int
	vals  []any
	err   error
}

func newPgRows(batch []event.Event) *pgRows {
	return &pgRows{batch: batch, i: -1, vals: make([]any, 0, len(columns))}
}

func (r *pgRows) Next() bool { r.i++; return r.i < len(r.batch) }
func (r *pgRows) Err() error { return r.err }
func (r *pgRows) Values() ([]any, error) {
	r.vals = appendRow(r.vals[:0], &r.batch[r.i])
	return r.vals, nil
}

func partitionStart(ts int64) int64 { return ts - ts%partitionSpan }

func partitionName(start int64) string {
	return "events_p" + time.Unix(0, start).UTC().Format("20060102")
}

// ensurePartitions creates the day partitions the batch needs.
func (s *Postgres) ensurePartitions(ctx context.Context, batch []event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch {
		start := partitionStart(batch[i].Time)
		if s.partitions[start] {
			continue
		}
		q := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF events FOR VALUES FROM (%d) TO (%d)",
			partitionName(start), start, start+partitionSpan)
		_, err := s.pool.Exec(ctx, q)
		if code := pgCode(err); code == "42P07" || code == "23505" {
			err = nil // another writer created it between the check and the create
		}
		if err != nil {
			return fmt.Errorf("creating partition %s: %w", partitionName(start), err)
		}
		s.partitions[start] = true
	}
	return nil
}

// Scan implements Store.
func (s *Postgres) Scan(ctx context.Context, q Query, fn func(*event.Event) error) error {
	query, args := selectEvents(q, columns, pgPlaceholder)
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("store %s: querying events: %s", s.name, oneLine(err))
	}
	defer rows.Close()
	t := newScanTarget()
	for rows.Next() {
		t.laddr, t.raddr = netip.Addr{}, netip.Addr{} // NULL leaves them as they were
		if err := rows.Scan(t.dest...); err != nil {
			return fmt.Errorf("store %s: reading events: %w", s.name, err)
		}
		e, err := t.finish()
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store %s: reading events: %s", s.name, oneLine(err))
	}
	return nil
}

// Terminations implements Store.
func (s *Postgres) Terminations(ctx context.Context, q Query) ([]event.Termination, error) {
	query, args := selectTerminations(q, pgPlaceholder)
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store %s: querying terminations: %s", s.name, oneLine(err))
	}
	defer rows.Close()
	return collectTerminations(rows, s.name)
}

// Prune implements Store: partitions wholly before the cut are dropped,
// the rows of the partition it falls in are deleted. It returns -1 when it
// dropped partitions, whose rows it does not count.
func (s *Postgres) Prune(ctx context.Context, before int64) (int64, error) {
	fail := func(err error) (int64, error) {
		return 0, fmt.Errorf("store %s: pruning: %s", s.name, oneLine(err))
	}
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'events'::regclass`)
	if err != nil {
		return fail(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fail(err)
	}
	cut := partitionStart(before)
	dropped := false
	for _, n := range names {
		if n >= partitionName(cut) || !strings.HasPrefix(n, "events_p") {
			continue
		}
		if _, err := s.pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{n}.Sanitize()); err != nil {
			return fail(err)
		}
		dropped = true
	}
	s.mu.Lock()
	for start := range s.partitions {
		if start < cut {
			delete(s.partitions, start)
		}
	}
	s.mu.Unlock()
	tag, err := s.pool.Exec(ctx, "DELETE FROM events WHERE ts < $1", before)
	if err != nil {
		return fail(err)
	}
	if dropped {
		return -1, nil
	}
	return tag.RowsAffected(), nil
}

type pgMigrator struct{ pool *pgxpool.Pool }

// migrationLockKey is an arbitrary constant naming drainscope's advisory lock.
const migrationLockKey = 0x64726e73 // "drns"

func (m pgMigrator) lock(ctx context.Context) (func(), error) {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockKey); err != nil {
		conn.Release()
		return nil, err
	}
	return func() {
		conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrationLockKey)
		conn.Release()
	}, nil
}

func (m pgMigrator) version(ctx context.Context) (int, error) {
	if _, err := m.pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return 0, err
	}
	var v int
	err := m.pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
}

func (m pgMigrator) apply(ctx context.Context, mg migration) error {
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, mg.sql); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", mg.version, mg.name)
		return err
	})
}
