package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/drainscope/drainscope/internal/testenv"
)

// browser starts headless Chromium (Debian's chromium, or the binary named
// by DRAINSCOPE_CHROMIUM) with a fresh profile and nothing that reaches
// the network by itself, and collects what would mean a broken or unsafe
// page: a JavaScript dialog (an injected alert), an uncaught exception, an
// error in the console or a Content-Security-Policy violation.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	bin := os.Getenv("DRAINSCOPE_CHROMIUM")
	if bin == "" {
		bin = testenv.RequireBinary(t, "chromium")
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("font-render-hinting", "none"),
		chromedp.WindowSize(1480, 1000),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			problems = append(problems, fmt.Sprintf("a %s dialog opened: %q (injected script ran)", e.Type, e.Message))
		case *runtime.EventExceptionThrown:
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			problems = append(problems, "uncaught exception: "+msg)
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError && !strings.Contains(e.Entry.URL, "favicon") {
				problems = append(problems, fmt.Sprintf("console %s error: %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		}
	}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(problems)
	}
}

func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// artifactDir is where screenshots go: DRAINSCOPE_ARTIFACTS (CI keeps it),
// else the test's temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("DRAINSCOPE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// shoot saves a screenshot of the page's main area as a CI artefact.
func shoot(t *testing.T, ctx context.Context, dir, name string) []byte {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(`main`)))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return png
}

