package store

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// stateEv builds a sealed event of kind k at day0+at in namespace ns.
func stateEv(k event.Kind, at time.Duration, ns string, fill func(*event.Event)) event.Event {
	e := event.Event{Kind: k, Time: day0.Add(at).UnixNano(), Node: "n1", Source: event.SourceWatcher,
		Pod: event.PodRef{Namespace: ns}}
	if fill != nil {
		fill(&e)
	}
	e.Seal()
	return e
}

func endpointEv(k event.Kind, at time.Duration, ns, svc, addr string, flags event.Flags) event.Event {
	return stateEv(k, at, ns, func(e *event.Event) {
		e.Service, e.Slice = svc, svc+"-abc"
		e.Local = netip.AddrPortFrom(netip.MustParseAddr(addr), 8080)
		e.Flags = flags
		e.Attrs = map[string]string{event.AttrConditions: "ready=true,serving=true,terminating=false"}
	})
}

func podEv(k event.Kind, at time.Duration, ns, uid, container string) event.Event {
	return stateEv(k, at, ns, func(e *event.Event) {
		e.Pod.Name, e.Pod.UID, e.Pod.Container = "pod-"+uid, uid, container
	})
}

// TestContractStateAt: for every entity, its newest state event at or
// before the instant, however old, and nothing else.
func TestContractStateAt(t *testing.T) {
	const min, day = time.Minute, 24 * time.Hour
	var (
		// An endpoint ready for nine days, observed, then going.
		epOldReady = endpointEv(event.EndpointReady, -9*day, "a", "web", "10.0.0.1", event.FlagObserved)
		epTerm     = endpointEv(event.EndpointTerminating, 10*min, "a", "web", "10.0.0.1", 0)
		epGone     = endpointEv(event.EndpointRemoved, 20*min, "a", "web", "10.0.0.1", 0)
		// The same address in another Service is another endpoint; a
		// second node's later record of a state is the newer one.
		epOther   = endpointEv(event.EndpointReady, -1*day, "a", "api", "10.0.0.1", event.FlagObserved)
		epOtherN2 = func() event.Event {
			e := endpointEv(event.EndpointNotReady, 5*min, "a", "api", "10.0.0.1", 0)
			e.Node = "n2"
			e.Seal()
			return e
		}()
		podReady    = podEv(event.PodReady, -2*day, "a", "u1", "")
		podCreated  = podEv(event.PodCreated, -2*day-min, "a", "u1", "")
		podDeletion = podEv(event.PodDeletion, 10*min, "a", "u1", "")
		cStarted    = podEv(event.ContainerStarted, -2*day, "a", "u1", "app")
		cSide       = podEv(event.ContainerStarted, -2*day, "a", "u1", "sidecar")
		cTerm       = podEv(event.ContainerTerminated, 15*min, "a", "u1", "app")
		cRestart    = podEv(event.ContainerStarted, 16*min, "a", "u1", "app")
		svc         = stateEv(event.ServiceChanged, -3*day, "a", func(e *event.Event) { e.Service, e.Reason = "web", event.ChangeObserved })
		wl          = stateEv(event.WorkloadChanged, -4*day, "a", func(e *event.Event) {
			e.Workload, e.Reason = event.Workload{Kind: "Deployment", Name: "web"}, event.ChangeTemplate
		})
		dp = func(node string, k event.Kind, at time.Duration) event.Event {
			return stateEv(k, at, "a", func(e *event.Event) {
				e.Node, e.Source, e.Service = node, event.SourceDataplane, "a/web"
				e.Local = netip.MustParseAddrPort("10.0.0.1:8080")
				e.Attrs = map[string]string{event.AttrProxy: event.ProxyNFTables}
			})
		}
		dpN1Add = dp("n1", event.DataplaneEndpointAdded, -1*day)
		dpN1Rm  = dp("n1", event.DataplaneEndpointRemoved, 12*min)
		dpN2Add = dp("n2", event.DataplaneEndpointAdded, -1*day)
		// Another namespace; and events that record no state.
		otherNS = endpointEv(event.EndpointReady, -5*day, "b", "db", "10.0.1.1", event.FlagObserved)
		exit    = podEv(event.ProcessExit, 11*min, "a", "u1", "app")
		failure = stateEv(event.ClientFailure, 11*min, "a", func(e *event.Event) { e.Source, e.Service = event.SourceClient, "web" })
	)
	all := []event.Event{epOldReady, epTerm, epGone, epOther, epOtherN2, podReady, podCreated, podDeletion,
		cStarted, cSide, cTerm, cRestart, svc, wl, dpN1Add, dpN1Rm, dpN2Add, otherNS, exit, failure}
	ids := func(evs []event.Event) []event.ID {
		out := make([]event.ID, len(evs))
		for i, e := range evs {
			out[i] = e.ID
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		name string
		at   time.Duration
		ns   string
		want []event.Event
	}{
		{"before anything", -10 * day, "", nil},
		{"nine days in", -9*day + min, "", []event.Event{epOldReady}},
		{"window start", 0, "", []event.Event{epOldReady, epOther, podReady, podCreated, cStarted, cSide, svc, wl, dpN1Add, dpN2Add, otherNS}},
		{"window start, namespace a", 0, "a", []event.Event{epOldReady, epOther, podReady, podCreated, cStarted, cSide, svc, wl, dpN1Add, dpN2Add}},
		{"namespace b", 0, "b", []event.Event{otherNS}},
		{"at an event's own time", 10 * min, "a", []event.Event{epTerm, epOtherN2, podReady, podDeletion, cStarted, cSide, svc, wl, dpN1Add, dpN2Add}},
		{"during the restart", 15*min + time.Second, "a", []event.Event{epTerm, epOtherN2, podReady, podDeletion, cTerm, cSide, svc, wl, dpN1Rm, dpN2Add}},
		{"gone entities stay", time.Hour, "a", []event.Event{epGone, epOtherN2, podReady, podDeletion, cRestart, cSide, svc, wl, dpN1Rm, dpN2Add}},
	}
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		// In two batches, the older one last: the entity list must keep
		// each entity's first and last times whatever the order.
		if err := s.Append(ctx, all[len(all)/2:]); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, all[:len(all)/2]); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			got, err := s.StateAt(ctx, day0.Add(c.at).UnixNano(), c.ns)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if !reflect.DeepEqual(ids(got), ids(c.want)) {
				t.Errorf("%s: got %d events %v, want %d", c.name, len(got), kinds(got), len(c.want))
			}
			for i := 1; i < len(got); i++ {
				if got[i-1].Time > got[i].Time {
					t.Errorf("%s: not in time order at %d", c.name, i)
				}
			}
		}
		// The events come back whole.
		got, err := s.StateAt(ctx, day0.UnixNano(), "b")
		if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], otherNS) {
			t.Fatalf("StateAt gave %+v, %v; want %+v", got, err, otherNS)
		}
		// Pruning everything up to a time forgets the entities whose
		// every event went; the others keep their newest state.
		if _, err := s.Prune(ctx, day0.Add(-day/2).UnixNano()); err != nil {
			t.Fatal(err)
		}
		got, err = s.StateAt(ctx, day0.UnixNano(), "")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Errorf("after pruning every state older than the instant: %v, want none", kinds(got))
		}
		got, err = s.StateAt(ctx, day0.Add(time.Hour).UnixNano(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if want := []event.Event{epGone, epOtherN2, podDeletion, cRestart, dpN1Rm}; !reflect.DeepEqual(ids(got), ids(want)) {
			t.Errorf("after pruning: %v, want %d events", kinds(got), len(want))
		}
	})
}

