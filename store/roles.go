package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Roles names the Postgres roles that SetupRoles grants to. The role that
// runs SetupRoles (the DSN of `drainscope migrate`) owns the schema, runs
// the migrations and owns the functions below; the others never own
// anything:
//
//   - Agent writes: INSERT on events (what COPY needs), SELECT on the
//     empty events_shape (the template of the temporary table a retried
//     batch goes through), and EXECUTE on drainscope_create_partition. It
//     cannot read a stored event.
//   - Server reads, and writes what it ingests (client failures pushed over
//     HTTP) and what retention removes: SELECT, INSERT and DELETE on events,
//     EXECUTE on drainscope_create_partition and drainscope_drop_partition;
//     and the digests it computes (Digests): SELECT, INSERT, UPDATE and
//     DELETE on digests.
//   - Both keep the list of entities current (SELECT, INSERT, UPDATE on
//     entities: keys and times, no event's content); the server prunes it. It cannot UPDATE or TRUNCATE events or change the
//     schema.
//
// Neither may run COPY … TO/FROM PROGRAM or read server files: that needs
// superuser or pg_execute_server_program, which SetupRoles refuses to grant
// to (it fails if either role has it).
type Roles struct {
	Agent  string
	Server string
	// Passwords set on the roles when given (empty: left as they are).
	AgentPassword, ServerPassword string
}

// The functions run as their owner (SECURITY DEFINER) so that a writer can
// add a day partition without owning events: Postgres lets only the
// parent's owner attach a partition. Each checks its argument, so EXECUTE
// grants no more than the one operation.
const rolesFunctions = `
CREATE OR REPLACE FUNCTION drainscope_create_partition(start bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{schema}}, pg_temp AS $fn$
DECLARE
	span constant bigint := 86400000000000;
BEGIN
	IF start IS NULL OR start % span <> 0 THEN
		RAISE EXCEPTION 'partition start % is not a UTC day boundary', start;
	END IF;
	EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF events FOR VALUES FROM (%s) TO (%s)',
		'events_p' || to_char(to_timestamp(start / 1000000000) AT TIME ZONE 'UTC', 'YYYYMMDD'),
		start, start + span);
END
$fn$;

CREATE OR REPLACE FUNCTION drainscope_drop_partition(part regclass, cut bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{schema}}, pg_temp AS $fn$
DECLARE
	upper_bound bigint;
	n bigint;
BEGIN
	SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''?(-?[0-9]+)''?\)$')::bigint
	  INTO upper_bound
	  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	 WHERE i.inhrelid = part AND i.inhparent = 'events'::regclass;
	IF upper_bound IS NULL OR cut IS NULL OR upper_bound > cut THEN
		RAISE EXCEPTION '% is not a day partition of events wholly before %', part, cut;
	END IF;
	PERFORM set_config('lock_timeout', '` + pgDropLockTimeout + `', true);
	EXECUTE format('ALTER TABLE events DETACH PARTITION %s', part);
	EXECUTE format('SELECT count(*) FROM %s', part) INTO n;
	EXECUTE format('DROP TABLE %s', part);
	RETURN n;
END
$fn$;

-- A retried batch is copied into a temporary table LIKE this one; LIKE
-- needs SELECT on its source, and this one never holds a row.
DROP TABLE IF EXISTS events_shape;
CREATE TABLE events_shape (LIKE events INCLUDING DEFAULTS);
`