// TestBrowser drives the UI in headless Chromium over the recorded fixture:
// the rollouts page lists the rollout (and fills in its counts live), its
// timeline draws one lane per pod, hovering a failure names its cause and
// clicking it shows the evidence and the fix. Names that are markup render
// as text and never run. (The README's picture comes from a recorded lab
// run: TestLabRunPicture.)
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	ctx, problems := browser(t)
	dir := artifactDir(t)
	st := fixtureStore(t)
	srv := httptest.NewServer(newTestServer(t, st, func(o *Options) { o.UpdateEvery = 200 * time.Millisecond }))
	t.Cleanup(srv.Close)
	api := newTestServer(t, st)

	// The rollouts page: served before any analysis, it fills in the
	// counts when the update stream says they landed.
	run(t, ctx, "opening the rollouts page",
		chromedp.Navigate(srv.URL+"/rollouts"),
		chromedp.WaitVisible(chromedp.CSS(`table.rollouts tbody tr`)),
		chromedp.WaitVisible(chromedp.CSS(`table.rollouts tbody tr .chip`)),
	)
	shoot(t, ctx, dir, "rollouts.png")
	names := eval[[]string](t, ctx, `[...document.querySelectorAll("table.rollouts tbody td:first-child a")].map(a => a.textContent)`)
	for _, want := range []string{"Deployment/checkout", "Deployment/ledger", "Deployment/<img src=x onerror=alert(2)>"} {
		if !slices.Contains(names, want) {
			t.Errorf("rollouts page lists %q, want %q among them", names, want)
		}
	}

	// The timeline: one lane per pod the API lists.
	list := decode[Rollouts](t, do(t, api, http.MethodGet, "/api/v1/rollouts?namespace=shop"))
	if len(list.Rollouts) != 1 {
		t.Fatalf("API lists %d rollouts in shop, want 1", len(list.Rollouts))
	}
	ro := list.Rollouts[0]
	detail := decode[RolloutDetail](t, do(t, api, http.MethodGet, "/api/v1/rollouts/"+ro.ID))
	run(t, ctx, "opening the timeline",
		chromedp.Click(chromedp.CSS(`table.rollouts a[href="`+ro.Links.Timeline+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline svg circle[data-failure]`)),
	)
	lanes := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline text.name")].map(t => t.textContent)`)
	titles := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline g.tl-lane title")].map(t => t.textContent)`)
	var pods []string
	for _, p := range detail.Pods {
		pods = append(pods, p.Pod.Name)
	}
	if !slices.Equal(lanes, pods) {
		t.Errorf("timeline lanes %q, want one per pod %q", lanes, pods)
	}
	if len(titles) != len(pods) || !strings.HasPrefix(titles[0], "shop/"+pods[0]) {
		t.Errorf("lane titles %q, want the pods' namespace/name", titles)
	}
	if len(lanes) != 8 {
		t.Errorf("timeline draws %d lanes, want 8 (4 old pods, 4 new)", len(lanes))
	}

	// Hover a keep-alive failure: the tooltip names its cause. Click it:
	// the panel shows the explanation, the evidence and the fix.
	fs := decode[Failures](t, do(t, api, http.MethodGet, "/api/v1/rollouts/"+ro.ID+"/failures?cause=keepalive_at_exit&limit=1"))
	if len(fs.Failures) == 0 {
		t.Fatal("the fixture has no keep-alive failure")
	}
	first := fs.Failures[0]
	sel := fmt.Sprintf(`#timeline circle[data-failure="%d"]`, first.I)
	pt := eval[[]float64](t, ctx, `(() => { const r = document.querySelector('`+sel+`').getBoundingClientRect(); return [r.x + r.width/2, r.y + r.height/2]; })()`)
	// Failures a few milliseconds apart overlap at this zoom: the one on
	// top is the one the mouse is over.
	top := eval[int](t, ctx, fmt.Sprintf(`+document.elementFromPoint(%f, %f).closest("[data-failure]").dataset.failure`, pt[0], pt[1]))
	f := decode[IndexedFailure](t, do(t, api, http.MethodGet, fmt.Sprintf("/api/v1/rollouts/%s/failures/%d", ro.ID, top)))
	run(t, ctx, "hovering a failure",
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, pt[0], pt[1]),
		chromedp.WaitVisible(chromedp.CSS(`#tooltip`)),
	)
	tip := eval[string](t, ctx, `document.getElementById("tooltip").textContent`)
	if !strings.Contains(tip, f.Title) || !strings.Contains(tip, f.Pod.Name) {
		t.Errorf("tooltip over a %s failure says %q, want its cause %q and pod", f.Cause, tip, f.Title)
	}
	run(t, ctx, "clicking a failure",
		chromedp.MouseClickXY(pt[0], pt[1]),
		chromedp.WaitVisible(chromedp.CSS(`#details .fix`)),
	)
	panel := eval[string](t, ctx, `document.getElementById("details").textContent`)
	for _, want := range []string{f.Title, "Evidence", "Fix:", f.Explanation} {
		if !strings.Contains(panel, want) {
			t.Errorf("details panel %q lacks %q", truncate(panel, 400), want)
		}
	}
	if u := eval[string](t, ctx, `location.search`); !strings.Contains(u, fmt.Sprintf("sel=f%%3A%d", f.I)) || !strings.Contains(u, "from=") {
		t.Errorf("address %q does not link the selection and the range", u)
	}
	run(t, ctx, "moving the mouse away", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 5, 5), chromedp.Sleep(100*time.Millisecond))
	shoot(t, ctx, dir, "timeline.png")

	// A deep link opens the same range and selection.
	link := eval[string](t, ctx, `location.pathname + location.search`)
	run(t, ctx, "following the deep link",
		chromedp.Navigate(srv.URL+link),
		chromedp.WaitVisible(chromedp.CSS(`#details .fix`)),
	)

	// Zoom in on the rollout's first second: marks split out of the density.
	// The zoomed range is read from the server; on a loaded machine that
	// takes a while, so wait for the status to settle (the test's own
	// timeout bounds it) rather than a fixed time.
	run(t, ctx, "zooming", chromedp.Click(chromedp.CSS(`#zoom-in`)),
		chromedp.Poll[chromedp.Void](`!document.getElementById("status").textContent.includes("loading")`, chromedp.WithPollingInterval(100*time.Millisecond)))
	if s := eval[string](t, ctx, `document.getElementById("status").textContent`); !strings.Contains(s, "events in view") {
		t.Errorf("after zooming the status says %q", s)
	}

	run(t, ctx, "opening the alignment", chromedp.Navigate(srv.URL+ro.Links.Alignment), chromedp.WaitVisible(chromedp.CSS(`figure.hist svg`)))
	shoot(t, ctx, dir, "alignment.png")

	// Markup in names renders as text.
	var evil RolloutSummary
	for _, r := range decode[Rollouts](t, do(t, api, http.MethodGet, "/api/v1/rollouts")).Rollouts {
		if strings.Contains(r.WorkloadName, "<img") {
			evil = r
		}
	}
	run(t, ctx, "opening the hostile rollout",
		chromedp.Navigate(srv.URL+evil.Links.Timeline),
		chromedp.WaitVisible(chromedp.CSS(`#timeline svg text.name`)),
	)
	if got := eval[string](t, ctx, `document.querySelector("#timeline text.name").textContent`); got != "<script>alert(1)</script>" {
		t.Errorf("hostile pod's lane reads %q", got)
	}
	if got := eval[string](t, ctx, `document.querySelector("h1").textContent`); !strings.Contains(got, "<img src=x onerror=alert(2)>") {
		t.Errorf("hostile heading reads %q", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("img, main script, svg script").length`); n != 0 {
		t.Errorf("hostile names made %d elements", n)
	}
	run(t, ctx, "opening the hostile alignment", chromedp.Navigate(srv.URL+evil.Links.Alignment), chromedp.WaitVisible(chromedp.CSS(`table.cause-table`)))
	run(t, ctx, "letting scripts settle", chromedp.Sleep(300*time.Millisecond))
	for _, p := range problems() {
		t.Error(p)
	}
}
