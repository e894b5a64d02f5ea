package textreport

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// TestKernelLimitsInReport: a node whose agent said its kernel cannot see
// refused connections is named in the report's header with that sentence;
// a node that can see everything is not.
func TestKernelLimitsInReport(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano()
	caps := func(at int64, node, release, missing string) event.Event {
		e := event.Event{Time: at, Kind: event.KernelCapabilities, Node: node, Source: event.SourceKernel, Reason: missing,
			Attrs: map[string]string{event.AttrKernelRelease: release}}
		e.Seal()
		return e
	}
	events := []event.Event{
		caps(t0, "node-a", "5.15.0-91-generic", "refused_connections,resets_without_socket,unread_data_resets"),
		caps(t0+int64(time.Second), "node-b", "6.18.4", ""),
		// After the window: not this report's.
		caps(t0+int64(2*time.Hour), "node-c", "6.1.0", "refused_connections"),
	}
	q := store.Query{Window: event.Window{From: t0 - int64(time.Minute), To: t0 + int64(time.Hour)}}
	r, err := analysis.AnalyzeEvents(events, q, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kernels) != 1 || r.Kernels[0].Node != "node-a" || len(r.Kernels[0].Missing) != 3 {
		t.Fatalf("kernel limits %+v, want node-a's three", r.Kernels)
	}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	want := "kernel of node-a (5.15.0-91-generic): refused connections cannot be seen on this node's kernel"
	if !strings.Contains(text, want) {
		t.Errorf("report header lacks %q:\n%s", want, text)
	}
	if strings.Contains(text, "node-b") || strings.Contains(text, "node-c") {
		t.Errorf("report names a node without limits in this window:\n%s", text)
	}
	b.Reset()
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "refused connections cannot be seen on this node") {
		t.Errorf("markdown report lacks the node's limits:\n%s", b.String())
	}
}
