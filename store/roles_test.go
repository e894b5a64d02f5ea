package store

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/pgtest"
)

// asRole returns dsn with its user replaced (the throwaway cluster trusts
// every local connection, so no password is needed).
func asRole(t *testing.T, dsn, role string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// setupRoles runs SetupRoles as the owner of a fresh schema and returns the
// owner's, the agent's and the server's DSNs.
func setupRoles(t *testing.T) (owner, agent, server string) {
	t.Helper()
	ctx := context.Background()
	owner = pgtest.Schema(t)
	suffix := fmt.Sprintf("%d_%d", time.Now().UnixNano(), rand.IntN(1<<20))
	r := Roles{Agent: "ds_agent_" + suffix, Server: "ds_server_" + suffix, Definer: "ds_definer_" + suffix}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, owner)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		for _, role := range []string{r.Agent, r.Server, r.Definer} {
			c.Exec(ctx, "DROP OWNED BY "+role)
			c.Exec(ctx, "DROP ROLE "+role)
		}
	})
	if err := SetupRoles(ctx, owner, r); err != nil {
		t.Fatal(err)
	}
	// Twice: after an upgrade it runs again over what it made.
	if err := SetupRoles(ctx, owner, r); err != nil {
		t.Fatalf("second run: %v", err)
	}
	return owner, asRole(t, owner, r.Agent), asRole(t, owner, r.Server)
}

// refused runs q as dsn's role and fails t unless Postgres refuses it for
// want of privilege.
func refused(t *testing.T, who, dsn, q string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, q)
	if code := pgCode(err); code != "42501" {
		t.Errorf("%s ran %q: error %v (code %q), want insufficient_privilege (42501)", who, q, err, code)
	}
}

func TestPostgresRoles(t *testing.T) {
	ctx := context.Background()
	owner, agentDSN, serverDSN := setupRoles(t)
	// Yesterday: the partition function takes only days within the
	// retention window back and two days ahead.
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	batch := append(eventgen.Rollout(50, day, 1, "checkout"), eventgen.Rollout(50, day.AddDate(0, 0, 1), 2, "checkout")...)

	// The agent writes, creating the day partitions through the owner's
	// function, and a retried batch goes through the temporary table.
	agent, err := OpenPostgres(ctx, agentDSN)
	if err != nil {
		t.Fatalf("agent opens the store: %v", err)
	}
	defer agent.Close()
	if err := agent.Append(ctx, batch); err != nil {
		t.Fatalf("agent writes: %v", err)
	}
	agent.partitions = map[int64]bool{} // as a restarted agent
	if err := agent.Append(ctx, batch); err != nil {
		t.Fatalf("agent writes a batch again: %v", err)
	}
	part := partitionName(partitionStart(day.UnixNano()))
	for _, q := range []string{
		"SELECT count(*) FROM events",
		"SELECT * FROM " + part,
		"COPY events TO STDOUT",
		"DELETE FROM events",
		"UPDATE events SET kind = 'x'",
		"TRUNCATE events",
		"DROP TABLE " + part,
		"CREATE TABLE mine (x int)",
		"CREATE TABLE mine PARTITION OF events FOR VALUES FROM (0) TO (1)",
		"SELECT drainscope_drop_partition('" + part + "', 9223372036854775807)",
		"COPY (SELECT 1) TO PROGRAM 'true'",
		"COPY events FROM PROGRAM 'true'",
	} {
		refused(t, "the agent", agentDSN, q)
	}

	// The server reads, writes what it ingests, and prunes through the
	// owner's function; it cannot change or empty the schema.
	server, err := OpenPostgres(ctx, serverDSN)
	if err != nil {
		t.Fatalf("server opens the store: %v", err)
	}
	defer server.Close()
	if n := count(t, server, Query{}); n != len(batch) {
		t.Fatalf("server reads %d events, want %d", n, len(batch))
	}
	later := eventgen.Rollout(10, day.AddDate(0, 0, 2), 3, "checkout")
	if err := server.Append(ctx, later); err != nil {
		t.Fatalf("server ingests: %v", err)
	}
	for _, q := range []string{
		"UPDATE events SET kind = 'x'",
		"TRUNCATE events",
		"DROP TABLE events",
		"DROP TABLE " + part,
		"ALTER TABLE events DETACH PARTITION " + part,
		"CREATE TABLE mine (x int)",
		"INSERT INTO schema_migrations (version, name) VALUES (99, 'x')",
		"COPY (SELECT 1) TO PROGRAM 'true'",
		"COPY events FROM PROGRAM 'true'",
	} {
		refused(t, "the server", serverDSN, q)
	}
	// The drop function takes nothing that may hold times at or after the cut.
	c, err := pgx.Connect(ctx, serverDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "SELECT drainscope_drop_partition($1, $2)", part, day.UnixNano()); err == nil {
		t.Error("drainscope_drop_partition dropped a partition ending after the cut")
	}
	cut := day.AddDate(0, 0, 1).Add(time.Hour).UnixNano()
	p, err := server.PruneDetail(ctx, cut)
	if err != nil {
		t.Fatalf("server prunes: %v", err)
	}
	var older int
	for _, e := range batch {
		if e.Time < cut {
			older++
		}
	}
	if p.Partitions != 1 || p.Events != int64(older) {
		t.Errorf("pruned %+v, want 1 partition and %d events", p, older)
	}
	left := len(batch) + len(later) - older
	if n := count(t, server, Query{}); n != left {
		t.Errorf("after pruning %d events left, want %d", n, left)
	}
	// The counts per second the agent kept (copied, then retried) and the
	// server pruned still say what is stored.
	if n, err := server.CountEvents(ctx, event.Window{From: 1, To: math.MaxInt64}); err != nil || n != int64(left) {
		t.Errorf("CountEvents = %d, %v; want %d", n, err, left)
	}

	// Neither role may be one that can run programs.
	if err := SetupRoles(ctx, owner, Roles{Agent: "postgres", Server: "ds_none"}); err == nil {
		t.Error("SetupRoles accepted a superuser as the agent's role")
	}

	// The functions that run as their owner run as a role made for them:
	// one that cannot log in and is no superuser.
	var fnOwner string
	var super, login bool
	if err := c.QueryRow(ctx, `SELECT r.rolname, r.rolsuper, r.rolcanlogin FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
		WHERE p.oid = 'drainscope_create_partition(bigint)'::regprocedure`).Scan(&fnOwner, &super, &login); err != nil {
		t.Fatal(err)
	}
	if super || login {
		t.Errorf("drainscope_create_partition is owned by %s (superuser %v, login %v), want a NOLOGIN role that is no superuser", fnOwner, super, login)
	}

	t.Run("escalations", testRolesRefuseEscalation)
	t.Run("others' grants", testRolesRevokeOthersGrants)
}

