package store

import (
	"fmt"
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
