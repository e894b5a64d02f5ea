package store

import (
	"fmt"
	"slices"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// columns is the Postgres events table's column order, for writes and reads.
var columns = []string{
	"ts", "id", "kind", "node", "source",
	"namespace", "pod", "pod_uid", "container", "workload_kind", "workload",
	"pid", "comm", "peer_pid", "peer_comm",
	"signal", "code", "duration",
	"laddr", "lport", "raddr", "rport", "netns",
	"service", "slice", "reason", "flags", "attrs",
}

// writeColumns are those a write fills: columns and the entity key (see
// state.go), which reads never need. appendRow follows this order.
var writeColumns = append(slices.Clip(columns), "entity")

// countedColumns are what Postgres's COPY of a whole batch fills: the
// rows are also added to event_seconds (see seconds.go).
var countedColumns = append(slices.Clip(writeColumns), "counted")

// placeholder renders the n-th (1-based) bind parameter in a dialect.
type placeholder func(n int) string

func pgPlaceholder(n int) string   { return fmt.Sprintf("$%d", n) }
func sqlitePlaceholder(int) string { return "?" }

// where renders q's filters as a WHERE clause and its arguments.
func where(q Query, ph placeholder) (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, vals ...any) {
		for _, v := range vals {
			args = append(args, v)
			cond = strings.Replace(cond, "?", ph(len(args)), 1)
		}
		conds = append(conds, cond)
	}
	in := func(col string, n int) string {
		return col + " IN (" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
	}
	if q.Window.From != 0 {
		add("ts >= ?", q.Window.From)
	}
	if q.Window.To != 0 {
		add("ts < ?", q.Window.To)
	}
	if q.Lifecycle {
		// Literal, not bound: a partial index is used only where the
		// query's own terms imply its predicate (see 0006_lifecycle.sql).
		add("kind NOT IN (" + kindList(notLifecycle) + ")")
		if ph(1) != "?" {
			// Postgres keeps the flags in a column (the embedded store
			// filters the decoded rows: SQLite.Scan).
			add(fmt.Sprintf("((flags & %d) = 0 OR kind IN (%s)) AND (kind NOT IN (%s) OR (flags & %d) <> 0)",
				event.FlagObserved, kindList(lifecycleObserved), kindList(mainOnly), event.FlagMain))
		}
	}
	if len(q.Kinds) > 0 {
		add("kind IN (" + kindList(q.Kinds) + ")")
	}
	if len(q.PodUIDs) > 0 {
		vals := make([]any, len(q.PodUIDs))
		for i, u := range q.PodUIDs {
			vals[i] = u
		}
		add(in("pod_uid", len(vals)), vals...)
	}
	if q.Namespace != "" {
		add("namespace = ?", q.Namespace)
	}
	if !q.Workload.IsZero() {
		add("workload_kind = ? AND workload = ?", q.Workload.Kind, q.Workload.Name)
	}
	if q.Node != "" {
		add("node = ?", q.Node)
	}
	if q.ObservedOnlyIn != "" {
		// "<> flag", not "= 0": Postgres estimates an equality on an
		// expression to hold for 0.5 % of rows, and for so few it sorted
		// a parallel scan instead of walking the time index, which the
		// reader must wait for (410 against 327 ms for 538,244 rows).
		f := int64(event.FlagObserved)
		add("((flags & ?) <> ? OR namespace IN (?, ''))", f, f, q.ObservedOnlyIn)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// selectEvents renders the query that Scan runs.
func selectEvents(q Query, cols []string, ph placeholder) (string, []any) {
	w, args := where(q, ph)
	s := "SELECT " + strings.Join(cols, ", ") + " FROM events" + w + " ORDER BY ts, id"
	if q.Limit > 0 {
		s += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	return s, args
}

// notLifecycle are the kinds a lifecycle read (Query.Lifecycle) leaves
// out, the bulk of the rows: a connection's end and a client's failure. A
// short list to compare, not the long one of every other kind: the index
// of the rest evaluates it on every row written (0006_lifecycle.sql).
var notLifecycle = []event.Kind{event.ConnClosed, event.RSTSent, event.RSTReceived, event.ConnRefused, event.ClientFailure}

// IsLifecycle reports whether events of kind k are in a lifecycle read:
// every kind but a connection's and a client's failure.
func IsLifecycle(k event.Kind) bool { return !slices.Contains(notLifecycle, k) }

// lifecycleObserved are the kinds whose re-observed states a lifecycle
// read keeps: a deletion or a finish found at a list, and the running
// containers, which say which is the app (their declared ports).
var lifecycleObserved = []event.Kind{event.PodDeletion, event.PodFinished, event.ContainerStarted}

// mainOnly are the kinds a lifecycle read keeps of a container's main
// process alone (event.FlagMain): an exec probe's exit, every few seconds
// in every pod that has one, ends no pod. Signals are kept whoever got
// them (they are few): a node's kernel_capabilities, in the read too,
// says whether its capture marks main processes, and the account ignores
// a worker's where it does.
var mainOnly = []event.Kind{event.ProcessExit}

// LifecycleRow reports whether a lifecycle read (Query.Lifecycle) takes e
// (of a kind IsLifecycle): the embedded store's filter of the flags it
// packs, the same as the Postgres predicate.
func LifecycleRow(e *event.Event) bool {
	if e.Flags.Has(event.FlagObserved) && !slices.Contains(lifecycleObserved, e.Kind) {
		return false
	}
	return !slices.Contains(mainOnly, e.Kind) || e.Flags.Has(event.FlagMain)
}

// kindList renders kinds as SQL string literals, "'a', 'b'".
func kindList(kinds []event.Kind) string {
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = "'" + strings.ReplaceAll(string(k), "'", "''") + "'"
	}
	return strings.Join(parts, ", ")
}

// oneLine folds a driver error onto one line: some servers' messages carry
// detail lines that would break log records.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
