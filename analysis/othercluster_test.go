package analysis

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// failureTo is a refused connection a client logged with the Service it
// meant: in its target's host or, when service is set, in its Service
// field; remote is the address it dialled.
func (r *rec) failureTo(d int64, c netip.AddrPort, target, service string, remote netip.AddrPort) {
	e := event.Event{Time: r.at(d), Kind: event.ClientFailure, Source: event.SourceClient,
		Local: c, Remote: remote, Reason: event.FailRefused, Duration: int64(time.Millisecond), Service: service}
	if target != "" {
		e.Attrs = map[string]string{event.AttrTarget: target}
	}
	r.add(e)
}

// TestServiceOfAnotherCluster: a client in another cluster names its
// Service (checkout in shop) and dials an address that here is the
// ClusterIP of web (both clusters hand out the default range). No record
// of this cluster names shop/checkout: the failure is not judged against
// web's endpoints, and says why. An address alone still means the local
// Service that held it; a Service known only from the state read before
// the window is this cluster's.
func TestServiceOfAnotherCluster(t *testing.T) {
	const checkout = "http://checkout.shop.svc.cluster.local/cart"
	ip := netip.MustParseAddrPort("10.96.0.10:80")
	for _, tc := range []struct {
		name string
		// webEmpty: web's only pod left before the failure, so that web's
		// answer would be no ready endpoints.
		webEmpty        bool
		target, service string
		// checkoutHere: this cluster has shop/checkout too (ClusterIP
		// 10.96.0.20), created and ready 40 min before the read: known
		// only from the state at the window's start. Its pod leaves at 0.
		checkoutHere bool
		// checkoutGone: this cluster had shop/checkout, deleted 30 min
		// before the read: the state holds only its deletion. A failure
		// naming it is judged as before, by the address it dialled.
		checkoutGone bool
		want         Cause
		says         string // in the explanation and the missing evidence
	}{
		{name: "URL names checkout, web has no ready endpoint", webEmpty: true, target: checkout,
			want: CauseUnexplained, says: "shop/checkout"},
		{name: "Service field names checkout, web has no ready endpoint", webEmpty: true, service: "shop/checkout",
			want: CauseUnexplained, says: "shop/checkout"},
		{name: "URL names checkout, web ready", target: checkout,
			want: CauseUnexplained, says: "shop/checkout"},
		{name: "address alone: web's answer", webEmpty: true,
			want: CauseNoReadyEndpoints},
		{name: "URL names web: web's answer", webEmpty: true, target: "http://web.default.svc.cluster.local/",
			want: CauseNoReadyEndpoints},
		{name: "checkout known from the state before the read", target: checkout, checkoutHere: true,
			want: CauseNoReadyEndpoints},
		{name: "checkout known from its deletion before the read", target: checkout, checkoutGone: true, webEmpty: true,
			want: CauseNoReadyEndpoints},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			p := r.pod("web-1", "10.244.0.11")
			r.svc(-40*60*s, "default", "web", event.ChangeCreated, "10.96.0.10")
			r.created(p, -40*60*s+1*s)
			r.ready(p, -40*60*s+2*s)
			if tc.checkoutHere {
				c := r.pod("checkout-1", "10.244.0.21")
				c.ref.Namespace, c.svc, c.wl = "shop", "checkout", event.Workload{Kind: "Deployment", Name: "checkout"}
				r.svc(-40*60*s, "shop", "checkout", event.ChangeCreated, "10.96.0.20")
				r.created(c, -40*60*s+1*s)
				r.ready(c, -40*60*s+2*s)
				r.leave(c, 0, ms)
				r.removed(c, 10*ms, ms)
			}
			if tc.checkoutGone {
				r.svc(-40*60*s, "shop", "checkout", event.ChangeCreated, "10.96.0.20")
				r.svc(-30*60*s, "shop", "checkout", event.ChangeDeleted, "10.96.0.20")
			}
			if tc.webEmpty {
				r.leave(p, 0, ms)
				r.removed(p, 10*ms, ms)
			}
			r.failureTo(500*ms, client(1), tc.target, tc.service, ip)
			r.failureTo(600*ms, client(2), tc.target, tc.service, ip)

			st := embeddedStore(t, r.events)
			q := store.Query{Window: event.Window{From: r.at(-60 * s), To: r.at(60 * s)}}
			res, err := AnalyzeWith(context.Background(), st, q, Options{MaxFailures: -1})
			if err != nil {
				t.Fatal(err)
			}
			fs := clientFailures(res)
			if len(fs) != 2 {
				t.Fatalf("%d client failures decided, want 2", len(fs))
			}
			for _, f := range fs {
				missing := strings.Join(f.Missing, "; ")
				t.Logf("%s: %s | missing: %s", f.Cause, f.Explanation, missing)
				if f.Cause != tc.want {
					t.Errorf("%s: %s (%s | missing: %s), want %s", f.Failure.Local, f.Cause, f.Explanation, missing, tc.want)
				}
				foreign := "not a Service of this cluster"
				if tc.says == "" {
					if strings.Contains(f.Explanation, foreign) {
						t.Errorf("%s: %q, but the Service is this cluster's", f.Failure.Local, f.Explanation)
					}
					continue
				}
				for _, text := range []string{f.Explanation, missing} {
					if !strings.Contains(text, tc.says) || !strings.Contains(text, foreign) {
						t.Errorf("%s: %q does not say that %s is %s", f.Failure.Local, text, tc.says, foreign)
					}
				}
				if f.Pod != nil {
					t.Errorf("%s: went on %v, a pod of this cluster", f.Failure.Local, f.Pod)
				}
			}
		})
	}
}

// TestNamedService: which names say a Service with its namespace. A
// host of two labels is not one (example.com), nor is an address.
func TestNamedService(t *testing.T) {
	for _, tc := range []struct {
		target, service, want string
	}{
		{"http://checkout.shop.svc.cluster.local/cart", "", "shop/checkout"},
		{"checkout.shop.svc:80", "", "shop/checkout"},
		{"http://Checkout.Shop.SVC.cluster.local./", "", "shop/checkout"},
		{"http://checkout.shop/", "", ""},
		{"http://api.example.com/", "", ""},
		{"http://10.96.0.10/", "", ""},
		{"[fd00::10]:80", "", ""},
		{"http://checkout/", "", ""},
		{"", "shop/checkout", "shop/checkout"},
		{"", "checkout.shop", "shop/checkout"},
		{"", "checkout", ""},
		{"", "a/b/c", ""},
		{"http://web.default.svc/", "shop/checkout", "shop/checkout"}, // the Service field wins
	} {
		e := &event.Event{Service: tc.service, Attrs: map[string]string{event.AttrTarget: tc.target}}
		if got := namedService(e); got != tc.want {
			t.Errorf("target %q, service %q: %q, want %q", tc.target, tc.service, got, tc.want)
		}
	}
}
