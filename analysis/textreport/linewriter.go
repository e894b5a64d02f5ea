package textreport

import (
	"bytes"
	"fmt"
	"io"
	"reflect"

	"github.com/drainscope/drainscope/event"
)

// lineWriter writes a report's lines through an event.DisplayWriter in
// chunks of about lineChunk bytes: a report of a 1,000-pod rollout is
// megabytes, which one buffer would hold twice over (the lines, then the
// display-safe copy) in memory that is fresh and costly to touch.
type lineWriter struct {
	d   *event.DisplayWriter
	b   bytes.Buffer
	err error // the first write error; later lines are dropped
}

// lineChunk is a variable for the tests.
var lineChunk = 64 << 10

func newLineWriter(w io.Writer) *lineWriter {
	return &lineWriter{d: event.NewDisplayWriter(w, event.MaxDisplayLine)}
}

// line writes one line, its arguments made safe for display (a textLine).
func (lw *lineWriter) line(format string, a ...any) {
	fmt.Fprintf(&lw.b, format+"\n", displayArgs(a)...)
	if lw.b.Len() >= lineChunk {
		lw.flush()
	}
}

func (lw *lineWriter) flush() {
	if lw.err == nil {
		_, lw.err = lw.d.Write(lw.b.Bytes())
	}
	lw.b.Reset()
}

// close writes what is left and returns the first error.
func (lw *lineWriter) close() error {
	lw.flush()
	return lw.err
}

// displayArgs shows each string argument, and each struct that says
// itself (a PodRef, a Workload), through event.Display: a line of the
// report is the renderer's, and a name's newline or escape cannot forge or
// hide one. Lines are bounded by the writer, not here.
func displayArgs(a []any) []any {
	for i, v := range a {
		switch x := v.(type) {
		case string:
			a[i] = event.Display(x, -1)
		case fmt.Stringer:
			if reflect.ValueOf(x).Kind() == reflect.Struct {
				a[i] = event.Display(x.String(), -1)
			}
		}
	}
	return a
}
