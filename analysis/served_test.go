package analysis

import (
	"sort"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// TestServedBy: which pod a failure was served by, decided on its own, for
// each way a failure leads to its pod and for the records that must not
// lead to one. The failure is the case's only client failure; every other
// event is fed to the aligner first.
func TestServedBy(t *testing.T) {
	type pods struct{ web1, web2, api *tpod }
	for _, tc := range []struct {
		name    string
		build   func(r *rec, p pods)
		pod     string // "" for none
		via     string
		records int // kernel records on the client address kept
	}{
		{
			name: "client-reported backend",
			build: func(r *rec, p pods) {
				// A record of web-1 on the same client address does not
				// outweigh the backend the client logged.
				r.connClosed(p.web1, -100*ms, client(1), "local", 0)
				r.failure(0, client(1), event.FailEOF, backend(p.web2))
			},
			pod: "web-2", via: "backend", records: 0,
		},
		{
			name: "dialled a pod's address",
			build: func(r *rec, p pods) {
				r.refusedTo(0, client(1), "", p.web2.addr())
			},
			pod: "web-2", via: "target",
		},
		{
			name: "kernel record matching the client address",
			build: func(r *rec, p pods) {
				r.rst(p.web1, -1*ms, client(1), "NO_SOCKET", 0)
				r.failure(0, client(1), event.FailReset)
			},
			pod: "web-1", via: "kernel", records: 1,
		},
		{
			name: "kernel record just after the failure, none before",
			build: func(r *rec, p pods) {
				r.failure(0, client(1), event.FailReset)
				r.rst(p.web1, 5*ms, client(1), "NO_SOCKET", 0)
			},
			pod: "web-1", via: "kernel", records: 1,
		},
		{
			name: "Service-only client with no record",
			build: func(r *rec, p pods) {
				r.failure(0, client(1), event.FailEOF, service("web"))
			},
			pod: "", via: "",
		},
		{
			name: "a record on another client address",
			build: func(r *rec, p pods) {
				r.rst(p.web1, -1*ms, client(2), "NO_SOCKET", 0)
				r.failure(0, client(1), event.FailReset)
			},
			pod: "", via: "",
		},
		{
			name: "reused client port on another pod outside the window",
			build: func(r *rec, p pods) {
				r.connClosed(p.web2, -15*s, client(1), "local", 0)
				r.failure(0, client(1), event.FailEOF)
			},
			pod: "", via: "",
		},
		{
			name: "reused client port on another pod inside the window",
			build: func(r *rec, p pods) {
				// The same record 5 s before, within the kernel window:
				// the check above fails for want of the window, not of
				// the record.
				r.connClosed(p.web2, -5*s, client(1), "local", 0)
				r.failure(0, client(1), event.FailEOF)
			},
			pod: "web-2", via: "kernel", records: 1,
		},
		{
			name: "reused client port: the latest record before the failure",
			build: func(r *rec, p pods) {
				r.connClosed(p.web2, -5*s, client(1), "local", 0)
				r.rst(p.web1, -2*ms, client(1), "NO_SOCKET", 0)
				r.failure(0, client(1), event.FailReset)
			},
			pod: "web-1", via: "kernel", records: 1,
		},
		{
			// The port's earlier connection closed on web-2 5 s before
			// the failure, 2 s before this request began: a connection
			// that never answered (or was refused) was a new one.
			name: "reused client port, a timeout begun after the record",
			build: func(r *rec, p pods) {
				r.connClosed(p.web2, -5*s, client(1), "local", 0)
				r.failure(0, client(1), event.FailTimeout, took(3*time.Second))
			},
			pod: "", via: "",
		},
		{
			name: "reused client port, a refusal begun after the record",
			build: func(r *rec, p pods) {
				r.connClosed(p.web2, -5*s, client(1), "local", 0)
				r.failure(0, client(1), event.FailRefused, took(time.Second))
			},
			pod: "", via: "",
		},
		{
			// Refused before the Service had a ready endpoint; the
			// client's retry got the same port and reached web-1 once
			// it was routed, and web-1 closed that connection.
			name: "reused client port, a refusal then the retry's close",
			build: func(r *rec, p pods) {
				r.failure(0, client(1), event.FailRefused, took(time.Millisecond))
				r.connClosed(p.web1, 1500*ms, client(1), "local", 0)
			},
			pod: "", via: "",
		},
		{
			name: "a timeout's own record, after its request began",
			build: func(r *rec, p pods) {
				r.rst(p.web1, -2*s, client(1), "NO_SOCKET", 0)
				r.failure(0, client(1), event.FailTimeout, took(3*time.Second))
			},
			pod: "web-1", via: "kernel", records: 1,
		},
		{
			name: "an EOF on a connection closed before the request began",
			build: func(r *rec, p pods) {
				// A keep-alive connection the pod closed: the client
				// fails on its next request, begun after the close.
				r.connClosed(p.web2, -5*s, client(1), "local", 0)
				r.failure(0, client(1), event.FailEOF, took(time.Millisecond))
			},
			pod: "web-2", via: "kernel", records: 1,
		},
		{
			// The client's connection was made while web held 10.96.0.10;
			// web was deleted 3 s before, db holds the address since, and
			// web-1's close of that connection is the failure.
			name: "a connection that outlived its Service, its address another's",
			build: func(r *rec, p pods) {
				r.svc(-3*s, "default", "web", event.ChangeDeleted, "")
				r.svc(-2*s, "default", "db", event.ChangeCreated, "10.96.0.10")
				r.connClosed(p.web1, -2*ms, client(1), "local", 0)
				r.failure(0, client(1), event.FailEOF, func(e *event.Event) { e.Attrs[event.AttrTarget] = "10.96.0.10:80" })
			},
			pod: "web-1", via: "kernel", records: 1,
		},
		{
			name: "reused client port on another Service's pod",
			build: func(r *rec, p pods) {
				r.connClosed(p.api, -300*ms, client(1), "local", 0)
				r.refusedTo(0, client(1), "10.96.0.10:80", clusterIP)
			},
			pod: "", via: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			r.svc(-40*s, "default", "web", event.ChangeObserved, "10.96.0.10")
			r.svc(-40*s, "default", "api", event.ChangeObserved, "10.96.0.20")
			p := pods{web1: r.pod("web-1", "10.244.0.11"), web2: r.pod("web-2", "10.244.0.12"), api: r.pod("api-1", "10.244.0.13")}
			p.api.svc, p.api.wl = "api", event.Workload{Kind: "Deployment", Name: "api"}
			for _, tp := range []*tpod{p.web1, p.web2, p.api} {
				r.created(tp, -30*s)
				r.ready(tp, -29*s)
			}
			tc.build(r, p)
			sort.SliceStable(r.events, func(i, j int) bool { return r.events[i].Time < r.events[j].Time })

			a := NewAligner(Options{}, nil, nil)
			var f *event.Event
			for i := range r.events {
				e := &r.events[i]
				if e.Kind == event.ClientFailure {
					if f != nil {
						t.Fatal("more than one client failure in the case")
					}
					f = e
					continue
				}
				if err := a.Add(e); err != nil {
					t.Fatal(err)
				}
			}
			if f == nil {
				t.Fatal("no client failure in the case")
			}
			got := a.servedBy(f, false)
			name := ""
			if got.pod != nil {
				name = got.pod.ref.Name
			}
			if name != tc.pod || got.via != tc.via {
				t.Errorf("served by %q via %q; want %q via %q", name, got.via, tc.pod, tc.via)
			}
			if len(got.kernel) != tc.records {
				t.Errorf("%d kernel records kept, want %d", len(got.kernel), tc.records)
			}
			for _, k := range got.kernel {
				if got.pod != nil && k.Pod.UID != got.pod.ref.UID {
					t.Errorf("kept a record of %s for a failure served by %s", k.Pod.Name, got.pod.ref.Name)
				}
			}
		})
	}
}
