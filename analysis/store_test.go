package analysis

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// The same events analysed from the embedded store and from memory give
// the same Result: Analyze reads with a lead and a lookahead around the
// window, and the store hands the events back in time order.
func TestAnalyzeFromSQLite(t *testing.T) {
	r := seed000PreStop()
	st, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err) // the embedded store is pure Go: it must open
	}
	defer st.Close()
	if err := st.Append(t.Context(), r.events); err != nil {
		t.Fatal(err)
	}
	q := store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}
	// Without the timelines' event views: the store returns the events of
	// one instant in an order of its own, and a view lists them as read.
	fromStore, err := AnalyzeWith(t.Context(), st, q, Options{NoEventViews: true})
	if err != nil {
		t.Fatal(err)
	}
	inMemory, err := AnalyzeEvents(r.events, q, Options{NoEventViews: true})
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := WriteJSON(&a, fromStore, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&b, inMemory, false); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Fatalf("store and memory disagree:\n--- store:\n%s\n--- memory:\n%s", a.String(), b.String())
	}
	if n := fromStore.Causes[0].Count; fromStore.Causes[0].Cause != CauseKeepAliveAtExit || n != 20 {
		t.Fatalf("causes %+v", fromStore.Causes)
	}

	// Narrowed to the workload, and to one that has no failures.
	q.Namespace, q.Workload = "default", event.Workload{Name: "web"}
	if res, err := Analyze(t.Context(), st, q); err != nil || len(res.Causes) != 1 || res.Causes[0].Count != 20 {
		t.Fatalf("workload web: %v %+v", err, res)
	}
	q.Workload = event.Workload{Name: "other"}
	if res, err := Analyze(t.Context(), st, q); err != nil || len(res.Causes) != 0 || len(res.Disruptions) != 0 {
		t.Fatalf("workload other: %v %+v", err, res)
	}
}
