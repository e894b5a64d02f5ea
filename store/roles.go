package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Roles names the Postgres roles that SetupRoles grants to. The role that
// runs SetupRoles (the DSN of `drainscope migrate`) runs the migrations;
// the tables and the functions below are owned by Definer, a NOLOGIN role
// made for them that the migrating role is a member of, so that the
// functions that run as their owner never run as a superuser, even when
// migrate runs as one. The agent and the server never own anything:
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
//   - Both keep the list of entities current and the count of events per
//     second (SELECT, INSERT, UPDATE on entities and event_seconds: keys,
//     times and counts, no event's content); the server prunes both. It
//     cannot UPDATE or TRUNCATE events or change the schema.
//
// SetupRoles refuses, naming the reason, an agent or server role that can
// become more than that: a superuser; a role with CREATEROLE, BYPASSRLS or
// REPLICATION, itself or through a role it is a member of; a member of the
// owner, of Definer, of the schema's owner, of any predefined role
// (pg_read_all_data, pg_write_all_data, pg_execute_server_program, …), or
// of any role with rights on the tables (a day partition included) or
// CREATE in the schema. It revokes what other roles granted the two on the
// tables (a grant WITH GRANT OPTION passed on), as their grantor, and
// then checks that neither can read (the agent), change, empty or pass
// on events.
type Roles struct {
	Agent  string
	Server string
	// Definer owns the tables and the functions (default DefaultDefiner).
	Definer string
	// Keep is the retention: drainscope_create_partition takes days no
	// further back than this, and no further ahead than two days. Zero
	// or less: DefaultRetention.
	Keep time.Duration
	// Passwords set on the roles when given (empty: left as they are).
	AgentPassword, ServerPassword string
}

// DefaultDefiner is the NOLOGIN role that owns the tables and functions
// when Roles.Definer is empty.
const DefaultDefiner = "drainscope_definer"

// PartitionDaysAhead is how many days ahead of today
// drainscope_create_partition creates a partition: an agent's clock may run
// ahead of the database's, and no further.
const PartitionDaysAhead = 2

// pgPartitionLockTimeout bounds how long drainscope_create_partition waits
// for the lock it takes on events (SHARE UPDATE EXCLUSIVE, which no reader
// or writer of rows waits for); a caller that gives up retries.
const pgPartitionLockTimeout = "2s"

