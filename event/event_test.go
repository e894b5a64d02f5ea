package event

import "testing"

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
