package analysis

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"v1.30.2": {1, 30}, "1.29": {1, 29}, "v1.28.3-eks-1a2b3c": {1, 28}, "v1.31.0+k3s1": {1, 31}, "v1.34.0-gke.1": {1, 34},
	} {
		if got, ok := ParseVersion(in); !ok || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "v1", "latest", "v1.x"} {
		if _, ok := ParseVersion(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestPatchByVersion: the same race on the same measured lag gives each
// cluster the preStop it accepts: an exec of sleep before 1.30 (the sleep
// action is not there; advising it breaks the rollout), the sleep action
// from 1.30 (beta, on by default) and 1.34 (GA), replacing an exec that
// failed; before 1.30 a failed exec gets no patch but the way out; the
// oldest kubelet decides over a newer API server; a Cilium dataplane says
// whose lag the wait covers; an unrecorded version gets no form at all.
func TestPatchByVersion(t *testing.T) {
	cluster := func(api string, kubelets ...string) *Cluster {
		c := &Cluster{APIServer: api, Kubelets: map[string]string{}}
		for i, k := range kubelets {
			c.Kubelets[string(rune('a'+i))] = k
		}
		return c
	}
	sec := func(n int64) *int64 { return &n }
	race := func(c *Cluster, stop StopSpec) *budget {
		return &budget{Namespace: "shop", Kind: "Deployment", Name: "web", Stop: &stop,
			Lag: 1_200_000_000, LagFrom: "p99 of 4 pods", Drain: 2_000_000_000, DrainFrom: "the longest of 4 pods",
			Causes: []Cause{CauseEndpointRace, CauseKeepAliveAtExit}, Cluster: c, CiliumLag: -1}
	}
	// 1.2 s × 1.5 + 2 s = 3.8 s → 4 s; grace 4 + ceil(2 s × 1.5 + 5 s) = 12 s.
	cases := []struct {
		name      string
		b         *budget
		preStop   any // the container's lifecycle.preStop in the patch; nil: none
		grace     any
		covers    []Cause
		noteHas   string
		fromHas   string
		noCommand bool
	}{
		{name: "1.28: exec sleep", b: race(cluster("v1.28.9", "v1.28.9"), StopSpec{Container: "app", Recorded: true, GracePeriod: sec(10)}),
			preStop: map[string]any{"exec": map[string]any{"command": []any{"sleep", "4"}}}, grace: 12.0,
			covers: []Cause{CauseEndpointRace}, fromHas: "no sleep action before 1.30"},
		{name: "1.29: exec sleep", b: race(cluster("v1.29.4", "v1.29.4", "v1.29.1"), StopSpec{Container: "app", Recorded: true, GracePeriod: sec(10)}),
			preStop: map[string]any{"exec": map[string]any{"command": []any{"sleep", "4"}}}, grace: 12.0,
			covers: []Cause{CauseEndpointRace}},
		{name: "1.30: the sleep action, beta", b: race(cluster("v1.30.2", "v1.30.2"), StopSpec{Container: "app", Recorded: true, GracePeriod: sec(10)}),
			preStop: map[string]any{"sleep": map[string]any{"seconds": 4.0}}, grace: 12.0,
			covers: []Cause{CauseEndpointRace}, fromHas: "beta, on by default"},
		{name: "1.34: the sleep action, GA, grace already enough", b: race(cluster("v1.34.1", "v1.34.1"), StopSpec{Container: "app", Recorded: true, GracePeriod: sec(30)}),
			preStop: map[string]any{"sleep": map[string]any{"seconds": 4.0}}, grace: nil,
			covers: []Cause{CauseEndpointRace}, fromHas: "GA on 1.34"},
		{name: "1.34 API server, a 1.29 kubelet: exec", b: race(cluster("v1.34.1", "v1.34.1", "v1.29.8"), StopSpec{Container: "app", Recorded: true}),
			preStop: map[string]any{"exec": map[string]any{"command": []any{"sleep", "4"}}}, grace: nil,
			covers: []Cause{CauseEndpointRace}, fromHas: "the oldest of 2 nodes"},
		{name: "1.30: a failed exec sleep becomes the sleep action", b: func() *budget {
			b := race(cluster("v1.30.2", "v1.30.2"), StopSpec{Container: "app", Recorded: true, PreStop: event.PreStopExec, PreStopSleep: sec(5), HookFailed: 7})
			b.Causes = []Cause{CausePreStopFailed}
			return b
		}(),
			preStop: map[string]any{"sleep": map[string]any{"seconds": 4.0}, "exec": nil}, grace: nil,
			covers: []Cause{CausePreStopFailed}},
		{name: "1.29: a failed exec sleep cannot be patched", b: func() *budget {
			b := race(cluster("v1.29.4", "v1.29.4"), StopSpec{Container: "app", Recorded: true, PreStop: event.PreStopExec, PreStopSleep: sec(5), HookFailed: 7, GracePeriod: sec(10)})
			b.Causes = []Cause{CausePreStopFailed}
			return b
		}(),
			preStop: nil, grace: nil, noteHas: "put a sleep binary in the image", noCommand: true},
		{name: "an httpGet preStop is not replaced", b: race(cluster("v1.34.1", "v1.34.1"), StopSpec{Container: "app", Recorded: true, PreStop: event.PreStopHTTP}),
			preStop: nil, noteHas: "make it wait 4 s before it returns", noCommand: true},
		{name: "a preStop that already waits enough", b: race(cluster("v1.34.1", "v1.34.1"), StopSpec{Container: "app", Recorded: true, PreStop: event.PreStopSleep, PreStopSleep: sec(6), GracePeriod: sec(30)}),
			preStop: nil, noteHas: "already waits 6 s", noCommand: true},
		{name: "no version recorded", b: race(nil, StopSpec{Container: "app", Recorded: true, GracePeriod: sec(30)}),
			preStop: nil, noteHas: "version was not recorded", noCommand: true},
		{name: "Cilium, its lag measured", b: func() *budget {
			b := race(cluster("v1.30.2", "v1.30.2"), StopSpec{Container: "app", Recorded: true, GracePeriod: sec(30)})
			b.Cilium, b.CiliumLag = true, 900_000_000
			return b
		}(),
			preStop: map[string]any{"sleep": map[string]any{"seconds": 4.0}}, covers: []Cause{CauseEndpointRace}, noteHas: "Cilium's own lag, measured in its maps (p99 900 ms)"},
		{name: "Cilium, its lag not recorded", b: func() *budget {
			b := race(cluster("v1.30.2", "v1.30.2"), StopSpec{Container: "app", Recorded: true, GracePeriod: sec(30)})
			b.Cilium = true
			return b
		}(),
			preStop: map[string]any{"sleep": map[string]any{"seconds": 4.0}}, covers: []Cause{CauseEndpointRace}, noteHas: "covers the EndpointSlice's propagation only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planPatch(c.b)
			if !reflect.DeepEqual(p.NeedsCode, []Cause(nil)) && !reflect.DeepEqual(p.NeedsCode, []Cause{CauseKeepAliveAtExit}) {
				t.Errorf("needs code %v", p.NeedsCode)
			}
			if c.noCommand {
				if p.Strategic != "" || p.Command != "" {
					t.Errorf("a patch: %s", p.Command)
				}
			}
			var doc map[string]any
			if p.Strategic != "" {
				if err := json.Unmarshal([]byte(p.Strategic), &doc); err != nil {
					t.Fatalf("patch %q: %v", p.Strategic, err)
				}
				if !strings.HasPrefix(p.Command, "kubectl -n shop patch deployment web --type strategic -p '") {
					t.Errorf("command %q", p.Command)
				}
			}
			spec, _ := dig(doc, "spec", "template", "spec").(map[string]any)
			var gotPre any
			if cs, ok := spec["containers"].([]any); ok && len(cs) == 1 {
				ctr := cs[0].(map[string]any)
				if ctr["name"] != "app" {
					t.Errorf("container %v", ctr["name"])
				}
				gotPre = dig(ctr, "lifecycle", "preStop")
			}
			if !reflect.DeepEqual(gotPre, c.preStop) {
				t.Errorf("preStop %#v, want %#v (patch %s; notes %q)", gotPre, c.preStop, p.Strategic, p.Notes)
			}
			if g := spec["terminationGracePeriodSeconds"]; !reflect.DeepEqual(g, c.grace) {
				t.Errorf("grace %v, want %v", g, c.grace)
			}
			if !reflect.DeepEqual(p.Covers, c.covers) {
				t.Errorf("covers %v, want %v", p.Covers, c.covers)
			}
			if c.noteHas != "" && !strings.Contains(strings.Join(p.Notes, "\n"), c.noteHas) {
				t.Errorf("notes %q lack %q", p.Notes, c.noteHas)
			}
			var froms []string
			for _, v := range p.Values {
				if v.From == "" {
					t.Errorf("value %s says not where it came from", v.Field)
				}
				froms = append(froms, v.From)
			}
			if c.fromHas != "" && !strings.Contains(strings.Join(froms, "\n"), c.fromHas) {
				t.Errorf("values' sources %q lack %q", froms, c.fromHas)
			}
		})
	}
}

// TestPatchSidecarByMesh: a proxy that exited before its app gets
// Linkerd's own annotation, Istio's setting as a note (its annotation is
// one document a patch would replace), and another proxy the native
// sidecar only where the cluster has them (1.29+).
func TestPatchSidecarByMesh(t *testing.T) {
	b := func(mesh string, api string) *budget {
		return &budget{Namespace: "shop", Kind: "Deployment", Name: "web", Lag: -1, Drain: 1_000_000_000, CiliumLag: -1,
			Stop:   &StopSpec{Container: "app", Recorded: true, PreStop: event.PreStopSleep, PreStopSleep: new(int64(5)), GracePeriod: new(int64(60))},
			Causes: []Cause{CauseSidecarExit}, Mesh: mesh, Proxies: []string{"proxy"}, Cluster: &Cluster{APIServer: api}}
	}
	p := planPatch(b("linkerd", "v1.30.0"))
	if !strings.Contains(p.Strategic, `"config.alpha.linkerd.io/proxy-wait-before-exit-seconds":"9"`) || !reflect.DeepEqual(p.Covers, []Cause{CauseSidecarExit}) {
		t.Errorf("linkerd: %s covers %v", p.Strategic, p.Covers)
	}
	p = planPatch(b("istio", "v1.30.0"))
	if p.Strategic != "" || !strings.Contains(strings.Join(p.Notes, " "), "terminationDrainDuration: 9s") {
		t.Errorf("istio: %s %q", p.Strategic, p.Notes)
	}
	if p = planPatch(b("", "v1.28.0")); strings.Contains(strings.Join(p.Notes, " "), "native sidecar") {
		t.Errorf("1.28 offered native sidecars: %q", p.Notes)
	}
	if p = planPatch(b("", "v1.29.0")); !strings.Contains(strings.Join(p.Notes, " "), "native sidecar") {
		t.Errorf("1.29 not offered native sidecars: %q", p.Notes)
	}
}

// TestPatchSIGKILLWithoutADrainSeen: when every pod was killed before it
// exited, its drain time is unknown and no grace period is made up.
func TestPatchSIGKILLWithoutADrainSeen(t *testing.T) {
	p := planPatch(&budget{Namespace: "shop", Kind: "Deployment", Name: "web", Lag: -1, Drain: -1, Killed: 3, CiliumLag: -1,
		Stop: &StopSpec{Container: "app", Recorded: true, GracePeriod: new(int64(30))}, Causes: []Cause{CauseSIGKILL}, Cluster: &Cluster{APIServer: "v1.34.0"}})
	if p.Strategic != "" || len(p.Covers) != 0 || !strings.Contains(strings.Join(p.Notes, " "), "SIGKILL ended 3 pods before they exited") {
		t.Errorf("%s covers %v notes %q", p.Strategic, p.Covers, p.Notes)
	}
}

func dig(m any, keys ...string) any {
	for _, k := range keys {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

// TestFailedPreStopHookIsItsOwnCause: the same refusals in rotation are
// an endpoint race, and with the kubelet's FailedPreStopHook about the
// app's container in the pod's life they are the failed hook's, whose
// patch is the sleep action where every node runs 1.30+ (the failed exec
// removed) and no patch but the way out where a 1.29 kubelet runs.
func TestFailedPreStopHookIsItsOwnCause(t *testing.T) {
	run := func(hook bool, kubeletB string) *Result {
		r := dataplaneLagWith(kubeletB, map[string]string{event.AttrPreStop: event.PreStopExec, event.AttrPreStopSleep: "10"})
		if hook {
			var e event.Event
			for _, x := range r.events {
				if x.Kind == event.PodCreated {
					e = x
				}
			}
			e.Time, e.Kind = r.at(3*ms), event.KubeletEvent
			e.Reason, e.Attrs = event.KubeletFailedPreStopHook, map[string]string{event.AttrMessage: "PreStopHook failed", event.AttrCount: "1"}
			r.add(e)
		}
		res, err := AnalyzeEvents(r.events, store.Query{Window: event.Window{From: r.t0 - 120*s, To: r.t0 + 120*s}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Disruptions) != 1 {
			t.Fatalf("%d disruptions", len(res.Disruptions))
		}
		return res
	}
	res := run(false, "v1.33.1")
	d := res.Disruptions[0]
	if d.ByCause[CauseEndpointRace] != 3 || d.ByCause[CausePreStopFailed] != 0 {
		t.Fatalf("without the hook's failure: %v", d.ByCause)
	}
	// Its preStop waits 10 s by its spec: above the 7 s the lag needs.
	if d.Patch == nil || d.Patch.Strategic != "" || !strings.Contains(strings.Join(d.Patch.Notes, " "), "already waits 10 s") {
		t.Errorf("without the hook's failure: %+v", d.Patch)
	}

	res = run(true, "v1.33.1")
	d = res.Disruptions[0]
	if d.ByCause[CausePreStopFailed] != 3 || d.ByCause[CauseEndpointRace] != 0 {
		t.Fatalf("with the hook's failure: %v", d.ByCause)
	}
	want := `{"spec":{"template":{"spec":{"containers":[{"lifecycle":{"preStop":{"exec":null,"sleep":{"seconds":7}}},"name":"app"}]}}}}`
	if d.Patch == nil || d.Patch.Strategic != want || !reflect.DeepEqual(d.Patch.Covers, []Cause{CausePreStopFailed}) {
		t.Errorf("1.33 everywhere: %+v", d.Patch)
	}
	var tl *PodTimeline
	for i := range res.Timelines {
		if res.Timelines[i].Pod.Name == "api-5f7-a1" {
			tl = &res.Timelines[i]
		}
	}
	if tl == nil || tl.Stop == nil || tl.Stop.HookFailed == 0 || tl.Stop.PreStop != event.PreStopExec || *tl.Stop.PreStopSleep != 10 || *tl.Stop.GracePeriod != 30 {
		t.Errorf("the timeline's stop: %+v", tl)
	}

	d = run(true, "v1.29.6").Disruptions[0]
	if d.Patch == nil || d.Patch.Strategic != "" || !strings.Contains(strings.Join(d.Patch.Notes, " "), "put a sleep binary in the image") {
		t.Errorf("a 1.29 kubelet: %+v", d.Patch)
	}
}

// TestCheckJudgesTheBudget: before any rollout, a workload whose preStop
// waits less than its endpoints took to leave rotation is risky, with the
// patch its rollout's report would print; one whose preStop waits longer
// is not, and says why.
func TestCheckJudgesTheBudget(t *testing.T) {
	check := func(spec map[string]string) WorkloadCheck {
		r := dataplaneLagWith("v1.33.1", spec)
		res, err := AnalyzeEvents(r.events, store.Query{Window: event.Window{From: r.t0 - 120*s, To: r.t0 + 120*s}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		cs := CheckResult(res)
		if len(cs) != 1 || cs[0].Kind != "Deployment" || cs[0].Name != "api" {
			t.Fatalf("checks %+v", cs)
		}
		return cs[0]
	}
	c := check(nil)
	if !c.Risky || !reflect.DeepEqual(c.Reasons, []string{RiskRace}) || c.Patch == nil ||
		c.Patch.Strategic != `{"spec":{"template":{"spec":{"containers":[{"lifecycle":{"preStop":{"sleep":{"seconds":7}}},"name":"app"}]}}}}` {
		t.Errorf("no preStop: %+v %+v", c, c.Patch)
	}
	c = check(map[string]string{event.AttrPreStop: event.PreStopSleep, event.AttrPreStopSleep: "10"})
	if c.Risky || c.Patch != nil || !strings.Contains(strings.Join(c.Why, " "), "waits 10 s, longer than the 3.0 s") {
		t.Errorf("a 10 s preStop: %+v", c)
	}
}

// TestPatchGuardsAnOpenRace: a rollout whose failures were keep-alive
// cuts alone, on a workload whose preStop waits less than its endpoints
// took, gets the preStop too, as guarding against the race its load did
// not happen to meet; one whose preStop waits long enough gets none.
func TestPatchGuardsAnOpenRace(t *testing.T) {
	b := &budget{Namespace: "shop", Kind: "Deployment", Name: "web", Lag: 990_000_000, Drain: 3_000_000_000, CiliumLag: -1,
		Stop: &StopSpec{Container: "app", Recorded: true, GracePeriod: new(int64(30))}, Causes: []Cause{CauseKeepAliveAtExit},
		Cluster: &Cluster{APIServer: "v1.37.2"}}
	p := planPatch(b)
	if !reflect.DeepEqual(p.Guards, []Cause{CauseEndpointRace}) || len(p.Covers) != 0 || !reflect.DeepEqual(p.NeedsCode, []Cause{CauseKeepAliveAtExit}) ||
		!strings.Contains(p.Strategic, `"sleep":{"seconds":4}`) {
		t.Errorf("an open race: %+v", p)
	}
	b.Stop.PreStop, b.Stop.PreStopSleep = event.PreStopSleep, new(int64(5))
	if p = planPatch(b); p.Strategic != "" || len(p.Guards) != 0 {
		t.Errorf("a 5 s preStop: %+v", p)
	}
}

// TestPatchGuardsAFailedHook: a rollout whose hook failed but whose
// failures were all keep-alive cuts gets the sleep action in place of the
// failed exec, as guarding against the failed hook.
func TestPatchGuardsAFailedHook(t *testing.T) {
	p := planPatch(&budget{Namespace: "shop", Kind: "Deployment", Name: "web", Lag: 800_000_000, Drain: -1, CiliumLag: -1,
		Stop:   &StopSpec{Container: "app", Recorded: true, PreStop: event.PreStopExec, PreStopSleep: new(int64(5)), HookFailed: 9},
		Causes: []Cause{CauseKeepAliveAtExit}, Cluster: &Cluster{APIServer: "v1.37.2"}})
	if !reflect.DeepEqual(p.Guards, []Cause{CausePreStopFailed}) || !strings.Contains(p.Strategic, `"exec":null`) {
		t.Errorf("%+v", p)
	}
}
