package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// partitionSpan is the width of one events partition. Retention drops the
// partitions wholly past the cut and deletes the older rows of the one the
// cut falls in.
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
	name := Redact(dsn)
	fail := func(what string, err error) (*Postgres, error) {
		return nil, fmt.Errorf("store %s: %s: %s", name, what, RedactDSN(oneLine(err), dsn))
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the DSN, masked by pgx's own rules,
		// and may quote a piece of it alone: RedactDSN masks the words
		// of the password wherever they appear.
		msg := RedactDSN(oneLine(err), dsn)
		return nil, fmt.Errorf("store %s: bad DSN: %s", name, msg)
	}
	// pgx ends the userinfo at the first '@': the rest of a password with
	// an unencoded '@' becomes the host, to be looked up and echoed in
	// every error. No host holds an '@'.
	for _, h := range append([]string{cfg.ConnConfig.Host}, fallbackHosts(cfg)...) {
		if strings.Contains(h, "@") {
			return nil, fmt.Errorf("store %s: bad DSN: the host holds an '@': write an '@' in the password as %%40", name)
		}
	}
	// Once parsed, the DSN is named by what it reaches alone: no password,
	// no query parameters, nothing left to mask.
	name = describePostgres(cfg.ConnConfig.Config)
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

func fallbackHosts(cfg *pgxpool.Config) []string {
	var hs []string
	for _, f := range cfg.ConnConfig.Fallbacks {
		hs = append(hs, f.Host)
	}
	return hs
}

// describePostgres names a parsed DSN as postgres://USER@HOST:PORT/DATABASE.
func describePostgres(c pgconn.Config) string {
	host := c.Host
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "/") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s", url.PathEscape(c.User), host, c.Port, url.PathEscape(c.Database))
}

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
		return wrapLine(fmt.Sprintf("store %s: appending %d events", s.name, len(batch)), err)
	}
	if s.readOnly {
		return fmt.Errorf("store %s: database is read-only; %d events not written", s.name, len(batch))
	}
	if err := checkBatch(batch); err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	missing, err := s.missingPartitions(batch)
	if err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	ents := batchEntities(batch)
	// A connection the server dropped while idle fails on first use; one
	// more try on a fresh connection is safe because writes are idempotent.
	for attempt := 0; attempt < 2; attempt++ {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := createPartitions(ctx, tx, missing); err != nil {
				return err
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, countedColumns, newPgRows(batch, true)); err != nil {
				return err
			}
			if err := pgUpsertEntities(ctx, tx, ents); err != nil {
				return err
			}
			return pgCountSeconds(ctx, tx, batch)
		})
		if err == nil || pgCode(err) != "" || ctx.Err() != nil {
			break
		}
	}
	if pgCode(err) == "23505" { // unique_violation
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := createPartitions(ctx, tx, missing); err != nil {
				return err
			}
			src, err := retryTableSource(ctx, tx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "CREATE TEMP TABLE events_in (LIKE "+src+" INCLUDING DEFAULTS) ON COMMIT DROP"); err != nil {
				return err
			}
			// Left to its default, counted is false: what is inserted is
			// not in event_seconds, and CountEvents finds it by index.
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events_in"}, writeColumns, newPgRows(batch, false)); err != nil {
				return err
			}
			if _, err = tx.Exec(ctx, "INSERT INTO events SELECT * FROM events_in ON CONFLICT DO NOTHING"); err != nil {
				return err
			}
			return pgUpsertEntities(ctx, tx, ents)
		})
	}
	if err != nil {
		return fail(err)
	}
	s.mu.Lock()
	for _, start := range missing {
		s.partitions[start] = true
	}
	s.mu.Unlock()
	return nil
}

// pgRows feeds a batch to CopyFrom, reusing one values slice: pgx encodes
// each row before asking for the next.
type pgRows struct {
	batch   []event.Event
	i       int
	vals    []any
	err     error
	counted bool // the rows go with countedColumns, counted true
}

func newPgRows(batch []event.Event, counted bool) *pgRows {
	return &pgRows{batch: batch, i: -1, vals: make([]any, 0, len(countedColumns)), counted: counted}
}