func kinds(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Kind) + "@" + e.Node + ":" + e.Entity()
	}
	return out
}

// longLivedCluster is days of history of a cluster that does not change:
// 100 pods behind 5 Services, each pod's endpoint, readiness and container
// recorded again every 10 minutes as the watcher re-observes them, beside
// kernel events (probes' exits) that record no state. It returns the
// events and how many entities they describe.
func longLivedCluster(days int) ([]event.Event, int) {
	const pods, services, noisePerDay = 100, 5, 20000
	start := day0.AddDate(0, 0, -days)
	var out []event.Event
	for tick := start; tick.Before(day0); tick = tick.Add(10 * time.Minute) {
		at := tick.Sub(day0)
		for s := 0; s < services; s++ {
			out = append(out, stateEv(event.ServiceChanged, at+time.Duration(s), "shop", func(e *event.Event) {
				e.Service, e.Reason, e.Flags = "svc"+string(rune('a'+s)), event.ChangeObserved, event.FlagObserved
			}))
		}
		for p := 0; p < pods; p++ {
			uid := "pod-" + string(rune('a'+p/26)) + string(rune('a'+p%26))
			addr := netip.AddrFrom4([4]byte{10, 1, byte(p / 200), byte(p%200 + 1)}).String()
			off := at + time.Duration(10+3*p)*time.Microsecond
			out = append(out,
				endpointEv(event.EndpointReady, off, "shop", "svc"+string(rune('a'+p%services)), addr, event.FlagObserved),
				podEv(event.PodReady, off+1, "shop", uid, ""),
				podEv(event.ContainerStarted, off+2, "shop", uid, "app"))
		}
	}
	step := 24 * time.Hour / noisePerDay
	for t := step; t < time.Duration(days)*24*time.Hour; t += step {
		out = append(out, podEv(event.ProcessExit, -t, "shop", "pod-aa", "app"))
	}
	slices.SortFunc(out, func(a, b event.Event) int { return int(a.Time - b.Time) })
	return out, pods*3 + services
}

