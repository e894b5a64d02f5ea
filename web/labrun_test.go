package web

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventfile"
	"github.com/drainscope/drainscope/store"
)

// The README's picture is a recorded lab run, not a made-up one: with
// -update -lab-store DSN, TestLabRunPicture copies the exit run's rollout
// out of the store a `drainscope lab` run wrote into testdata/lab-run.jsonl,
// then renders its timeline into docs/timeline.png. Without -update it
// checks the committed recording, so the picture's page keeps working.
//
//	scripts/lab.sh --serve '' --store /tmp/lab.db
//	go test ./web -run TestLabRunPicture -update -lab-store /tmp/lab.db
var labStore = flag.String("lab-store", "", "with -update: the store a drainscope lab run wrote, to record "+labRunPath+" from")

const (
	labRunPath = "testdata/lab-run.jsonl"
	// labRunWorkload is the run whose rollout the picture shows: the
	// service exits at SIGTERM, so every cause of a dropped request but
	// SIGKILL is there.
	labRunWorkload = "sample-exit"
)

// recordLabRun reads the first template rollout of labRunWorkload from the
// store at dsn with the events the timeline reads around it: the
// workload's namespace, and the events of none: the client failures, the
// kernel's resets and closes no pod's process owned.
func recordLabRun(ctx context.Context, dsn string) ([]event.Event, error) {
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	rs, err := analysis.FindDisruptions(ctx, st, store.Query{}, analysis.Options{})
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(rs, func(r *analysis.Disruption) bool {
		return r.Name == labRunWorkload && r.Trigger == analysis.TriggerRollout
	})
	if i < 0 {
		return nil, fmt.Errorf("%s holds no rollout of %s begun by a template change", dsn, labRunWorkload)
	}
	r := rs[i]
	win := r.Window()
	var out []event.Event
	err = st.Scan(ctx, store.Query{Window: win}, func(e *event.Event) error {
		if e.Pod.Namespace == r.Namespace || e.Pod.Namespace == "" {
			out = append(out, e.Clone())
		}
		return nil
	})
	return out, err
}

func TestLabRunPicture(t *testing.T) {
	if *update && *labStore != "" {
		evs, err := recordLabRun(context.Background(), *labStore)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFixture(labRunPath, evs); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %d events of %s into %s", len(evs), labRunWorkload, labRunPath)
	}
	evs, err := eventfile.Read(labRunPath)
	if err != nil {
		t.Fatalf("reading the lab recording (see TestLabRunPicture's comment to make it): %v", err)
	}
	st := storeWith(t, evs)
	last := slices.MaxFunc(evs, func(a, b event.Event) int { return int(a.Time - b.Time) }).Time
	at := func(o *Options) { o.Now = func() time.Time { return time.Unix(0, last).Add(time.Hour) } }
	api := newTestServer(t, st, at)

	// What the API says of the recorded rollout: the trigger, the four
	// pods it replaced and the four it brought up, and named causes.
	list := decode[Rollouts](t, do(t, api, http.MethodGet, "/api/v1/rollouts?since=all&workload="+labRunWorkload))
	i := slices.IndexFunc(list.Rollouts, func(r RolloutSummary) bool { return r.Trigger == analysis.TriggerRollout })
	if i < 0 {
		t.Fatalf("the recording lists no template rollout of %s: %+v", labRunWorkload, list.Rollouts)
	}
	detail := decode[RolloutDetail](t, do(t, api, http.MethodGet, "/api/v1/rollouts/"+list.Rollouts[i].ID))
	ro := detail.Rollout // analysed, where the list may not have been yet
	if ro.PodsReplaced != 4 || len(detail.NewPods) != 4 {
		t.Errorf("recorded rollout: %d replaced, %d new; want 4 and 4", ro.PodsReplaced, len(detail.NewPods))
	}
	var pods []string
	for _, p := range detail.Pods {
		pods = append(pods, p.Pod.Name)
		if !strings.HasPrefix(p.Pod.Name, labRunWorkload+"-") {
			t.Errorf("pod %q is not one of the lab's %s pods", p.Pod.Name, labRunWorkload)
		}
	}
	named := 0
	for c, n := range ro.ByCause {
		if c != analysis.CauseUnexplained {
			named += n
		}
	}
	if ro.Failures == 0 || named == 0 {
		t.Fatalf("recorded rollout: %d failures, %d with a named cause; the picture would show none", ro.Failures, named)
	}
	t.Logf("recorded rollout %s: %d failures by cause %v", ro.ID, ro.Failures, ro.ByCause)

	if testing.Short() {
		return
	}
	ctx, problems := browser(t)
	srv := httptest.NewServer(newTestServer(t, st, at))
	t.Cleanup(srv.Close)
	run(t, ctx, "opening the recorded timeline",
		chromedp.Navigate(srv.URL+ro.Links.Timeline),
		chromedp.WaitVisible(chromedp.CSS(`#timeline svg circle[data-failure]`)),
		chromedp.Sleep(300*time.Millisecond),
	)
	lanes := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline text.name")].map(t => t.textContent)`)
	if !slices.Equal(lanes, pods) {
		t.Errorf("timeline lanes %q, want one per recorded pod %q", lanes, pods)
	}
	png := shoot(t, ctx, artifactDir(t), "timeline.png")
	if *update {
		if err := os.WriteFile("../docs/timeline.png", png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range problems() {
		t.Error(p)
	}
}