func (r *pgRows) Next() bool { r.i++; return r.i < len(r.batch) }
func (r *pgRows) Err() error { return r.err }
func (r *pgRows) Values() ([]any, error) {
	r.vals = appendRow(r.vals[:0], &r.batch[r.i])
	if r.counted {
		r.vals = append(r.vals, true)
	}
	return r.vals, nil
}

func partitionStart(ts int64) int64 { return ts - ts%partitionSpan }

func partitionName(start int64) string {
	return "events_p" + time.Unix(0, start).UTC().Format("20060102")
}

// MaxBatchDays is the most distinct days (day partitions in Postgres) one
// batch may span. Every partition a statement touches takes a lock, and
// thousands of them exhaust the lock table (out of shared memory) for every
// later query; a batch spanning more is refused whole (a row-level error, so
// a Writer splits it), before any partition is created.
const MaxBatchDays = 64

// missingPartitions returns the starts of the day partitions the batch
// needs that are not known to exist, refusing a batch of more than
// MaxBatchDays days.
func (s *Postgres) missingPartitions(batch []event.Event) ([]int64, error) {
	days := map[int64]bool{}
	lo, hi := batch[0].Time, batch[0].Time
	for i := range batch {
		days[partitionStart(batch[i].Time)] = true
		lo, hi = min(lo, batch[i].Time), max(hi, batch[i].Time)
	}
	if len(days) > MaxBatchDays {
		return nil, fmt.Errorf("batch of %d events spans %d days (%s to %s), more than the %d one batch may: %w",
			len(batch), len(days), time.Unix(0, lo).UTC().Format(time.DateOnly), time.Unix(0, hi).UTC().Format(time.DateOnly),
			MaxBatchDays, errInvalidEvent)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var missing []int64
	for start := range days {
		if !s.partitions[start] {
			missing = append(missing, start)
		}
	}
	slices.Sort(missing)
	return missing, nil
}

// ensurePartitions creates the day partitions the batch needs in a
// transaction of their own (for a benchmark's raw COPY baseline).
func (s *Postgres) ensurePartitions(ctx context.Context, batch []event.Event) error {
	missing, err := s.missingPartitions(batch)
	if err != nil {
		return err
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return createPartitions(ctx, tx, missing) }); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, start := range missing {
		s.partitions[start] = true
	}
	return nil
}

// createPartitions creates the day partitions in tx, the transaction that
// then copies the batch: should the batch be refused, its partitions go
// with the rollback and no empty schema is left behind.
// A role that does not own events (the agent's or the server's, see
// roles.go) creates them through the owner's drainscope_create_partition,
// in the same transaction.
func createPartitions(ctx context.Context, tx pgx.Tx, starts []int64) error {
	if len(starts) == 0 {
		return nil
	}
	owns, err := ownsEvents(ctx, tx)
	if err != nil {
		return fmt.Errorf("checking who owns events: %w", err)
	}
	for _, start := range starts {
		q := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF events FOR VALUES FROM (%d) TO (%d)",
			partitionName(start), start, start+partitionSpan)
		if !owns {
			q = fmt.Sprintf("SELECT drainscope_create_partition(%d)", start)
		}
		// In a savepoint: a writer creating the same partition at the same
		// moment makes this fail, which must not abort the transaction.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("creating partition %s: %w", partitionName(start), err)
		}
		_, err = sp.Exec(ctx, q)
		if code := pgCode(err); code == "42P07" || code == "23505" {
			err = sp.Rollback(ctx) // another writer created it between the check and the create
		} else if err == nil {
			err = sp.Commit(ctx)
		}
		if err != nil {
			return fmt.Errorf("creating partition %s: %w", partitionName(start), err)
		}
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

// pgPruneChunk is how many rows one pruning DELETE removes. A DELETE takes
// no lock a writer waits for, but a short one keeps each transaction and
// its WAL small.
const pgPruneChunk = 50_000

