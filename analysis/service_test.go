package analysis

import "testing"

// isServiceKey agrees with serviceKey on every shape of name.
func TestIsServiceKey(t *testing.T) {
	names := []struct{ ns, svc string }{
		{"shop", "checkout"}, {"", "checkout"}, {"shop", ""}, {"shop", "other/checkout"},
		{"sho", "p/checkout"}, {"shop", "checkou"}, {"sh", "op/checkout"}, {"", ""},
	}
	keys := []string{"shop/checkout", "checkout", "", "other/checkout", "shop/checkou", "shopXcheckout", "sho/p/checkout"}
	for _, n := range names {
		for _, k := range keys {
			if got, want := isServiceKey(k, n.ns, n.svc), k == serviceKey(n.ns, n.svc); got != want {
				t.Errorf("isServiceKey(%q, %q, %q) = %v, want %v", k, n.ns, n.svc, got, want)
			}
		}
	}
}
