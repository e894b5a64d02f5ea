package web

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

// TestRecorderGapsShown: the fixture's checkout rollout with node-a's
// agent not running for 20 s of it. The timeline's answer carries the
// gap over node-a's lanes, the page's head names it, the analysed
// rollout's summary lists it, and the failures of node-a's pods inside it are
// unexplained, naming it.
func TestRecorderGapsShown(t *testing.T) {
	evs := recordFixture()
	gapFrom, gapTo := fixtureT0, fixtureT0+20*sec
	for _, node := range []string{"node-a", "node-b"} {
		session := "s1"
		for at := fixtureT0 - 3*int64(time.Hour); at <= fixtureT0+10*int64(time.Minute); at += 10 * sec {
			e := event.Event{Time: at, Kind: event.RecorderCoverage, Node: node, Source: event.SourceAgent, Duration: 10 * sec,
				Reason: event.CoverRunning, Attrs: map[string]string{event.AttrSession: session, event.AttrInterval: "10s",
					event.AttrCoverKernel: "on", event.AttrCoverSlices: "true", event.AttrDropped: "0", event.AttrKernelLost: "0"}}
			if node == "node-a" {
				if at > gapFrom && at < gapTo {
					continue // killed
				}
				if at == gapTo {
					session = "s2"
					e.Attrs[event.AttrSession], e.Reason, e.Duration = session, event.CoverStarted, 0
				}
			}
			e.Seal()
			evs = append(evs, e)
		}
	}
	s := newTestServer(t, storeWith(t, evs))
	co := ids(t, s).checkout
	want := "the recorder on node-a was not running from 12:00:25.000 to 12:00:45.000"
	tl := decode[Timeline](t, do(t, s, http.MethodGet, "/api/v1/rollouts/"+co.ID+"/timeline"))
	if !strings.Contains(strings.Join(tl.Rollout.RecordGaps, "\n"), want) {
		t.Errorf("the analysed rollout's summary lists gaps %q, want %q", tl.Rollout.RecordGaps, want)
	}
	base, _ := strconv.ParseInt(tl.Base, 10, 64)
	var found bool
	for _, g := range tl.Gaps {
		if g.Node == "node-a" && g.What == analysis.GapNotRunning && base+g.From == gapFrom && base+g.To == gapTo && strings.Contains(g.Text, want) {
			found = true
		}
		if g.Node == "node-b" {
			t.Errorf("a gap on node-b, whose agent ran throughout: %+v", g)
		}
	}
	if !found {
		t.Errorf("the timeline's gaps %+v lack node-a's from %d to %d", tl.Gaps, gapFrom-base, gapTo-base)
	}

	page := do(t, s, http.MethodGet, co.Links.Timeline)
	if page.code != 200 || !strings.Contains(page.body, "Record incomplete: "+want) || !strings.Contains(page.body, "recorder gap: nothing recorded") {
		t.Errorf("the timeline page does not name the gap (%d):\n%s", page.code, truncate(page.body, 3000))
	}

	fs := decode[Failures](t, do(t, s, http.MethodGet, "/api/v1/rollouts/"+co.ID+"/failures?limit=1000"))
	// recordFixture puts the old pods x2k4p and r9t5w on node-a, the
	// others on node-b.
	onA := map[string]bool{"checkout-6d9f7c5b8-x2k4p": true, "checkout-6d9f7c5b8-r9t5w": true}
	inGap, explainedOnB := 0, 0
	for _, f := range fs.Failures {
		if f.Failure.Time < gapFrom || f.Failure.Time > gapTo || f.Pod == nil {
			continue
		}
		if !onA[f.Pod.Name] {
			if f.Cause != analysis.CauseUnexplained {
				explainedOnB++
			}
			continue
		}
		inGap++
		if f.Cause != analysis.CauseUnexplained || !strings.Contains(strings.Join(f.Missing, " "), "a complete record:") {
			t.Errorf("failure at %d on %s inside a gap: cause %s, missing %q", f.Failure.Time-base, f.Pod.Name, f.Cause, f.Missing)
		}
	}
	if inGap == 0 || explainedOnB == 0 {
		t.Errorf("%d failures on node-a's pods in the gap, %d explained on node-b's meanwhile: the test shows nothing", inGap, explainedOnB)
	}
	t.Logf("in node-a's gap: %d failures on its pods, unexplained; %d on node-b's pods meanwhile keep their causes", inGap, explainedOnB)
}