// pgDropLockTimeout bounds how long dropping a partition may wait for the
// lock on events where it cannot detach the partition concurrently; writers
// queue behind that lock while it waits, so it gives up and retries at the
// next pass instead.
const pgDropLockTimeout = "2s"

// pruneLockKey names the advisory lock a pruning process holds, so that
// server replicas and agents pruning one database take turns.
const pruneLockKey = 0x64727072 // "drpr"

// ReadOnly reports whether the database refuses writes to this session.
func (s *Postgres) ReadOnly() bool { return s.readOnly }

// Prune implements Store; see PruneDetail.
func (s *Postgres) Prune(ctx context.Context, before int64) (int64, error) {
	p, err := s.PruneDetail(ctx, before)
	return p.Events, err
}

// PruneDetail removes the events older than before. Partitions whose whole
// range lies before it are detached and dropped (their rows counted first);
// in the partition the cut falls in, and in a default partition if someone
// made one, the older rows are deleted in chunks. A partition that holds
// any time at or after the cut is never dropped. Detaching uses DETACH
// PARTITION CONCURRENTLY (Postgres 14 and later, without a default
// partition), which takes no lock a writer waits for; otherwise the detach
// waits at most pgDropLockTimeout for its lock. Only one process prunes a
// database at a time: another one finds it busy and reports Skipped.
func (s *Postgres) PruneDetail(ctx context.Context, before int64) (Pruned, error) {
	var p Pruned
	fail := func(err error) (Pruned, error) {
		return p, fmt.Errorf("store %s: pruning: %s", s.name, oneLine(err))
	}
	if s.readOnly {
		return p, fmt.Errorf("store %s: database is read-only; nothing pruned", s.name)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fail(err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", pruneLockKey).Scan(&locked); err != nil {
		return fail(err)
	}
	if !locked {
		p.Skipped = true
		return p, nil
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", pruneLockKey)
	// Digests of windows the cut falls in would no longer match their events.
	if _, err := conn.Exec(ctx, fmt.Sprintf(pruneDigests, "$1"), before); err != nil {
		return fail(fmt.Errorf("deleting digests: %w", err))
	}

	parts, err := listPartitions(ctx, conn.Conn())
	if err != nil {
		return fail(err)
	}
	concurrent := parts.version >= 140000 && !parts.hasDefault
	// While one detach is pending no other can begin: finish it first.
	slices.SortStableFunc(parts.list, func(a, b pgPartition) int {
		return cmp.Compare(b2i(b.pending), b2i(a.pending))
	})
	for _, pt := range parts.list {
		if pt.upper > before {
			continue // it can hold times at or after the cut
		}
		n, err := dropPartitionAs(ctx, conn.Conn(), parts.parent, pt, concurrent, before)
		if err != nil {
			return fail(fmt.Errorf("partition %s: %w", pt.name, err))
		}
		p.Events += n
		p.Partitions++
		s.mu.Lock()
		for start := range s.partitions {
			if start < pt.upper && start+partitionSpan > pt.lower {
				delete(s.partitions, start)
			}
		}
		s.mu.Unlock()
	}
	nth := func(ctx context.Context, before int64, chunk int) (int64, bool, error) {
		var ts int64
		err := conn.QueryRow(ctx, "SELECT ts FROM events WHERE ts < $1 ORDER BY ts LIMIT 1 OFFSET $2", before, chunk).Scan(&ts)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false, nil
		}
		return ts, err == nil, err
	}
	del := func(ctx context.Context, below int64, through bool) (int64, error) {
		q := "DELETE FROM events WHERE ts < $1"
		if through {
			q = "DELETE FROM events WHERE ts <= $1"
		}
		tag, err := conn.Exec(ctx, q, below)
		return tag.RowsAffected(), err
	}
	n, err := deleteOlder(ctx, before, pgPruneChunk, nth, del, nil)
	p.Events += n
	if err != nil {
		return fail(err)
	}
	if err := pgPruneSeconds(ctx, conn.Conn(), before); err != nil {
		return fail(fmt.Errorf("deleting the counts per second: %w", err))
	}
	// Entities whose every event went with the cut.
	if _, err := conn.Exec(ctx, "DELETE FROM entities WHERE last_ts < $1", before); err != nil {
		return fail(fmt.Errorf("deleting entities: %w", err))
	}
	return p, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pgPartition is one partition of events, with its range [lower, upper);
// the default partition has lower math.MinInt64 and upper math.MaxInt64.
type pgPartition struct {
	schema, name string
	lower, upper int64
	pending      bool // a concurrent detach was interrupted: it needs FINALIZE
}

type pgPartitions struct {
	parent     pgx.Identifier // events, schema-qualified
	list       []pgPartition
	hasDefault bool
	version    int
}

// pgBound reads pg_get_expr's text of a range partition's bound.
var pgBound = regexp.MustCompile(`^FOR VALUES FROM \('?(-?\d+|MINVALUE)'?\) TO \('?(-?\d+|MAXVALUE)'?\)$`)

// listPartitions reads the partitions of events from the catalog: their
// bounds, not their names, decide what a pass may drop, so partitions
// made by hand or for far-off days are judged by what they can hold.
func listPartitions(ctx context.Context, conn *pgx.Conn) (pgPartitions, error) {
	var out pgPartitions
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, n.nspname
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = 'events'::regclass`).Scan(&out.version, &schema); err != nil {
		return out, err
	}
	out.parent = pgx.Identifier{schema, "events"}
	pending := "false"
	if out.version >= 140000 {
		pending = "i.inhdetachpending"
	}
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname, pg_get_expr(c.relpartbound, c.oid), `+pending+`
		FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE i.inhparent = 'events'::regclass`)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var pt pgPartition
		var bound string
		if err := rows.Scan(&pt.schema, &pt.name, &bound, &pt.pending); err != nil {
			return out, err
		}
		if bound == "DEFAULT" {
			out.hasDefault = true
			continue // never dropped: its old rows are deleted with the others
		}
		m := pgBound.FindStringSubmatch(bound)
		if m == nil {
			continue // not a bound this code knows how to judge: leave it
		}
		pt.lower, pt.upper = math.MinInt64, math.MaxInt64
		if m[1] != "MINVALUE" {
			if pt.lower, err = strconv.ParseInt(m[1], 10, 64); err != nil {
				continue
			}
		}
		if m[2] != "MAXVALUE" {
			if pt.upper, err = strconv.ParseInt(m[2], 10, 64); err != nil {
				continue
			}
		}
		out.list = append(out.list, pt)
	}
	return out, rows.Err()
}

