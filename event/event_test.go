package event

import (
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