// The functions run as their owner (SECURITY DEFINER) so that a writer can
// add a day partition without owning events: Postgres lets only the
// parent's owner attach a partition. Each checks its argument, so EXECUTE
// grants no more than the one operation.
//
// A partition is made as a table of its own and then attached: ATTACH
// PARTITION takes SHARE UPDATE EXCLUSIVE on events, which readers and
// writers of rows do not wait for, where CREATE TABLE … PARTITION OF takes
// ACCESS EXCLUSIVE, which every reader waits for until the caller's
// transaction ends. lock_timeout bounds the wait for that lock.
const rolesFunctions = `
CREATE OR REPLACE FUNCTION drainscope_create_partition(start bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{schema}}, pg_temp
SET lock_timeout = '` + pgPartitionLockTimeout + `' AS $fn$
DECLARE
	span constant bigint := 86400000000000;
	today constant bigint := floor(extract(epoch FROM clock_timestamp()) / 86400)::bigint * span;
	part text;
BEGIN
	IF start IS NULL OR start % span <> 0 THEN
		RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
			MESSAGE = format('partition start %s is not a UTC day boundary', start);
	END IF;
	IF start < today - {{daysBack}} * span OR start > today + {{daysAhead}} * span THEN
		RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
			MESSAGE = format('partition day %s is outside the days this function creates (%s days back to %s ahead of %s)',
				to_char(to_timestamp(start / 1000000000) AT TIME ZONE 'UTC', 'YYYY-MM-DD'), {{daysBack}}, {{daysAhead}},
				to_char(to_timestamp(today / 1000000000) AT TIME ZONE 'UTC', 'YYYY-MM-DD'));
	END IF;
	part := 'events_p' || to_char(to_timestamp(start / 1000000000) AT TIME ZONE 'UTC', 'YYYYMMDD');
	IF to_regclass(quote_ident(part)) IS NOT NULL THEN
		RETURN;
	END IF;
	EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
	EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', part, start, start + span);
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

// rolesTables are the tables SetupRoles hands to the definer role.
var rolesTables = []string{"events", "events_shape", "schema_migrations", "digests"}

// rolesAllTables are every table SetupRoles grants on; with events' day
// partitions, rolesRelations (a condition on pg_class c, with the list as
// the query's $2) picks them all.
var rolesAllTables = append(slices.Clone(rolesTables), "entities", "event_seconds")

const rolesRelations = `(c.oid = ANY (SELECT to_regclass(t) FROM unnest($2::text[]) t)
	OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass('events')))`

// hasAttr says that a role, or one it is a member of, has an attribute.
func hasAttr(self bool, name, a string) string {
	if self {
		return "has " + a
	}
	return "is a member of " + name + ", which has " + a
}

// escalations lists why role (by name) could become more than a role of
// its own: each role it is a member of (itself included) is checked for
// the attributes and the memberships that reach further. Empty when none.
func escalations(ctx context.Context, tx pgx.Tx, role, owner, definer string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT r.rolname, r.rolname = me.rolname, r.rolsuper, r.rolcreaterole, r.rolbypassrls, r.rolreplication,
			r.oid < 16384 AND r.rolname LIKE 'pg\_%',
			r.oid = (SELECT nspowner FROM pg_namespace WHERE nspname = current_schema()),
			coalesce((SELECT string_agg(DISTINCT c.relname, ', ' ORDER BY c.relname) FROM pg_class c
				WHERE `+rolesRelations+` AND (c.relowner = r.oid
					OR EXISTS (SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = r.oid))), ''),
			EXISTS (SELECT 1 FROM pg_namespace n, aclexplode(n.nspacl) a
				WHERE n.nspname = current_schema() AND a.grantee = r.oid AND a.privilege_type = 'CREATE')
		FROM pg_roles me JOIN pg_roles r ON pg_has_role(me.oid, r.oid, 'MEMBER')
		WHERE me.rolname = $1 ORDER BY r.rolname`, role, rolesAllTables)
	if err != nil {
		return nil, err
	}
	var why []string
	for rows.Next() {
		var name, rights string
		var self, super, createRole, bypassRLS, replication, predefined, schemaOwner, schemaCreate bool
		if err := rows.Scan(&name, &self, &super, &createRole, &bypassRLS, &replication, &predefined, &schemaOwner, &rights, &schemaCreate); err != nil {
			return nil, err
		}
		// A role it is a member of with rights of its own on the tables
		// or the schema lends them: its own grants SetupRoles resets.
		if !self && rights != "" {
			why = append(why, "is a member of "+name+", which has rights on "+rights)
		}
		if !self && schemaCreate {
			why = append(why, "is a member of "+name+", which may create in the schema")
		}
		attr := func(a string) string { return hasAttr(self, name, a) }
		switch {
		case !self && name == owner:
			why = append(why, "is a member of "+name+", the owner that runs the migrations")
		case !self && name == definer:
			why = append(why, "is a member of "+name+", which owns the tables")
		case !self && predefined:
			why = append(why, "is a member of the predefined role "+name)
		}
		if schemaOwner {
			if self {
				why = append(why, "owns the schema")
			} else {
				why = append(why, "is a member of "+name+", which owns the schema")
			}
		}
		if super {
			if self {
				why = append(why, "is a superuser")
			} else {
				why = append(why, "is a member of "+name+", a superuser")
			}
		}
		if createRole {
			why = append(why, attr("CREATEROLE"))
		}
		if bypassRLS {
			why = append(why, attr("BYPASSRLS"))
		}
		if replication {
			// A replication connection streams every table's rows.
			why = append(why, attr("REPLICATION"))
		}
	}
	return why, rows.Err()
}

