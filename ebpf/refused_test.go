package ebpf

import (
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// TestRefusedLayout: bpf/refused.c copies drainscope.c's struct event and
// kind numbers; the generated Go types of both objects must agree field by
// field, or the reader would misread the fallback's records.
func TestRefusedLayout(t *testing.T) {
	a, b := reflect.TypeOf(probesEvent{}), reflect.TypeOf(refusedEvent{})
	if a.Size() != b.Size() || a.NumField() != b.NumField() {
		t.Fatalf("struct event: %d bytes, %d fields in drainscope.c; %d bytes, %d fields in refused.c", a.Size(), a.NumField(), b.Size(), b.NumField())
	}
	for i := 0; i < a.NumField(); i++ {
		fa, fb := a.Field(i), b.Field(i)
		if fa.Name != fb.Name || fa.Offset != fb.Offset || fa.Type.Size() != fb.Type.Size() {
			t.Errorf("field %d: %s at %d (%d bytes) in drainscope.c, %s at %d (%d bytes) in refused.c",
				i, fa.Name, fa.Offset, fa.Type.Size(), fb.Name, fb.Offset, fb.Type.Size())
		}
	}
	if probesKindKIND_REFUSED != 7 || probesKindKIND_RST_SENT != 5 || probesKindKIND_MAX != 8 || probesFlagFLAG_NO_SOCKET != 1<<2 {
		t.Errorf("refused.c's KIND_REFUSED 7, KIND_RST_SENT 5, KIND_MAX 8, FLAG_NO_SOCKET 4 differ from drainscope.c's %d %d %d %d",
			probesKindKIND_REFUSED, probesKindKIND_RST_SENT, probesKindKIND_MAX, probesFlagFLAG_NO_SOCKET)
	}
}

// TestRefusedFallbackSideBySide: three collectors at once on the same pod,
// the kernel's tcp_send_reset (6.10+), the fentry fallback and the
// kfree_skb fallback (each forced by withholding what comes before it),
// must each see every one of the same refused SYNs, with the same
// addresses.
func TestRefusedFallbackSideBySide(t *testing.T) {
	p := newTestPod(t, true)
	paths := []struct {
		name    string
		without []Feature
		by      string
	}{
		{"tcp_send_reset (6.10+)", nil, "tcp_send_reset"},
		// fentry first, where the kernel lets it load (this machine's
		// 6.18 refuses fentry on every function with EPERM).
		{"fallback as chosen", []Feature{FeatureNoSocketResets}, ""},
		{"kfree_skb fallback", []Feature{FeatureNoSocketResets, FeatureResetFentry}, "kfree_skb_no_socket"},
	}
	var recs []*recorder
	for _, path := range paths {
		c, r := degradedCollector(t, p, path.without...)
		if path.by == "" {
			path.by = "reset_v4_fentry"
			if c.RefusedBy() == "kfree_skb_no_socket" {
				t.Logf("fentry fallback passed over on this kernel: %v", c.RefusedPassedOver())
				path.by = "kfree_skb_no_socket"
			}
			paths[len(recs)].by = path.by
		}
		if got := c.RefusedBy(); got != path.by {
			t.Fatalf("%s: refused connections seen by %q, want %q", path.name, got, path.by)
		}
		if m := missing(c); len(m) != 0 {
			t.Errorf("%s: missing evidence %v", path.name, m)
		}
		recs = append(recs, r)
	}
	const n = 25
	closed := netip.AddrPortFrom(p.IP, 8081) // nobody listens here
	for i := 0; i < n; i++ {
		conn, err := net.DialTimeout("tcp", closed.String(), 5*time.Second)
		if err == nil {
			conn.Close()
			t.Fatal("dial of a closed port succeeded")
		}
		if !strings.Contains(err.Error(), "refused") {
			t.Fatalf("dial %s: %v, want connection refused", closed, err)
		}
	}
	// The client's ports are not known to net.Dial on failure: compare the
	// sets each path saw.
	var sets []map[netip.AddrPort]bool
	for i, r := range recs {
		deadline := time.Now().Add(5 * time.Second)
		var got map[netip.AddrPort]bool
		for {
			got = map[netip.AddrPort]bool{}
			for _, e := range r.all() {
				if e.Kind == event.ConnRefused && e.Local == closed {
					got[e.Remote] = true
					if e.Reason != ReasonNoSocket || e.NetNS != p.NetNSIno || e.Remote.Addr() != p.HostIP {
						t.Errorf("%s: conn_refused %s", paths[i].name, describe(&e))
					}
				}
			}
			if len(got) >= n || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		sets = append(sets, got)
		t.Logf("%-24s %d refused SYNs of %d", paths[i].name, len(got), n)
	}
	for i, s := range sets {
		if len(s) != n {
			t.Errorf("%s saw %d refused SYNs, want %d", paths[i].name, len(s), n)
		}
		for a := range s {
			if !sets[0][a] {
				t.Errorf("%s saw a refusal of %s that tcp_send_reset did not", paths[i].name, a)
			}
		}
	}
	// The counters the fallback shares count its records under conn_refused.
	for i, r := range recs {
		st, err := r.c.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if ks := st.ByKind[event.ConnRefused]; ks.Produced < n {
			t.Errorf("%s: kernel counted %d conn_refused records, want ≥ %d", paths[i].name, ks.Produced, n)
		}
		if i > 0 && !slices.ContainsFunc(st.Programs, func(ps ProgramStats) bool { return ps.Name == paths[i].by && ps.Loaded }) {
			t.Errorf("%s: %s not among the programs' statistics", paths[i].name, paths[i].by)
		}
	}
}
