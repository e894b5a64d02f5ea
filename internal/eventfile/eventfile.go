// Package eventfile reads a recorded event stream: one event as JSON per
// line, as the lab's recordings and the tests' fixtures hold them.
package eventfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/drainscope/drainscope/event"
)

// Read reads the events of the file at path, each sealed again (its
// identity is derived from its content, so a recording outlives a change
// to the hash) and validated; an error names the file and line.
func Read(path string) ([]event.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []event.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var e event.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		e.Seal()
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