// dropPartition detaches pt from events, counts its rows and drops it. The
// count runs on the detached table, which no writer can reach any more.
func dropPartition(ctx context.Context, conn *pgx.Conn, parent pgx.Identifier, pt pgPartition, concurrent bool) (int64, error) {
	table := pgx.Identifier{pt.schema, pt.name}.Sanitize()
	detach := "ALTER TABLE " + parent.Sanitize() + " DETACH PARTITION " + table
	switch {
	case pt.pending:
		if _, err := conn.Exec(ctx, detach+" FINALIZE"); err != nil {
			return 0, fmt.Errorf("finishing an interrupted detach: %w", err)
		}
	case concurrent:
		if _, err := conn.Exec(ctx, detach+" CONCURRENTLY"); err != nil {
			return 0, fmt.Errorf("detaching: %w", err)
		}
	default:
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+pgDropLockTimeout+"'"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, detach)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("detaching: %w", err)
		}
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting its rows: %w", err)
	}
	if _, err := conn.Exec(ctx, "DROP TABLE "+table); err != nil {
		return 0, fmt.Errorf("dropping: %w", err)
	}
	return n, nil
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
	// Only when missing: a role that may not create tables (see SetupRoles)
	// is refused CREATE … IF NOT EXISTS even when the table is there.
	var exists bool
	if err := m.pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		if _, err := m.pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return 0, err
		}
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

