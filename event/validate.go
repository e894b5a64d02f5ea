package event

import (
	"errors"
	"fmt"
	"time"
)

// maxTime bounds event times: the start of 2262, some 100 days before
// int64 nanoseconds end, so that a store's day partition holding any
// event ends within range. The importers refuse later times too.
var maxTime = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// Validate reports the first thing wrong with e, naming the field: among
// them a string past its bound (Bounds).
func (e *Event) Validate() error {
	switch {
	case !e.Kind.Valid():
		return fmt.Errorf("field kind: unknown event kind %q", e.Kind)
	case e.Time <= 0:
		return fmt.Errorf("field time: %d is not a positive UTC nanosecond timestamp", e.Time)
	case e.Time >= maxTime:
		return fmt.Errorf("field time: %d is past 2261, out of range", e.Time)
	case e.Node == "" && e.Source != SourceClient:
		return errors.New("field node: empty (every observed event names the node that saw it)")
	case e.Source == "":
		return errors.New("field source: empty")
	case e.ID == 0:
		return errors.New("field id: not sealed (call Seal once the event is complete)")
	}
	// The named fields only: a store indexes some, and the bounds are
	// Kubernetes' own. Attributes are bounded where they come from an
	// untrusted party (CheckBounds).
	return e.checkFields()
}