// BenchmarkStateAt measures StateAt at the end of 1 day and of 10 days of
// the same cluster's history, alternating the two stores in one run, and
// prints each one's median and spread and the ratio of the medians: the
// query walks the entities, so the ratio stays near 1.
//
//	go test ./store -run '^$' -bench StateAt -benchtime 1x
//
// With DRAINSCOPE_TEST_POSTGRES set it measures Postgres too.
func BenchmarkStateAt(b *testing.B) {
	ctx := context.Background()
	short, n := longLivedCluster(1)
	long, _ := longLivedCluster(10)
	for _, be := range backends(b) {
		if be.name == "postgres" && os.Getenv("DRAINSCOPE_TEST_POSTGRES") == "" {
			fmt.Println("StateAt benchmark: postgres skipped, DRAINSCOPE_TEST_POSTGRES unset")
			continue
		}
		stores := make([]Store, 2)
		for i, evs := range [][]event.Event{short, long} {
			s, _ := be.open(b)
			if err := batches(evs, func(batch []event.Event) error { return s.Append(ctx, batch) }); err != nil {
				b.Fatal(err)
			}
			stores[i] = s
		}
		const rounds = 31
		took := [2][]time.Duration{}
		for i := 0; i < b.N; i++ {
			for r := 0; r < rounds; r++ {
				for j, s := range stores {
					t0 := time.Now()
					got, err := s.StateAt(ctx, day0.UnixNano(), "")
					took[j] = append(took[j], time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
					if len(got) != n {
						b.Fatalf("StateAt gave %d events, want one per entity (%d)", len(got), n)
					}
				}
			}
		}
		med := func(d []time.Duration) (time.Duration, time.Duration, time.Duration) {
			slices.Sort(d)
			return d[len(d)/2], d[len(d)/10], d[len(d)*9/10]
		}
		m1, lo1, hi1 := med(took[0])
		m10, lo10, hi10 := med(took[1])
		fmt.Printf("StateAt %s, %d entities: 1 day (%d events) median %v [p10 %v, p90 %v]; 10 days (%d events) median %v [p10 %v, p90 %v]; 10d/1d %.2f\n",
			be.name, n, len(short), m1.Round(time.Microsecond), lo1.Round(time.Microsecond), hi1.Round(time.Microsecond),
			len(long), m10.Round(time.Microsecond), lo10.Round(time.Microsecond), hi10.Round(time.Microsecond), float64(m10)/float64(m1))
		b.ReportMetric(float64(m10)/float64(m1), "10d/1d")
	}
}

// sortByTimeThenID puts every event in time order and by ID within a
// time, whatever order they came in, each event whole.
func TestSortByTimeThenID(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 10_007} {
		var evs []event.Event
		for i := range n {
			// Times repeat (i/3), IDs fall within a time: the order given
			// is neither the time's nor the ID's.
			evs = append(evs, event.Event{Time: int64((i * 7919) % n / 3), ID: event.ID(n - i), Kind: event.PodReady,
				Node: fmt.Sprintf("n%d", n-i)})
		}
		want := slices.Clone(evs)
		slices.SortFunc(want, func(a, b event.Event) int { return byTimeThenID(&a, &b) })
		sortByTimeThenID(evs)
		for i := range evs {
			if evs[i].Time != want[i].Time || evs[i].ID != want[i].ID || evs[i].Node != want[i].Node {
				t.Fatalf("n=%d: event %d is (%d, %d, %s), want (%d, %d, %s)", n, i,
					evs[i].Time, evs[i].ID, evs[i].Node, want[i].Time, want[i].ID, want[i].Node)
			}
		}
	}
}

// TestContractPodFinished: a pod that ended with no deletion (the
// kubelet's node-pressure eviction) is stored, read back whole by its
// kind, and is its pod's lifecycle state from then on.
func TestContractPodFinished(t *testing.T) {
	created := podEv(event.PodCreated, -time.Hour, "a", "u1", "")
	finished := stateEv(event.PodFinished, 5*time.Minute, "a", func(e *event.Event) {
		e.Pod.Name, e.Pod.UID, e.Reason = "pod-u1", "u1", "Evicted"
		e.Attrs = map[string]string{event.AttrPhase: "Failed", event.AttrDisruption: "TerminationByKubelet",
			event.AttrMessage: "The node was low on resource: memory."}
	})
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		if err := s.Append(ctx, []event.Event{created, finished}); err != nil {
			t.Fatal(err)
		}
		got, err := Events(ctx, s, Query{Kinds: []event.Kind{event.PodFinished}})
		if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], finished) {
			t.Fatalf("pod_finished read back as %+v, %v; want %+v", got, err, finished)
		}
		for _, c := range []struct {
			at   time.Duration
			want event.Event
		}{{0, created}, {10 * time.Minute, finished}} {
			st, err := s.StateAt(ctx, day0.Add(c.at).UnixNano(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if len(st) != 1 || st[0].ID != c.want.ID {
				t.Errorf("state at %v: %v, want %s", c.at, kinds(st), c.want.Kind)
			}
		}
	})
}
