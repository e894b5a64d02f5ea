package analysis

import (
	"fmt"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// gapRollout is exitAtSigterm's shape for two pods of one node, 30 s
// apart: web-a ends at 0 s, web-b at 30 s. Each exits at SIGTERM: a
// keep-alive connection cut at the exit, a slow request cut in flight,
// three connections refused before the endpoint left rotation.
func gapRollout() *rec {
	r := newRec("node-a", "node-b")
	a, b := r.pod("web-a", "10.244.0.21"), r.pod("web-b", "10.244.0.22")
	n := r.pod("web-n", "10.244.0.23")
	for _, p := range []*tpod{a, b} {
		r.created(p, -120*s)
		r.ready(p, -118*s)
	}
	r.created(n, -3*s)
	r.ready(n, -200*ms)
	r.exitEach([]*tpod{a, b}, 30*s)
	return r
}

// spanOpt changes one recorder_coverage span.
type spanOpt func(e *event.Event)

func attr(k, v string) spanOpt { return func(e *event.Event) { e.Attrs[k] = v } }
func reason(r string) spanOpt  { return func(e *event.Event) { e.Reason = r } }

// cover records node's agent's spans, one a second, ending from from to
// to (offsets from t0) in session, the first a point; change holds the
// changes of the spans ending at each offset (spansEnding).
func (r *rec) cover(node, session string, from, to int64, change map[int64][]spanOpt) {
	for t := from; t <= to; t += s {
		e := event.Event{Time: r.at(t), Kind: event.RecorderCoverage, Node: node, Source: event.SourceAgent,
			Duration: s, Reason: event.CoverRunning,
			Attrs: map[string]string{event.AttrSession: session, event.AttrInterval: "1s", event.AttrCoverKernel: "on",
				event.AttrCoverSlices: "true", event.AttrCoverDataplane: "off", event.AttrDropped: "0", event.AttrKernelLost: "0"}}
		if t == from {
			e.Reason, e.Duration = event.CoverStarted, 0
		}
		for _, o := range change[t] {
			o(&e)
		}
		r.add(e)
	}
}

// spansEnding changes every span ending from from to to by o, for cover.
func spansEnding(from, to int64, o spanOpt) map[int64][]spanOpt {
	out := map[int64][]spanOpt{}
	for t := from; t <= to; t += s {
		out[t] = []spanOpt{o}
	}
	return out
}

// TestFailureInARecorderGap: a failure whose evidence lies where a node's
// record is incomplete gets no cause that needs the missing evidence —
// whatever the rest of the record suggests — and says which recorder
// and when; a failure outside the gap keeps its cause, and a record with
// no spans at all is read as before. The report lists each gap in its
// window.
func TestFailureInARecorderGap(t *testing.T) {
	type want struct {
		gap  string // in the Missing of every failure on web-a, and in Result.RecorderGaps
		bToo bool   // web-b's failures are in a gap too
		// unlisted: the header cannot list it (a node known only from
		// its pods' events).
		unlisted bool
	}
	cases := []struct {
		name  string
		spans func(r *rec)
		want  want
	}{
		{"no spans: read as before", func(r *rec) {}, want{}},
		{"covered throughout", func(r *rec) {
			r.cover("node-a", "s1", -150*s, 60*s, nil)
		}, want{}},
		{"agent killed and started again", func(r *rec) {
			// SIGKILL at about -1.5 s: its last span ended at -2 s; the
			// new session became ready at 4 s.
			r.cover("node-a", "s1", -150*s, -2*s, nil)
			r.cover("node-a", "s2", 4*s, 60*s, nil)
		}, want{gap: "the recorder on node-a was not running from 12:00:23.000 to 12:00:29.000"}},
		{"agent upgraded: stopped, then the new version ready", func(r *rec) {
			r.cover("node-a", "s1", -150*s, -1*s, map[int64][]spanOpt{-1 * s: {reason(event.CoverStopped)}})
			r.cover("node-a", "s2", 3*s, 60*s, nil)
		}, want{gap: "the recorder on node-a was not running from 12:00:24.000 to 12:00:28.000"}},
		{"store buffer full", func(r *rec) {
			r.cover("node-a", "s1", -150*s, 60*s, map[int64][]spanOpt{1 * s: {attr(event.AttrDropped, "1200")}})
		}, want{gap: "the recorder on node-a dropped 1200 events (its buffer was full) from 12:00:25.000 to 12:00:26.000"}},
		{"kernel ring buffer lost events", func(r *rec) {
			r.cover("node-a", "s1", -150*s, 60*s, map[int64][]spanOpt{1 * s: {attr(event.AttrKernelLost, "37")}})
		}, want{gap: "the recorder on node-a lost 37 kernel events (the ring buffer was full) from 12:00:25.000 to 12:00:26.000"}},
		{"kernel capture off", func(r *rec) {
			r.cover("node-a", "s1", -150*s, 60*s, spansEnding(-5*s, 2*s, attr(event.AttrCoverKernel, "off")))
		}, want{gap: "the recorder on node-a ran without its kernel capture from 12:00:19.000 to 12:00:27.000"}},
		{"the EndpointSlices' recorder down", func(r *rec) {
			// Leader mode: node-b's agent holds the lease and was down.
			r.cover("node-a", "s1", -150*s, 60*s, spansEnding(-150*s, 60*s, attr(event.AttrCoverSlices, "false")))
			r.cover("node-b", "s2", -150*s, -3*s, nil)
			r.cover("node-b", "s3", 5*s, 60*s, nil)
		}, want{gap: "no recorder of EndpointSlices was running from 12:00:22.000 to 12:00:30.000"}},
		{"only another node's agent wrote spans", func(r *rec) {
			r.cover("node-b", "s1", -150*s, 60*s, nil)
		}, want{gap: "the recorder on node-a was not running at any time read", bToo: true, unlisted: true}},
		{"no span since: the next one is due", func(r *rec) {
			r.cover("node-a", "s1", -150*s, 1*s, nil)
		}, want{gap: "the recorder on node-a has vouched for nothing since 12:00:26.000", bToo: true}},
	}

	base := func() map[string]Cause {
		r := gapRollout()
		res, err := AnalyzeEvents(r.events, store.Query{}, Options{MaxFailures: -1})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]Cause{}
		for _, f := range res.Failures {
			out[failureKey(f)] = f.Cause
		}
		return out
	}()
	explained := 0
	for _, c := range base {
		if c != CauseUnexplained {
			explained++
		}
	}
	if explained < 8 {
		t.Fatalf("the scenario without spans explains %d of %d failures; the test needs them explained: %v", explained, len(base), base)
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := gapRollout()
			tc.spans(r)
			w := event.Window{From: r.at(-60 * s), To: r.at(60 * s)}
			res, err := AnalyzeEvents(r.events, store.Query{Window: w}, Options{MaxFailures: -1})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Failures) != len(base) {
				t.Fatalf("%d failures, want %d", len(res.Failures), len(base))
			}
			inGap := 0
			for _, f := range res.Failures {
				k := failureKey(f)
				onA := strings.HasPrefix(k, "web-a")
				gapped := tc.want.gap != "" && (onA || tc.want.bToo)
				if !gapped {
					if f.Cause != base[k] {
						t.Errorf("%s: cause %s, want %s as without a gap", k, f.Cause, base[k])
					}
					continue
				}
				inGap++
				if f.Cause != CauseUnexplained {
					t.Errorf("%s: cause %s inside the gap %q; want unexplained", k, f.Cause, tc.want.gap)
				}
				if !strings.Contains(strings.Join(f.Missing, "\n"), tc.want.gap) {
					t.Errorf("%s: missing %q does not name the gap %q", k, f.Missing, tc.want.gap)
				}
			}
			if res.Stats.InRecorderGap != inGap {
				t.Errorf("stats count %d failures in a gap, want %d", res.Stats.InRecorderGap, inGap)
			}
			var said []string
			for _, g := range res.RecorderGaps {
				said = append(said, g.String())
			}
			if (tc.want.gap == "" || tc.want.unlisted) && len(said) > 0 {
				t.Errorf("gaps listed with none in the record: %q", said)
			}
			if tc.want.gap != "" && !tc.want.unlisted && !strings.Contains(strings.Join(said, "\n"), tc.want.gap) {
				t.Errorf("the report's gaps %q do not list %q", said, tc.want.gap)
			}
			for _, d := range res.Disruptions {
				if tc.want.gap != "" && !tc.want.unlisted && len(d.RecorderGaps) == 0 && d.From <= r.at(1*s) && d.Until >= r.at(0) {
					t.Errorf("disruption %s over the gap lists none", d.ID)
				}
			}
		})
	}
}

