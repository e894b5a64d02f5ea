package event

import (
	"errors"
	"fmt"
)

// Validate reports the first thing wrong with e, naming the field.
func (e *Event) Validate() error {
	switch {
	case !e.Kind.Valid():
		return fmt.Errorf("field kind: unknown event kind %q", e.Kind)
	case e.Time <= 0:
		return fmt.Errorf("field time: %d is not a positive UTC nanosecond timestamp", e.Time)
	case e.Node == "" && e.Source != SourceClient:
		return errors.New("field node: empty (every observed event names the node that saw it)")
	case e.Source == "":
		return errors.New("field source: empty")
	case e.ID == 0:
		return errors.New("field id: not sealed (call Seal once the event is complete)")
	}
	return nil
}
