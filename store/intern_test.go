package store

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"
)

// The interner gives one string for equal bytes, never aliases the bytes
// it was given (the driver reuses them), and starts again past its bound.
func TestInterner(t *testing.T) {
	var in interner
	buf := []byte("sim-node-00001")
	a := in.str(buf)
	b := in.str([]byte("sim-node-00001"))
	if a != "sim-node-00001" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("equal bytes gave %q at %p and %q at %p: want one string", a, unsafe.StringData(a), b, unsafe.StringData(b))
	}
	copy(buf, "overwritten!!!")
	if a != "sim-node-00001" {
		t.Fatalf("the string changed with the driver's buffer: %q", a)
	}
	if s := in.str(nil); s != "" || len(in.m) != 1 {
		t.Fatalf("empty bytes: %q, table of %d", s, len(in.m))
	}
	for i := range maxInterned + 10 {
		in.str(fmt.Appendf(nil, "uid-%d", i))
	}
	if len(in.m) > maxInterned {
		t.Fatalf("table of %d strings, bound %d", len(in.m), maxInterned)
	}
	if s := (*interner)(nil).str([]byte("x")); s != "x" {
		t.Fatalf("nil interner: %q", s)
	}
}

// Equal attribute bytes decode to one map while it stays in the table;
// other bytes, or no interner, to a map of their own; the table is
// bounded.
func TestSharedAttrs(t *testing.T) {
	var in interner
	row := func(s string) map[string]string {
		t.Helper()
		m, err := decodeAttrs([]byte(s), &in)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	chain := `{"proxy": "nftables", "chain": "endpoint-ABCDEFGH-shop/checkout/tcp/http__10.1.0.7/8080"}`
	a, b := row(chain), row(chain)
	if !same(a, b) || a["chain"] != "endpoint-ABCDEFGH-shop/checkout/tcp/http__10.1.0.7/8080" {
		t.Fatalf("equal bytes gave two maps, or the wrong one: %v %v", a, b)
	}
	if c := row(`{"proxy": "nftables", "chain": "endpoint-XYZ"}`); same(a, c) || c["chain"] != "endpoint-XYZ" {
		t.Fatalf("other bytes gave %v", c)
	}
	// Through encoding/json (an escape), shared all the same.
	if e, f := row(`{"msg": "a\"b"}`), row(`{"msg": "a\"b"}`); !same(e, f) || e["msg"] != `a"b` {
		t.Fatalf("escaped: %v %v", e, f)
	}
	for i := range maxSharedAttrs + 10 {
		row(fmt.Sprintf(`{"container_id": "%d"}`, i))
	}
	if len(in.attrs) > maxSharedAttrs {
		t.Fatalf("table of %d maps, bound %d", len(in.attrs), maxSharedAttrs)
	}
	x, _ := decodeAttrs([]byte(chain), nil)
	y, _ := decodeAttrs([]byte(chain), nil)
	if same(x, y) {
		t.Fatalf("no interner, one map")
	}
}
