package event

import (
	"encoding/hex"
	"maps"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCleanString(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"server", "server", true},
		{"", "", true},
		{"canción", "canción", true},
		{"servidor-canci\xc3", "servidor-canci\uFFFD", false},
		{"a\xff\xfeb", "a\uFFFDb", false}, // one run of invalid bytes is one U+FFFD
		{"a\x00b", "a\uFFFDb", false},
		{"\x00\xff", "\uFFFD\uFFFD", false},
	} {
		got, ok := CleanString(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CleanString(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	// The eight-byte scan agrees with the plain checks, whatever the
	// position of the byte that matters.
	for _, b := range []byte{0, 1, 0x7f, 0x80, 0xbf, 0xc3, 0xe2, 0xff} {
		for p := range 20 {
			s := []byte(strings.Repeat("a", 20))
			s[p] = b
			for _, str := range []string{string(s), string(s) + "\u00f1", string(s[:p+1])} {
				want := utf8.ValidString(str) && strings.IndexByte(str, 0) < 0
				if got := isClean(str); got != want {
					t.Errorf("isClean(%q) = %v", str, got)
				}
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { CleanString("checkout-7d4b9c-x2v9q") }); n != 0 {
		t.Errorf("a clean string allocates %v times", n)
	}
}

// Every string a store keeps comes out of Seal valid and without NUL; a
// command name keeps its bytes; the shared Attrs map is left alone.
func TestSealSanitizes(t *testing.T) {
	shared := map[string]string{"ok": "1", "bad\xff": "v\x00"}
	e := sample()
	e.Comm, e.PeerComm = "servidor-canci\xc3", "shim\x00"
	e.Pod.Name, e.Node, e.Service, e.Reason = "pod-\xe2\x82", "node\x00a", "svc\xc0", "r\xff"
	e.Attrs = shared
	keep := maps.Clone(shared)
	e.Seal()

	v := reflect.ValueOf(e)
	var check func(path string, v reflect.Value)
	check = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			if s := v.String(); !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				t.Errorf("%s = %q after Seal", path, s)
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					check(path+"."+v.Type().Field(i).Name, v.Field(i))
				}
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				check(path+"["+k.String()+"]", k)
				check(path+"["+k.String()+"]", v.MapIndex(k))
			}
		}
	}
	check("Event", v)
	if e.Comm != "servidor-canci\uFFFD" || e.Pod.Name != "pod-\uFFFD" {
		t.Errorf("comm %q, pod %q", e.Comm, e.Pod.Name)
	}
	if got, want := e.Attrs[AttrCommRaw], hex.EncodeToString([]byte("servidor-canci\xc3")); got != want {
		t.Errorf("%s = %q, want %q", AttrCommRaw, got, want)
	}
	if got, want := e.Attrs[AttrPeerCommRaw], hex.EncodeToString([]byte("shim\x00")); got != want {
		t.Errorf("%s = %q, want %q", AttrPeerCommRaw, got, want)
	}
	if e.Attrs["ok"] != "1" || e.Attrs["bad\uFFFD"] != "v\uFFFD" {
		t.Errorf("attrs %q", e.Attrs)
	}
	if !maps.Equal(shared, keep) {
		t.Errorf("Seal changed the shared attrs map: %q", shared)
	}

	// The identity is that of the stored, sanitized event: sealing again
	// (as after reading it back) keeps it.
	id := e.ID
	again := e.Clone()
	again.Seal()
	if again.ID != id || !reflect.DeepEqual(again, e) {
		t.Errorf("sealing a sealed event changed it: %v → %v", id, again.ID)
	}
	// Different raw bytes that clean to the same name stay different events.
	other := sample()
	other.Comm, other.PeerComm = "servidor-canci\xc4", "shim\x00"
	other.Pod.Name, other.Node, other.Service, other.Reason = "pod-\xe2\x82", "node\x00a", "svc\xc0", "r\xff"
	other.Attrs = shared
	other.Seal()
	if other.Comm != e.Comm || other.ID == e.ID {
		t.Errorf("names %q, %q; ids %v, %v", other.Comm, e.Comm, other.ID, e.ID)
	}
}

// A clean event is sealed as before: same identity, same map, no copy.
func TestSealCleanEventUnchanged(t *testing.T) {
	e := sample()
	e.Attrs = map[string]string{"k": "v"}
	want := Identity(&e)
	m := e.Attrs
	e.Seal()
	if e.ID != want || reflect.ValueOf(e.Attrs).UnsafePointer() != reflect.ValueOf(m).UnsafePointer() {
		t.Errorf("a clean event changed when sealed")
	}
	if n := testing.AllocsPerRun(100, func() { e.Seal() }); n != 0 {
		t.Errorf("sealing a clean event allocates %v times", n)
	}
}

// BenchmarkSeal is the cost every event pays: Sanitize finding nothing to
// change, then Identity.
func BenchmarkSeal(b *testing.B) {
	e := sample()
	e.Attrs = map[string]string{AttrClockUncertainty: "40"}
	b.ReportAllocs()
	for b.Loop() {
		e.Seal()
	}
}
