package analysis

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// The account's cases: what a cluster that has run for days does every
// day, a few events each, and the disruptions it must give. Every case is
// read twice, by the analysis of the whole window (Result.Disruptions)
// and by the list (FindDisruptions over a store holding the same events),
// and both must give the same disruptions with the same IDs.

const minute = int64(time.Minute)

// status is a workload change as the watcher records it where it reads
// the workload's status: with the start of the rollout in progress.
func (r *rec) status(d int64, wl event.Workload, reason string, since int64, attrs ...string) {
	e := event.Event{Time: r.at(d), Kind: event.WorkloadChanged, Node: r.nodes[0], Source: event.SourceWatcher,
		Pod: event.PodRef{Namespace: "default"}, Workload: wl, Reason: reason, Attrs: map[string]string{}}
	if since != 0 || reason != event.ChangeComplete {
		e.Attrs[event.AttrRolloutSince] = strconv.FormatInt(r.at(since), 10)
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		e.Attrs[attrs[i]] = attrs[i+1]
	}
	r.add(e)
}

// running is a pod created and ready long before the read, as a cluster
// that has run for days has them.
func (r *rec) running(name, ip string) *tpod {
	p := r.pod(name, ip)
	r.created(p, -2*time.Hour.Nanoseconds())
	r.ready(p, -2*time.Hour.Nanoseconds()+s)
	return p
}

// replace is one step of a surge rollout: fresh is created and ready,
// then old ends.
func (r *rec) replace(old, fresh *tpod, d int64) {
	r.created(fresh, d)
	r.ready(fresh, d+2*s)
	r.end(old, d+2*s+100*ms)
}

func (r *rec) finished(p *tpod, d int64, reason, disruption string) {
	e := r.podEvent(p, d, event.PodFinished)
	e.Reason = reason
	e.Attrs = map[string]string{"phase": "Failed"}
	if disruption != "" {
		e.Attrs[event.AttrDisruption] = disruption
	}
	r.add(e)
}

// oomKill is the kernel's OOM kill of the pod's app and the kubelet's
// report of it, the pod kept, then the container's restart.
func (r *rec) oomKill(p *tpod, d int64) {
	r.signal(p, d, 9)
	r.exit(p, d+1*ms, 0, 9)
	r.terminated(p, d+500*ms, "OOMKilled", 137)
	e := r.podEvent(p, d+2*s, event.ContainerStarted)
	e.Pod.Container = "app"
	r.add(e)
	r.ready(p, d+5*s)
}

// markMain marks the apps' signals and exits as their containers' main
// process's, as the agent's capture does on every kernel it loads on
// (event.FlagMain): the list reads no other process's (store.LifecycleRow).
func markMain(r *rec) {
	for i := range r.events {
		e := &r.events[i]
		if (e.Kind == event.Signal || e.Kind == event.ProcessExit) && e.PID == 4242 {
			e.Flags |= event.FlagMain
			e.Seal()
		}
	}
	slices.SortStableFunc(r.events, func(a, b event.Event) int { return cmp.Compare(a.Time, b.Time) })
}

type wantDisruption struct {
	trigger Trigger
	pods    []string
	from    int64 // offset from t0; -1 for not checked
}

func (w wantDisruption) String() string {
	return fmt.Sprintf("%s %v", w.trigger, w.pods)
}

func gotDisruption(d *Disruption, t0 int64) wantDisruption {
	var pods []string
	for _, p := range d.Replaced {
		n := p.Name
		if p.Life != 0 {
			n += "@" + strconv.FormatInt((p.Life-t0)/int64(time.Second), 10) + "s"
		}
		pods = append(pods, n)
	}
	return wantDisruption{trigger: d.Trigger, pods: pods, from: d.From - t0}
}