// SetupRoles migrates the database dsn names (a Postgres DSN of the owning
// role), creates the roles r names when they do not exist (LOGIN), and
// grants each what it needs and nothing else. It is idempotent: run it
// again after every upgrade, since a migration may add objects.
func SetupRoles(ctx context.Context, dsn string, r Roles) error {
	if r.Agent == "" || r.Server == "" {
		return errors.New("roles: both an agent and a server role are needed")
	}
	if r.Agent == r.Server {
		return errors.New("roles: the agent and the server need roles of their own")
	}
	st, err := OpenPostgres(ctx, dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	fail := func(what string, err error) error {
		return fmt.Errorf("store %s: roles: %s: %s", st.name, what, oneLine(err))
	}
	var schema, owner string
	if err := st.pool.QueryRow(ctx, "SELECT current_schema(), current_user").Scan(&schema, &owner); err != nil {
		return fail("reading the schema", err)
	}
	if r.Agent == owner || r.Server == owner {
		return fmt.Errorf("store %s: roles: %s owns the schema; the agent and the server need roles of their own", st.name, owner)
	}
	agent, server, sch := pgx.Identifier{r.Agent}.Sanitize(), pgx.Identifier{r.Server}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	return pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		for _, role := range []struct{ name, ident, password string }{{r.Agent, agent, r.AgentPassword}, {r.Server, server, r.ServerPassword}} {
			var exists, privileged bool
			if err := tx.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_or(rolsuper OR pg_has_role(oid, 'pg_execute_server_program', 'USAGE')
				OR pg_has_role(oid, 'pg_read_server_files', 'USAGE') OR pg_has_role(oid, 'pg_write_server_files', 'USAGE')), false)
				FROM pg_roles WHERE rolname = $1`, role.name).Scan(&exists, &privileged); err != nil {
				return fail("reading role "+role.name, err)
			}
			if privileged {
				return fmt.Errorf("store %s: roles: %s is a superuser or may run programs or touch server files: give it a role of its own", st.name, role.name)
			}
			if !exists {
				if _, err := tx.Exec(ctx, "CREATE ROLE "+role.ident+" LOGIN"); err != nil {
					return fail("creating role "+role.name, err)
				}
			}
			if role.password != "" {
				// Utility statements take no parameters: quote it as a literal.
				lit, err := quoteLiteral(ctx, tx, role.password)
				if err != nil {
					return fail("quoting a password", err)
				}
				if _, err := tx.Exec(ctx, "ALTER ROLE "+role.ident+" LOGIN PASSWORD "+lit); err != nil {
					return fail("setting the password of "+role.name, err)
				}
			}
		}
		stmts := []string{
			strings.ReplaceAll(rolesFunctions, "{{schema}}", sch),
			// Nothing by default: PUBLIC may execute any new function.
			"REVOKE ALL ON FUNCTION drainscope_create_partition(bigint), drainscope_drop_partition(regclass, bigint) FROM PUBLIC",
			"REVOKE ALL ON events, events_shape, schema_migrations, digests, entities FROM PUBLIC",
			"REVOKE ALL ON events, events_shape, schema_migrations, digests, entities FROM " + agent + ", " + server,
			"REVOKE CREATE ON SCHEMA " + sch + " FROM PUBLIC, " + agent + ", " + server,
			"GRANT USAGE ON SCHEMA " + sch + " TO " + agent + ", " + server,
			"GRANT SELECT ON schema_migrations, events_shape TO " + agent + ", " + server,
			"GRANT INSERT ON events TO " + agent + ", " + server,
			"GRANT SELECT, DELETE ON events TO " + server,
			// Every writer keeps the entity list current (StateAt); the
			// server also prunes it. It names entities, no event's detail.
			"GRANT SELECT, INSERT, UPDATE ON entities TO " + agent + ", " + server,
			"GRANT DELETE ON entities TO " + server,
			// The server keeps the timelines it computed (store.Digests).
			"GRANT SELECT, INSERT, UPDATE, DELETE ON digests TO " + server,
			"GRANT EXECUTE ON FUNCTION drainscope_create_partition(bigint) TO " + agent + ", " + server,
			"GRANT EXECUTE ON FUNCTION drainscope_drop_partition(regclass, bigint) TO " + server,
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fail("granting", err)
			}
		}
		return nil
	})
}

func quoteLiteral(ctx context.Context, tx pgx.Tx, s string) (string, error) {
	var lit string
	err := tx.QueryRow(ctx, "SELECT quote_literal($1::text)", s).Scan(&lit)
	return lit, err
}

// RolesFromEnv reads the role passwords SetupRoles sets from
// DRAINSCOPE_AGENT_PASSWORD and DRAINSCOPE_SERVER_PASSWORD, so that they
// never appear in a process's arguments.
func (r Roles) FromEnv() Roles {
	r.AgentPassword = os.Getenv("DRAINSCOPE_AGENT_PASSWORD")
	r.ServerPassword = os.Getenv("DRAINSCOPE_SERVER_PASSWORD")
	return r
}

// ownsEvents says whether the connected role may change events' schema
// itself (create, detach and drop partitions); a role SetupRoles made goes
// through the owner's functions instead.
func ownsEvents(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	var owns bool
	err := q.QueryRow(ctx, "SELECT pg_has_role((SELECT relowner FROM pg_class WHERE oid = 'events'::regclass), 'USAGE')").Scan(&owns)
	return owns, err
}

// retryTableSource is the table a retried batch's temporary table is made
// LIKE: events, or for a role that may not read it, the empty events_shape.
func retryTableSource(ctx context.Context, tx pgx.Tx) (string, error) {
	var src string
	err := tx.QueryRow(ctx, "SELECT CASE WHEN has_table_privilege('events', 'SELECT') THEN 'events' ELSE 'events_shape' END").Scan(&src)
	return src, err
}

// dropPartitionAs drops pt like dropPartition when the connected role owns
// events, else through drainscope_drop_partition, which checks that pt lies
// wholly before the cut.
func dropPartitionAs(ctx context.Context, conn *pgx.Conn, parent pgx.Identifier, pt pgPartition, concurrent bool, before int64) (int64, error) {
	owns, err := ownsEvents(ctx, conn)
	if err != nil {
		return 0, err
	}
	if owns {
		return dropPartition(ctx, conn, parent, pt, concurrent)
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT drainscope_drop_partition($1::regclass, $2)", pgx.Identifier{pt.schema, pt.name}.Sanitize(), before).Scan(&n); err != nil {
		return 0, fmt.Errorf("dropping through drainscope_drop_partition: %w", err)
	}
	return n, nil
}
