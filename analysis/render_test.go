package analysis

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./analysis -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; run with -update after checking the change.\n--- got:\n%s", path, got)
	}
}

func TestGolden(t *testing.T) {
	scenarios := []struct {
		name string
		rec  func() *rec
		json bool
	}{
		{"seed000_graceful_prestop", seed000PreStop, true},
		{"exit_at_sigterm", exitAtSigterm, false},
		{"kernel_only", kernelOnly, false},
		{"dataplane_lag", dataplaneLag, true},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			r := sc.rec()
			q := store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}
			res, err := AnalyzeEvents(r.events, q, Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkProse(t, res)
			var txt, md, js bytes.Buffer
			if err := WriteText(&txt, res); err != nil {
				t.Fatal(err)
			}
			golden(t, sc.name+".txt", txt.Bytes())
			if err := WriteMarkdown(&md, res); err != nil {
				t.Fatal(err)
			}
			golden(t, sc.name+".md", md.Bytes())
			if sc.json {
				if err := WriteJSON(&js, res, true); err != nil {
					t.Fatal(err)
				}
				golden(t, sc.name+".json", js.Bytes())
			}
			// The text and markdown print no timeline's events: without
			// their views they are the same.
			bare, err := AnalyzeEvents(r.events, q, Options{NoEventViews: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, tl := range res.Timelines {
				if len(tl.Events) == 0 || len(bare.Timelines[i].Events) != 0 {
					t.Errorf("timeline %d: %d events with views, %d without; want some, then none", i, len(tl.Events), len(bare.Timelines[i].Events))
				}
			}
			var btxt, bmd bytes.Buffer
			if err := WriteText(&btxt, bare); err != nil {
				t.Fatal(err)
			}
			if err := WriteMarkdown(&bmd, bare); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(btxt.Bytes(), txt.Bytes()) || !bytes.Equal(bmd.Bytes(), md.Bytes()) {
				t.Errorf("the text or markdown differs without the events' views:\n%s", btxt.Bytes())
			}
		})
	}
}
