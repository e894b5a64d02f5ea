package analysis

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
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

// scenarioFile is a scenario's window and events as analysis/textreport's
// golden tests read them (testdata/<name>.events.json): that package
// cannot build the scenarios, which are this package's tests. One event a
// line, so that a change to a scenario reads as a diff.
func scenarioFile(t *testing.T, w event.Window, events []event.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	win, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString(`{"Window": ` + string(win) + `, "Events": [` + "\n")
	for i := range events {
		e, err := json.Marshal(&events[i])
		if err != nil {
			t.Fatal(err)
		}
		b.Write(e)
		if i < len(events)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]}\n")
	// The file must be the scenario: an Event field that JSON loses would
	// have textreport render other events than these.
	var back struct {
		Window event.Window
		Events []event.Event
	}
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Window != w || !reflect.DeepEqual(back.Events, events) {
		t.Fatal("the scenario's events do not survive JSON: textreport's golden tests would render others")
	}
	return b.Bytes()
}

// TestGolden: each scenario's events (which analysis/textreport renders
// into its golden reports: after a change to a scenario, -update here,
// then go test ./analysis/textreport -run TestGolden -update) and, for
// some, its Result as JSON.
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
			golden(t, sc.name+".events.json", scenarioFile(t, q.Window, r.events))
			res, err := AnalyzeEvents(r.events, q, Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkProse(t, res)
			if sc.json {
				var js bytes.Buffer
				if err := WriteJSON(&js, res, true); err != nil {
					t.Fatal(err)
				}
				golden(t, sc.name+".json", js.Bytes())
			}
		})
	}
}
