package event

import (
	"strings"
	"testing"
	"unsafe"
)

// A clone keeps its attributes when the original's map changes.
func TestCloneOwnsItsAttrs(t *testing.T) {
	e := Event{Kind: Signal, Attrs: map[string]string{"a": "1"}}
	c := e.Clone()
	e.Attrs["a"] = "2"
	if c.Attrs["a"] != "1" || c.Kind != Signal {
		t.Errorf("clone %+v changed with the original", c)
	}
	if n := (&Event{}).Clone(); n.Attrs != nil {
		t.Errorf("a clone of no attributes has %v", n.Attrs)
	}
}

// Times whose store partition would run past int64 are refused, so that
// no store fails on them in a way that looks like an outage.
func TestValidateTimeRange(t *testing.T) {
	for _, tc := range []struct {
		t  int64
		ok bool
	}{
		{1, true},
		{sample().Time, true},
		{maxTime - 1, true},
		{0, false},
		{-1, false},
		{maxTime, false},
		{1<<63 - 1, false},
	} {
		e := sample()
		e.Time = tc.t
		e.Seal()
		if err := e.Validate(); (err == nil) != tc.ok {
			t.Errorf("time %d: Validate = %v", tc.t, err)
		}
	}
}

// An Event stays within the allocator's 352-byte size class: one byte
// more and every kept copy takes 384 (see the PID fields).
func TestEventSize(t *testing.T) {
	if n := unsafe.Sizeof(Event{}); n > 352 {
		t.Errorf("Event is %d bytes, past the 352-byte size class: every kept copy takes the next class", n)
	}
}

// Each string field is refused past its bound, naming it, and taken at
// it; CheckBounds holds the attributes too, Validate does not.
func TestBounds(t *testing.T) {
	if n := len((&Event{}).stringFields()); n != len(Bounds) {
		t.Fatalf("%d string fields, %d bounds", n, len(Bounds))
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	for i, b := range Bounds {
		if b.Field == "kind" || b.Field == "source" {
			continue // typed: Validate refuses a long kind as unknown; a source is checked below
		}
		for _, n := range []int{b.Max, b.Max + 1} {
			e := sample()
			set := [...]*string{nil, &e.Node, nil, &e.Pod.Namespace, &e.Pod.Name, &e.Pod.UID, &e.Pod.Container,
				&e.Workload.Kind, &e.Workload.Name, &e.Comm, &e.PeerComm, &e.Service, &e.Slice, &e.Reason}
			*set[i] = long(n)
			e.Seal()
			err, berr := e.Validate(), e.CheckBounds()
			if over := n > b.Max; (err != nil) != over || (berr != nil) != over {
				t.Errorf("%s of %d bytes (bound %d): Validate %v, CheckBounds %v", b.Field, n, b.Max, err, berr)
			}
			if err != nil && !strings.Contains(err.Error(), "field "+b.Field+":") {
				t.Errorf("%s: %v does not name the field", b.Field, err)
			}
		}
	}
	for name, attrs := range map[string]map[string]string{
		"a value":      {"message": long(MaxAttrValueLen + 1)},
		"a key":        {long(MaxAttrKeyLen + 1): "v"},
		"the proxy":    {AttrProxy: long(MaxProxyLen + 1)},
		"all together": {"a": long(MaxAttrValueLen), "b": long(MaxAttrValueLen), "c": long(MaxAttrValueLen), "d": long(MaxAttrValueLen)},
	} {
		e := sample()
		e.Attrs = attrs
		e.Seal()
		if err := e.CheckBounds(); err == nil || !strings.Contains(err.Error(), "field attrs") {
			t.Errorf("%s past its bound: CheckBounds %v", name, err)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("%s past its bound: Validate %v, want nil (attributes are the importers' to bound)", name, err)
		}
	}
	e := sample()
	e.Source = Source(long(MaxSourceLen + 1))
	e.Seal()
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "field source:") {
		t.Errorf("a source of %d bytes: %v", len(e.Source), err)
	}
	many := map[string]string{}
	for i := range MaxAttrs + 1 {
		many[long(i+1)] = ""
	}
	e = sample()
	e.Attrs = many
	if err := e.CheckBounds(); err == nil || !strings.Contains(err.Error(), "attributes") {
		t.Errorf("%d attributes: %v", len(many), err)
	}
}
