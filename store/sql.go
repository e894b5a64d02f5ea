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
	if len(q.Kinds) > 0 {
		vals := make([]any, len(q.Kinds))
		for i, k := range q.Kinds {
			vals[i] = string(k)
		}
		add(in("kind", len(vals)), vals...)
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

// selectEndingPods renders the query of the pods that may have ended in
// q's window: those with a deletion, a finish, a container's
// termination, a SIGTERM or SIGKILL, or an exit. It is a superset: the
// analysis decides from their events what ended (an exec probe's exit,
// a worker's signal end nothing). mainExit is the SQL test that an exit
// is a container's main process's (event.FlagMain), where the flags are
// a column (Postgres); the embedded store packs them and passes "true".
func selectEndingPods(q Query, ph placeholder, mainExit string) (string, []any) {
	q.Kinds = nil
	w, args := where(q, ph)
	if w == "" {
		w = " WHERE pod_uid <> ''"
	} else {
		w += " AND pod_uid <> ''"
	}
	const sigterm, sigkill = 15, 9
	s := fmt.Sprintf(`SELECT DISTINCT pod_uid FROM events%[1]s AND (kind IN ('%[2]s', '%[3]s', '%[4]s')
	OR (kind = '%[5]s' AND signal IN (%[6]d, %[7]d)) OR (kind = '%[8]s' AND %[9]s))
ORDER BY pod_uid`,
		w, event.PodDeletion, event.PodFinished, event.ContainerTerminated, event.Signal, sigterm, sigkill, event.ProcessExit, mainExit)
	return s, args
}

// oneLine folds a driver error onto one line: some servers' messages carry
// detail lines that would break log records.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