func TestAccount(t *testing.T) {
	web := event.Workload{Kind: "Deployment", Name: "web"}
	for _, tc := range []struct {
		name  string
		build func(r *rec)
		want  []wantDisruption
	}{
		{
			// The report named it "oom", the list "template" with the
			// rollout's ID.
			name: "an OOM kill 5 min after a finished rollout",
			build: func(r *rec) {
				a, b := r.running("web-a", "10.244.0.10"), r.running("web-b", "10.244.0.11")
				a2, b2 := r.pod("web-a2", "10.244.0.20"), r.pod("web-b2", "10.244.0.21")
				r.status(0, web, "template", 0)
				r.replace(a, a2, 1*s)
				r.replace(b, b2, 10*s)
				r.status(20*s, web, event.ChangeComplete, 0)
				r.oomKill(b2, 5*minute)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-a", "web-b"}, 0}, {TriggerOOM, []string{"web-b2"}, 5 * minute}},
		},
		{
			name: "a node drain's eviction 4 min after a rollout",
			build: func(r *rec) {
				a := r.running("web-a", "10.244.0.10")
				a2 := r.pod("web-a2", "10.244.0.20")
				r.change(0, web, "template") // a watcher that records no status
				r.replace(a, a2, 1*s)
				r.evicted(a2, 4*minute)
				r.signal(a2, 4*minute+10*ms, 15)
				r.exit(a2, 4*minute+20*ms, 0, 15)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-a"}, 0}, {TriggerEviction, []string{"web-a2"}, 4 * minute}},
		},
		{
			// Each pod ends 170 s after the last: longer than RolloutGap.
			name: "a slow rollout, its status recorded",
			build: func(r *rec) {
				r.status(0, web, "template", 0)
				for i := range 5 {
					old := r.running(fmt.Sprintf("web-%d", i), fmt.Sprintf("10.244.0.%d", 10+i))
					r.replace(old, r.pod(fmt.Sprintf("web-new-%d", i), fmt.Sprintf("10.244.0.%d", 30+i)), int64(i)*170*s+s)
				}
				r.status(5*170*s, web, event.ChangeComplete, 0)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-0", "web-1", "web-2", "web-3", "web-4"}, 0}},
		},
		{
			name: "a slow rollout, no status recorded",
			build: func(r *rec) {
				r.change(0, web, "template")
				for i := range 5 {
					old := r.running(fmt.Sprintf("web-%d", i), fmt.Sprintf("10.244.0.%d", 10+i))
					r.replace(old, r.pod(fmt.Sprintf("web-new-%d", i), fmt.Sprintf("10.244.0.%d", 30+i)), int64(i)*170*s+s)
				}
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-0", "web-1", "web-2", "web-3", "web-4"}, 0}},
		},
		{
			name: "a rollout paused 12 min and resumed",
			build: func(r *rec) {
				a, b := r.running("web-a", "10.244.0.10"), r.running("web-b", "10.244.0.11")
				r.status(0, web, "template", 0)
				r.replace(a, r.pod("web-a2", "10.244.0.20"), s)
				r.status(5*s, web, event.ChangePaused, 0)
				r.status(5*s+12*minute, web, event.ChangeResumed, 0)
				r.replace(b, r.pod("web-b2", "10.244.0.21"), 6*s+12*minute)
				r.status(20*s+12*minute, web, event.ChangeComplete, 0)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-a", "web-b"}, 0}},
		},
		{
			// The read begins during the pause: the resume says when the
			// rollout began.
			name: "a paused rollout read from its pause on",
			build: func(r *rec) {
				b := r.running("web-b", "10.244.0.11")
				r.status(5*s, web, event.ChangePaused, -1*minute)
				r.status(5*s+12*minute, web, event.ChangeResumed, -1*minute)
				r.replace(b, r.pod("web-b2", "10.244.0.21"), 6*s+12*minute)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-b"}, -1 * minute}},
		},
		{
			name: "a rollback mid-way",
			build: func(r *rec) {
				a, b := r.running("web-a", "10.244.0.10"), r.running("web-b", "10.244.0.11")
				a2 := r.pod("web-a2", "10.244.0.20")
				r.status(0, web, "template", 0)
				r.replace(a, a2, s)
				// The new template fails; kubectl rollout undo deletes the
				// new pod and brings the old template back.
				r.status(30*s, web, "template", 0, event.AttrRollback, "true")
				r.replace(a2, r.pod("web-a3", "10.244.0.22"), 31*s)
				r.status(40*s, web, event.ChangeComplete, 0)
				_ = b
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-a", "web-a2"}, 0}},
		},
		{
			// An HPA scales 3 → 2; 5 min later someone deletes a pod.
			name: "a scale-down, then a plain pod deletion",
			build: func(r *rec) {
				a, b, c := r.running("web-a", "10.244.0.10"), r.running("web-b", "10.244.0.11"), r.running("web-c", "10.244.0.12")
				r.workloadChange(a, 0, "scale", 3, 2)
				r.end(c, 100*ms)
				r.end(b, 5*minute)
				d := r.pod("web-d", "10.244.0.13")
				r.created(d, 5*minute+s)
				r.ready(d, 5*minute+3*s)
			},
			want: []wantDisruption{{TriggerScale, []string{"web-c"}, 0}, {TriggerPodDeleted, []string{"web-b"}, 5 * minute}},
		},
		{
			// A liveness restart in place, then the rollout deletes the
			// pod a minute later: two lives, two disruptions.
			name: "a restart, then a deletion",
			build: func(r *rec) {
				a := r.running("web-a", "10.244.0.10")
				r.signal(a, 0, 15) // the kubelet's liveness kill
				r.exit(a, 10*ms, 0, 15)
				r.terminated(a, 500*ms, "Error", 143)
				e := r.podEvent(a, 2*s, event.ContainerStarted)
				r.add(e)
				r.ready(a, 4*s)
				r.change(60*s, web, "template")
				r.end(a, 62*s)
			},
			want: []wantDisruption{{TriggerRestart, []string{"web-a"}, 0}, {TriggerRollout, []string{"web-a@2s"}, 60 * s}},
		},
		{
			// The kubelet evicts for node pressure: the pod object stays,
			// Failed, reason Evicted; no deletion comes.
			name: "a kubelet eviction",
			build: func(r *rec) {
				a := r.running("web-a", "10.244.0.10")
				r.signal(a, 0, 15)
				r.exit(a, 30*ms, 0, 15)
				r.finished(a, 50*ms, "Evicted", "TerminationByKubelet")
				r.leave(a, 60*ms, ms)
				r.terminated(a, 70*ms, "Error", 143)
			},
			want: []wantDisruption{{TriggerNodePressure, []string{"web-a"}, 0}},
		},
		{
			// Two kubectl rollout restart 30 s apart, by a watcher that
			// records no status: two rollouts.
			name: "back-to-back rollouts without status",
			build: func(r *rec) {
				a := r.running("web-a", "10.244.0.10")
				b := r.pod("web-b", "10.244.0.11")
				r.change(0, web, "template")
				r.replace(a, b, s)
				r.change(30*s, web, "template")
				r.replace(b, r.pod("web-c", "10.244.0.12"), 31*s)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-a"}, 0}, {TriggerRollout, []string{"web-b"}, 30 * s}},
		},
		{
			name: "a rollout, then the Deployment's deletion",
			build: func(r *rec) {
				a := r.running("web-a", "10.244.0.10")
				b := r.pod("web-b", "10.244.0.11")
				r.status(0, web, "template", 0)
				r.replace(a, b, s)
				r.status(5*s, web, event.ChangeComplete, 0)
				r.change(8*s, web, "deleted")
				r.end(b, 8*s+10*ms)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-a"}, 0}, {TriggerDeleted, []string{"web-b"}, 8 * s}},
		},
		{
			// Held: a node drain evicts a pod of another Deployment while
			// web rolls out: two disruptions, each its workload's.
			name: "a node drain during another Deployment's rollout",
			build: func(r *rec) {
				a, b := r.running("web-a", "10.244.0.10"), r.running("web-b", "10.244.0.11")
				api := r.pod("api-a", "10.244.0.30")
				api.wl, api.svc = event.Workload{Kind: "Deployment", Name: "api"}, "api"
				r.created(api, -time.Hour.Nanoseconds())
				r.ready(api, -time.Hour.Nanoseconds()+s)
				r.status(0, web, "template", 0)
				r.replace(a, r.pod("web-a2", "10.244.0.20"), s)
				r.evicted(api, 3*s)
				r.signal(api, 3*s+10*ms, 15)
				r.exit(api, 3*s+20*ms, 0, 15)
				r.replace(b, r.pod("web-b2", "10.244.0.21"), 6*s)
				r.status(20*s, web, event.ChangeComplete, 0)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-a", "web-b"}, 0}, {TriggerEviction, []string{"api-a"}, 3 * s}},
		},
		{
			// Held: a readiness flap on a healthy pod ends nothing.
			name: "a readiness flap",
			build: func(r *rec) {
				a := r.running("web-a", "10.244.0.10")
				r.leave(a, 0, ms)
				r.ready(a, 10*s)
			},
			want: nil,
		},
		{
			// Held: an HPA scale-up during a rollout ends nothing more.
			name: "a scale-up during a rollout",
			build: func(r *rec) {
				a, b := r.running("web-a", "10.244.0.10"), r.running("web-b", "10.244.0.11")
				r.status(0, web, "template", 0)
				r.replace(a, r.pod("web-a2", "10.244.0.20"), s)
				r.workloadChange(a, 3*s, "scale", 2, 3)
				r.replace(b, r.pod("web-b2", "10.244.0.21"), 6*s)
				r.status(20*s, web, event.ChangeComplete, 0)
			},
			want: []wantDisruption{{TriggerRollout, []string{"web-a", "web-b"}, 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			r.capabilities("lab", -3*time.Hour.Nanoseconds(), FeatureMainProcess)
			tc.build(r)
			markMain(r)
			res, err := AnalyzeEvents(r.events, store.Query{}, Options{MaxFailures: -1})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := range res.Disruptions {
				got = append(got, gotDisruption(&res.Disruptions[i], r.t0).String())
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, w.String())
			}
			if strings.Join(got, "; ") != strings.Join(want, "; ") {
				t.Fatalf("the analysis's disruptions:\n got %q\nwant %q", got, want)
			}
			ids := map[string]bool{}
			for i, d := range res.Disruptions {
				if ids[d.ID] {
					t.Errorf("ID %s twice", d.ID)
				}
				ids[d.ID] = true
				if w := tc.want[i]; w.from != -1 && d.From != r.at(w.from) {
					t.Errorf("%s begins at %+v, want %+v", d.ID, time.Duration(d.From-r.t0), time.Duration(w.from))
				}
			}
			// The list over a store of the same events agrees, ID for ID.
			st, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "events.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.Append(context.Background(), r.events); err != nil {
				t.Fatal(err)
			}
			found, err := FindDisruptions(t.Context(), st, store.Query{}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, d := range found {
				listed = append(listed, d.ID+" "+gotDisruption(d, r.t0).String())
			}
			var analysed []string
			for i := range res.Disruptions {
				analysed = append(analysed, res.Disruptions[i].ID+" "+gotDisruption(&res.Disruptions[i], r.t0).String())
			}
			if strings.Join(listed, "; ") != strings.Join(analysed, "; ") {
				t.Errorf("the list's disruptions differ from the analysis's:\n list %q\n analysis %q", listed, analysed)
			}
		})
	}
}