// pgUpsertEntities records the batch's entities in the entities table (see
// state.go), in the batch's transaction. ents is in key order, so two
// writers lock shared rows in the same order.
func pgUpsertEntities(ctx context.Context, tx pgx.Tx, ents []entitySpan) error {
	if len(ents) == 0 {
		return nil
	}
	keys, nss := make([]string, len(ents)), make([]string, len(ents))
	firsts, lasts := make([]int64, len(ents)), make([]int64, len(ents))
	for i, en := range ents {
		keys[i], nss[i], firsts[i], lasts[i] = en.key, en.namespace, en.first, en.last
	}
	_, err := tx.Exec(ctx, `INSERT INTO entities (entity, namespace, first_ts, last_ts)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
ON CONFLICT (entity) DO UPDATE SET first_ts = LEAST(entities.first_ts, EXCLUDED.first_ts), last_ts = GREATEST(entities.last_ts, EXCLUDED.last_ts)
WHERE EXCLUDED.first_ts < entities.first_ts OR EXCLUDED.last_ts > entities.last_ts`, keys, nss, firsts, lasts)
	if err != nil {
		return fmt.Errorf("recording entities: %w", err)
	}
	return nil
}

// pgStateAt probes events_entity_ts once per entity known at $1, newest
// first from the entity's last time: in the newest day partition that can
// hold it (run-time partition pruning), usually the one probe.
var pgStateAt = `SELECT ` + strings.Join(prefixed("e.", columns), ", ") + `
FROM entities en CROSS JOIN LATERAL (
	SELECT * FROM events x WHERE x.entity = en.entity AND x.ts <= LEAST($1, en.last_ts)
	ORDER BY x.ts DESC, x.id DESC LIMIT 1) e
WHERE en.first_ts <= $1`

// pgCountState counts the entities pgStateAt probes (the same filter
// follows each).
const pgCountState = `SELECT count(*) FROM entities en WHERE en.first_ts <= $1`

func prefixed(p string, cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = p + c
	}
	return out
}

// StateAt implements Store. The query runs without Postgres's JIT: on a
// store that has run for days its plan's cost passes jit_above_cost, and
// compiling it took 165 ms of its 690–850 ms for 166,897 entities, with no
// time won back in the probes (docs/scale.md).
func (s *Postgres) StateAt(ctx context.Context, at int64, namespace string) ([]event.Event, error) {
	filter, args := "", []any{at}
	if namespace != "" {
		filter = " AND en.namespace = $2"
		args = append(args, namespace)
	}
	var out []event.Event
	// One snapshot for the count and the rows (repeatable read), so that
	// the slice is allocated once at its size: grown by append it would be
	// copied a quarter larger at a time (304 MB allocated for 59 MB kept
	// at 166,897 entities), each allocation fresh memory.
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
			return fmt.Errorf("store %s: querying the state at %d: %s", s.name, at, oneLine(err))
		}
		var n int
		if err := tx.QueryRow(ctx, pgCountState+filter, args...).Scan(&n); err != nil {
			return fmt.Errorf("store %s: counting the state at %d: %s", s.name, at, oneLine(err))
		}
		if n == 0 {
			return nil // a store younger than the instant: no probe to make
		}
		out = make([]event.Event, 0, n)
		rows, err := tx.Query(ctx, pgStateAt+filter, args...)
		if err != nil {
			return fmt.Errorf("store %s: querying the state at %d: %s", s.name, at, oneLine(err))
		}
		defer rows.Close()
		t := newScanTarget()
		for rows.Next() {
			t.laddr, t.raddr = netip.Addr{}, netip.Addr{}
			if err := rows.Scan(t.dest...); err != nil {
				return fmt.Errorf("store %s: reading the state at %d: %w", s.name, at, err)
			}
			e, err := t.finish()
			if err != nil {
				return err
			}
			// A copy, not a Clone: finish makes each row's strings and
			// attributes map anew (or shares one never written), as Scan
			// hands them to a reader that keeps them.
			out = append(out, *e)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store %s: reading the state at %d: %s", s.name, at, oneLine(err))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// One row per entity: the entities table lists each key once and the
	// probe takes one row of it (LIMIT 1), so only the order is left.
	sortByTimeThenID(out)
	return out, nil
}