// failureKey names a failure by its pod and client port.
func failureKey(f AlignedFailure) string {
	pod := "-"
	if f.Pod != nil {
		pod = f.Pod.Name
	}
	return fmt.Sprintf("%s %s %s inferred=%v", pod, f.Failure.Reason, f.Failure.Local, f.Inferred)
}

// TestUnservedFailureReadsItsServicesNodes: a refusal no record ties to a
// pod could have been served by any pod of its Service, so a gap on one
// of their nodes leaves it unexplained, naming the gap; a gap on a node
// none of them ran on does not, and it keeps its cause.
func TestUnservedFailureReadsItsServicesNodes(t *testing.T) {
	record := func(spans func(r *rec)) AlignedFailure {
		r := gapRollout()
		// A refused connection the pod side did not record: no pod.
		r.failure(150*ms, client(190), event.FailRefused)
		r.cover("node-b", "b1", -150*s, 60*s, nil) // node-b's agent ran throughout
		spans(r)
		res, err := AnalyzeEvents(r.events, store.Query{}, Options{MaxFailures: -1})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range res.Failures {
			if f.Failure.Local == client(190).String() && !f.Inferred {
				return f
			}
		}
		t.Fatal("the unserved failure is not among the results")
		return AlignedFailure{}
	}
	base := record(func(r *rec) { r.cover("node-a", "a1", -150*s, 60*s, nil) })
	if base.Pod != nil || base.Cause == CauseUnexplained {
		t.Fatalf("without a gap: pod %v, cause %s; the test needs a cause found with no pod", base.Pod, base.Cause)
	}
	// node-c holds no pod of the Service; its agent was killed meanwhile.
	other := record(func(r *rec) {
		r.cover("node-a", "a1", -150*s, 60*s, nil)
		r.cover("node-c", "c1", -150*s, -2*s, nil)
		r.cover("node-c", "c2", 4*s, 60*s, nil)
	})
	if other.Cause != base.Cause {
		t.Errorf("a gap on a node without the Service's pods: cause %s (missing %q), want %s", other.Cause, other.Missing, base.Cause)
	}
	// node-a holds them; its agent was killed meanwhile.
	own := record(func(r *rec) {
		r.cover("node-a", "a1", -150*s, -2*s, nil)
		r.cover("node-a", "a2", 4*s, 60*s, nil)
	})
	want := "the recorder on node-a was not running from 12:00:23.000 to 12:00:29.000"
	if own.Cause != CauseUnexplained || !strings.Contains(strings.Join(own.Missing, " "), want) {
		t.Errorf("a gap on the node of the Service's pods: cause %s, missing %q; want unexplained naming %q", own.Cause, own.Missing, want)
	}
}
