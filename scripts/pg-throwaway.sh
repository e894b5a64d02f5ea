# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/bench.sh: start a throwaway
# PostgreSQL cluster in a temporary directory, listening on a free loopback
# port, and export its DSN as DRAINSCOPE_TEST_POSTGRES. pg_stop removes it.
# Arguments are the server's own settings, e.g. pg_start -c shared_buffers=1GB
# (docs/scale.md: a store that holds a 5,000-node window in its buffers).

pg_start() {
	local bindir
	bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	[ -x "$bindir/initdb" ] || { echo "postgres: no server binaries under /usr/lib/postgresql (apt-get install postgresql)" >&2; return 1; }
	PG_DIR=$(mktemp -d /tmp/drainscope-pg.XXXXXX)
	local run_as=()
	if [ "$(id -u)" = 0 ]; then
		# initdb refuses to run as root; the postgresql package brings this user.
		id postgres >/dev/null 2>&1 || useradd --system --home-dir "$PG_DIR" postgres
		chown postgres "$PG_DIR"
		run_as=(runuser -u postgres --)
	fi
	local port
	for _ in $(seq 50); do
		port=$((20000 + RANDOM % 20000))
		ss -ltnH "sport = :$port" 2>/dev/null | grep -q . || break
	done
	"${run_as[@]}" "$bindir/initdb" -D "$PG_DIR/data" -U postgres --auth=trust --no-sync -E UTF8 >"$PG_DIR/initdb.log" 2>&1 ||
		{ cat "$PG_DIR/initdb.log" >&2; return 1; }
	"${run_as[@]}" "$bindir/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
		-o "-h 127.0.0.1 -p $port -k $PG_DIR -c max_connections=200 $*" start >/dev/null ||
		{ cat "$PG_DIR/server.log" >&2; return 1; }
	PG_BINDIR=$bindir
	PG_RUN_AS=("${run_as[@]}")
	"$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -qAt -c "CREATE DATABASE drainscope_test" >/dev/null
	# BenchmarkTimelineCold restarts the cluster to empty its buffers.
	export DRAINSCOPE_TEST_POSTGRES_DATA="$PG_DIR/data" DRAINSCOPE_TEST_POSTGRES_BIN="$bindir"
	export DRAINSCOPE_TEST_POSTGRES="postgres://postgres@127.0.0.1:$port/drainscope_test?sslmode=disable"
	echo "postgres: throwaway cluster at $DRAINSCOPE_TEST_POSTGRES (data in $PG_DIR)"
}

pg_stop() {
	[ -n "${PG_DIR:-}" ] || return 0
	"${PG_RUN_AS[@]}" "$PG_BINDIR/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$PG_DIR"
	PG_DIR=
}