// escalationRole creates a role (LOGIN unless attrs say NOLOGIN) for a test, as the throwaway
// cluster's superuser, with the given attributes and memberships; it is
// dropped afterwards.
func escalationRole(t *testing.T, owner, attrs string, memberOf ...string) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("ds_esc_%d_%d", time.Now().UnixNano(), rand.IntN(1<<20))
	c, err := pgx.Connect(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if !strings.Contains(attrs, "NOLOGIN") {
		attrs = "LOGIN " + attrs
	}
	if _, err := c.Exec(ctx, "CREATE ROLE "+name+" "+attrs); err != nil {
		t.Fatal(err)
	}
	for _, m := range memberOf {
		if _, err := c.Exec(ctx, "GRANT "+m+" TO "+name); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, owner)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		c.Exec(ctx, "DROP OWNED BY "+name)
		c.Exec(ctx, "DROP ROLE "+name)
	})
	return name
}

// A role that can make itself more than it is may be neither the agent's
// nor the server's, and the refusal names why. Each of these was accepted
// once: a role with CREATEROLE granted itself the owner and read events; a
// member of the owner dropped digests; a member of pg_read_all_data read
// everything.
func testRolesRefuseEscalation(t *testing.T) {
	ctx := context.Background()
	owner, _, _ := setupRoles(t)
	var ownerRole, definer string
	c, err := pgx.Connect(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.QueryRow(ctx, "SELECT current_user, pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'events'::regclass").Scan(&ownerRole, &definer); err != nil {
		t.Fatal(err)
	}
	// A plain role in between, which the owner's membership reaches
	// through: membership is transitive.
	viaOwner := escalationRole(t, owner, "NOLOGIN")
	if _, err := c.Exec(ctx, "GRANT "+pgx.Identifier{ownerRole}.Sanitize()+" TO "+viaOwner); err != nil {
		t.Fatal(err)
	}
	creator := escalationRole(t, owner, "NOLOGIN CREATEROLE")
	// Groups with rights of their own: on events, on a day partition, in
	// the schema.
	readers := escalationRole(t, owner, "NOLOGIN")
	partReaders := escalationRole(t, owner, "NOLOGIN")
	creators := escalationRole(t, owner, "NOLOGIN")
	day := partitionName(partitionStart(time.Now().UnixNano()))
	for _, q := range []string{
		"GRANT SELECT ON events TO " + readers,
		"SELECT drainscope_create_partition(" + fmt.Sprint(partitionStart(time.Now().UnixNano())) + ")",
		"GRANT SELECT ON " + day + " TO " + partReaders,
		"GRANT CREATE ON SCHEMA " + pgx.Identifier{schemaOf(t, c)}.Sanitize() + " TO " + creators,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tc := range []struct {
		what, attrs string
		memberOf    []string
		want        string // in the error
	}{
		{"CREATEROLE", "CREATEROLE", nil, "CREATEROLE"},
		{"a member of a role with CREATEROLE", "", []string{creator}, "CREATEROLE"},
		{"BYPASSRLS", "BYPASSRLS", nil, "BYPASSRLS"},
		{"a member of the owner", "", []string{pgx.Identifier{ownerRole}.Sanitize()}, "member of " + ownerRole},
		{"a member of the owner through another role", "", []string{viaOwner}, "member of " + ownerRole},
		{"a member of pg_read_all_data", "", []string{"pg_read_all_data"}, "pg_read_all_data"},
		{"a member of pg_write_all_data", "", []string{"pg_write_all_data"}, "pg_write_all_data"},
		{"a superuser", "SUPERUSER", nil, "superuser"},
		{"REPLICATION", "REPLICATION", nil, "REPLICATION"},
		{"a member of a role that may read events", "", []string{readers}, "which has rights on events"},
		{"a member of a role that may read a day partition", "", []string{partReaders}, "which has rights on " + day},
		{"a member of a role that may create in the schema", "", []string{creators}, "may create in the schema"},
	} {
		for _, as := range []string{"agent", "server"} {
			role := escalationRole(t, owner, tc.attrs, tc.memberOf...)
			r := Roles{Agent: role, Server: "ds_plain_server_" + role, Definer: definer}
			if as == "server" {
				r = Roles{Agent: "ds_plain_agent_" + role, Server: role, Definer: definer}
			}
			t.Cleanup(func() {
				c, err := pgx.Connect(ctx, owner)
				if err != nil {
					return
				}
				defer c.Close(ctx)
				for _, n := range []string{r.Agent, r.Server} {
					c.Exec(ctx, "DROP OWNED BY "+n)
					c.Exec(ctx, "DROP ROLE IF EXISTS "+n)
				}
			})
			err := SetupRoles(ctx, owner, r)
			if err == nil {
				t.Errorf("SetupRoles accepted %s as the %s's role", tc.what, as)
				continue
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s as the %s's role: %v; want the reason (%q) named", tc.what, as, err, tc.want)
			}
		}
	}
}

// schemaOf is the connection's current schema.
func schemaOf(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	var s string
	if err := c.QueryRow(context.Background(), "SELECT current_schema()").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A role given a privilege WITH GRANT OPTION passed SELECT and DELETE on
// events, and its option, to the agent and the server: the owner's REVOKE
// leaves those grants standing. migrate --roles revokes them as their
// grantor, and afterwards neither can read, delete or grant on events.
func testRolesRevokeOthersGrants(t *testing.T) {
	ctx := context.Background()
	owner, agentDSN, serverDSN := setupRoles(t)
	c, err := pgx.Connect(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var definer string
	if err := c.QueryRow(ctx, "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'events'::regclass").Scan(&definer); err != nil {
		t.Fatal(err)
	}
	agent, server := roleOf(t, agentDSN), roleOf(t, serverDSN)
	lender := escalationRole(t, owner, "NOLOGIN")
	for _, q := range []string{
		"GRANT SELECT, DELETE, TRUNCATE ON events TO " + lender + " WITH GRANT OPTION",
		"GRANT USAGE ON SCHEMA " + pgx.Identifier{schemaOf(t, c)}.Sanitize() + " TO " + lender,
		"SET ROLE " + lender,
		"GRANT SELECT, DELETE, TRUNCATE ON events TO " + agent + " WITH GRANT OPTION",
		"GRANT TRUNCATE ON events TO " + server + " WITH GRANT OPTION",
		"RESET ROLE",
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// What the grants gave before the run: the agent reads events.
	if a, err := pgx.Connect(ctx, agentDSN); err != nil {
		t.Fatal(err)
	} else {
		_, err := a.Exec(ctx, "SELECT count(*) FROM events")
		a.Close(ctx)
		if err != nil {
			t.Fatalf("the lent grant did not take: %v", err)
		}
	}
	if err := SetupRoles(ctx, owner, Roles{Agent: agent, Server: server, Definer: definer}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SELECT count(*) FROM events", "DELETE FROM events", "TRUNCATE events"} {
		refused(t, "the agent", agentDSN, q)
	}
	refused(t, "the server", serverDSN, "TRUNCATE events")
	// A GRANT without the option is a warning, not an error: ask for the
	// option itself.
	for _, c2 := range []struct{ role, priv string }{
		{agent, "SELECT WITH GRANT OPTION"}, {agent, "INSERT WITH GRANT OPTION"}, {agent, "DELETE"},
		{server, "TRUNCATE WITH GRANT OPTION"}, {server, "SELECT WITH GRANT OPTION"},
	} {
		var has bool
		if err := c.QueryRow(ctx, "SELECT has_table_privilege($1, 'events', $2)", c2.role, c2.priv).Scan(&has); err != nil {
			t.Fatal(err)
		}
		if has {
			t.Errorf("%s still has %s on events", c2.role, c2.priv)
		}
	}
}

// roleOf is the user a DSN logs in as.
func roleOf(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username()
}