// SetupRoles migrates the database dsn names (a Postgres DSN of the owning
// role), creates the roles r names when they do not exist (the agent and
// the server LOGIN, the definer NOLOGIN), hands the tables and functions to
// the definer, and grants each of the others what it needs and nothing
// else. It is idempotent: run it again after every upgrade, since a
// migration may add objects.
func SetupRoles(ctx context.Context, dsn string, r Roles) error {
	if r.Agent == "" || r.Server == "" {
		return errors.New("roles: both an agent and a server role are needed")
	}
	if r.Definer == "" {
		r.Definer = DefaultDefiner
	}
	if r.Agent == r.Server || r.Definer == r.Agent || r.Definer == r.Server {
		return errors.New("roles: the agent, the server and the definer need roles of their own")
	}
	if r.Keep <= 0 {
		r.Keep = DefaultRetention
	}
	daysBack := int64((r.Keep + 24*time.Hour - 1) / (24 * time.Hour))
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
	if r.Agent == owner || r.Server == owner || r.Definer == owner {
		return fmt.Errorf("store %s: roles: %s runs the migrations; the agent, the server and the definer need roles of their own", st.name, owner)
	}
	agent, server, sch := pgx.Identifier{r.Agent}.Sanitize(), pgx.Identifier{r.Server}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	definer := pgx.Identifier{r.Definer}.Sanitize()
	return pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		if err := setupDefiner(ctx, tx, r.Definer, owner); err != nil {
			return fmt.Errorf("store %s: roles: %w", st.name, err)
		}
		for _, role := range []struct{ name, ident, password string }{{r.Agent, agent, r.AgentPassword}, {r.Server, server, r.ServerPassword}} {
			why, err := escalations(ctx, tx, role.name, owner, r.Definer)
			if err != nil {
				return fail("reading role "+role.name, err)
			}
			if len(why) > 0 {
				return fmt.Errorf("store %s: roles: %s can become more than it is: it %s; give it a plain role of its own",
					st.name, role.name, strings.Join(why, "; it "))
			}
			var exists bool
			if err := tx.QueryRow(ctx, "SELECT count(*) > 0 FROM pg_roles WHERE rolname = $1", role.name).Scan(&exists); err != nil {
				return fail("reading role "+role.name, err)
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
		fns := strings.NewReplacer("{{schema}}", sch, "{{daysBack}}", fmt.Sprint(daysBack),
			"{{daysAhead}}", fmt.Sprint(PartitionDaysAhead)).Replace(rolesFunctions)
		stmts := []string{
			fns,
			// CREATE OR REPLACE keeps a function's owner: hand both over.
			"ALTER FUNCTION drainscope_create_partition(bigint) OWNER TO " + definer,
			"ALTER FUNCTION drainscope_drop_partition(regclass, bigint) OWNER TO " + definer,
			// Nothing by default: PUBLIC may execute any new function.
			"REVOKE ALL ON FUNCTION drainscope_create_partition(bigint), drainscope_drop_partition(regclass, bigint) FROM PUBLIC",
			"REVOKE ALL ON events, events_shape, schema_migrations, digests, entities, event_seconds FROM PUBLIC",
			"REVOKE ALL ON events, events_shape, schema_migrations, digests, entities, event_seconds FROM " + agent + ", " + server,
			"REVOKE CREATE ON SCHEMA " + sch + " FROM PUBLIC, " + agent + ", " + server,
			"GRANT USAGE ON SCHEMA " + sch + " TO " + agent + ", " + server,
			// The definer makes the day partitions there.
			"GRANT USAGE, CREATE ON SCHEMA " + sch + " TO " + definer,
			"GRANT SELECT ON schema_migrations, events_shape TO " + agent + ", " + server,
			"GRANT INSERT ON events TO " + agent + ", " + server,
			"GRANT SELECT, DELETE ON events TO " + server,
			// Every writer keeps the entity list current (StateAt); the
			// server also prunes it. It names entities, no event's detail.
			"GRANT SELECT, INSERT, UPDATE ON entities TO " + agent + ", " + server,
			"GRANT DELETE ON entities TO " + server,
			// And the count of events per second (CountEvents), the
			// server its reads and pruning too. Counts, no event's detail.
			"GRANT SELECT, INSERT, UPDATE ON event_seconds TO " + agent + ", " + server,
			"GRANT DELETE ON event_seconds TO " + server,
			// The server keeps the timelines it computed (store.Digests).
			"GRANT SELECT, INSERT, UPDATE, DELETE ON digests TO " + server,
			"GRANT EXECUTE ON FUNCTION drainscope_create_partition(bigint) TO " + agent + ", " + server,
			"GRANT EXECUTE ON FUNCTION drainscope_drop_partition(regclass, bigint) TO " + server,
		}
		for _, t := range rolesTables {
			stmts = append(stmts, "ALTER TABLE "+t+" OWNER TO "+definer)
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fail("granting", err)
			}
		}
		// The partitions made so far, by the owner or by an older version
		// of the function: the definer drops them when retention says so.
		rows, err := tx.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_inherits i
			JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE i.inhparent = 'events'::regclass AND NOT pg_has_role($1, c.relowner, 'USAGE')`, r.Definer)
		if err != nil {
			return fail("listing partitions", err)
		}
		parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fail("listing partitions", err)
		}
		for _, p := range parts {
			if _, err := tx.Exec(ctx, "ALTER TABLE "+p+" OWNER TO "+definer); err != nil {
				return fail("handing "+p+" to "+r.Definer, err)
			}
		}
		if err := revokeOthersGrants(ctx, tx, []string{r.Agent, r.Server}); err != nil {
			return fmt.Errorf("store %s: roles: %w", st.name, err)
		}
		return checkGranted(ctx, tx, r)
	})
}

// revokeOthersGrants revokes what roles other than a table's owner granted
// the roles on the tables (a role given a privilege WITH GRANT OPTION may
// pass it on): the owner's REVOKE leaves those standing. Each is revoked
// as its grantor, which the migrating role must be able to become.
func revokeOthersGrants(ctx context.Context, tx pgx.Tx, roles []string) error {
	rows, err := tx.Query(ctx, `SELECT c.oid::regclass::text, pg_get_userbyid(a.grantor), pg_get_userbyid(a.grantee), a.privilege_type
		FROM pg_class c, aclexplode(c.relacl) a
		WHERE `+rolesRelations+` AND a.grantor <> c.relowner AND pg_get_userbyid(a.grantee) = ANY ($1::text[])
		ORDER BY 1, 2, 3, 4`, roles, rolesAllTables)
	if err != nil {
		return fmt.Errorf("reading the tables' grants: %s", oneLine(err))
	}
	type grant struct{ Table, Grantor, Grantee, Priv string }
	grants, err := pgx.CollectRows(rows, pgx.RowToStructByPos[grant])
	if err != nil {
		return fmt.Errorf("reading the tables' grants: %s", oneLine(err))
	}
	for _, g := range grants {
		revoke := "REVOKE " + g.Priv + " ON " + g.Table + " FROM " + pgx.Identifier{g.Grantee}.Sanitize() + " CASCADE"
		for _, q := range []string{"SET LOCAL ROLE " + pgx.Identifier{g.Grantor}.Sanitize(), revoke, "RESET ROLE"} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s granted %s on %s to %s, which it must not have; revoking it as %s: %s (run %q as %s)",
					g.Grantor, g.Priv, g.Table, g.Grantee, g.Grantor, oneLine(err), revoke, g.Grantor)
			}
		}
	}
	return nil
}

// checkGranted holds the roles to what SetupRoles means them to have,
// after every grant: the agent cannot read, change or empty events, nor
// pass on what it has; the server cannot change or empty them, nor pass
// anything on. It catches what the refusals above did not foresee.
func checkGranted(ctx context.Context, tx pgx.Tx, r Roles) error {
	for _, c := range []struct{ role, privs string }{
		{r.Agent, "SELECT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER, INSERT WITH GRANT OPTION"},
		{r.Server, "UPDATE, TRUNCATE, REFERENCES, TRIGGER, SELECT WITH GRANT OPTION, INSERT WITH GRANT OPTION, DELETE WITH GRANT OPTION"},
	} {
		for _, p := range strings.Split(c.privs, ", ") {
			var has bool
			if err := tx.QueryRow(ctx, "SELECT has_table_privilege($1, 'events', $2)", c.role, p).Scan(&has); err != nil {
				return fmt.Errorf("checking %s's rights: %s", c.role, oneLine(err))
			}
			if has {
				return fmt.Errorf("after the grants %s still has %s on events, through a grant this cannot revoke: revoke it and run migrate --roles again", c.role, p)
			}
		}
	}
	return nil
}

// setupDefiner creates the NOLOGIN role that owns the tables and the
// functions when it does not exist, refuses one that can log in or do
// more than own, and makes the migrating role a member of it, so that the
// migrations go on altering what it owns.
func setupDefiner(ctx context.Context, tx pgx.Tx, definer, owner string) error {
	ident := pgx.Identifier{definer}.Sanitize()
	var exists, bad bool
	if err := tx.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_or(rolcanlogin OR rolsuper OR rolcreaterole OR rolbypassrls), false)
		FROM pg_roles WHERE rolname = $1`, definer).Scan(&exists, &bad); err != nil {
		return fmt.Errorf("reading role %s: %s", definer, oneLine(err))
	}
	if bad {
		return fmt.Errorf("the definer role %s can log in or is a superuser or has CREATEROLE or BYPASSRLS: it must be a NOLOGIN role that only owns", definer)
	}
	if !exists {
		if _, err := tx.Exec(ctx, "CREATE ROLE "+ident+" NOLOGIN"); err != nil {
			return fmt.Errorf("creating role %s: %s", definer, oneLine(err))
		}
	}
	why, err := escalations(ctx, tx, definer, owner, "")
	if err != nil {
		return fmt.Errorf("reading role %s: %s", definer, oneLine(err))
	}
	if len(why) > 0 {
		return fmt.Errorf("the definer role %s can become more than it is: it %s", definer, strings.Join(why, "; it "))
	}
	var member bool
	if err := tx.QueryRow(ctx, "SELECT pg_has_role(current_user, $1, 'USAGE')", definer).Scan(&member); err != nil {
		return fmt.Errorf("reading role %s: %s", definer, oneLine(err))
	}
	if !member {
		if _, err := tx.Exec(ctx, "GRANT "+ident+" TO "+pgx.Identifier{owner}.Sanitize()); err != nil {
			return fmt.Errorf("making %s a member of %s: %s", owner, definer, oneLine(err))
		}
	}
	return nil
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

// CurrentRole names the role s is connected as and says whether it is a
// superuser, for `drainscope migrate` to warn about.
func (s *Postgres) CurrentRole(ctx context.Context) (name string, superuser bool, err error) {
	err = s.pool.QueryRow(ctx, "SELECT rolname, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&name, &superuser)
	return name, superuser, err
}
