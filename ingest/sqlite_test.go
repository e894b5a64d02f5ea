package ingest

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// TestImportIntoSQLite runs the importer against the real embedded store:
// pods resolved from the pod events stored there, failures read back as
// stored, a second import adding nothing, and strict mode storing nothing
// from a file with a bad line.
func TestImportIntoSQLite(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	webB := event.PodRef{Namespace: "shop", Name: "web-b", UID: "uid-b"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	ready := event.Event{Time: mustTime(t, "2025-10-10T11:00:00Z"), Kind: event.EndpointReady, Node: "node-1",
		Source: event.SourceWatcher, Pod: webB, Workload: wl, Local: ap("10.244.0.6:8080"), Service: "web", Slice: "web-abc"}
	ready.Seal()
	if err := st.Append(ctx, []event.Event{ready}); err != nil {
		t.Fatal(err)
	}

	im := &Importer{Store: st, Parser: parserFor(t, "nginx", Options{})}
	sum, err := im.Import(ctx, "access.log", strings.NewReader(goodNginx))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Stored != 2 || sum.Resolved != 2 {
		t.Fatalf("summary %+v", sum)
	}
	q := store.Query{Kinds: []event.Kind{event.ClientFailure}}
	got, err := store.Events(ctx, st, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d client failures stored, want 2", len(got))
	}
	for _, e := range got {
		if e.Pod != webB || e.Workload != wl || e.Service != "web" || e.Code != 502 ||
			e.Attrs[event.AttrBackend] != "10.244.0.6:8080" || e.Local != ap("10.0.0.9:0") || e.Source != event.SourceClient {
			t.Errorf("stored failure %+v", e)
		}
	}

	// The same file again: the store keeps each failure once.
	im2 := &Importer{Store: st, Parser: parserFor(t, "nginx", Options{})}
	if _, err := im2.Import(ctx, "access.log", strings.NewReader(goodNginx)); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Events(ctx, st, q); len(got) != 2 {
		t.Errorf("after a second import: %d stored, want 2", len(got))
	}

	// Strict: a file with a bad line leaves the store as it was.
	bad := strings.ReplaceAll(goodNginx, "13:55:3", "13:56:3") + "not a log line\n"
	im3 := &Importer{Store: st, Parser: parserFor(t, "nginx", Options{}), Strict: true}
	_, err = im3.Import(ctx, "bad.log", strings.NewReader(bad))
	var re *RejectedError
	if !errors.As(err, &re) || re.First.Line != 4 {
		t.Fatalf("strict import: %v", err)
	}
	if got, _ := store.Events(ctx, st, q); len(got) != 2 {
		t.Errorf("strict import of a bad file stored %d events", len(got)-2)
	}
	// Without --strict its two good failures go in.
	im3.Strict = false
	if _, err := im3.Import(ctx, "bad.log", strings.NewReader(bad)); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Events(ctx, st, q); len(got) != 4 {
		t.Errorf("default import of a bad file: %d stored, want 4", len(got))
	}
}
