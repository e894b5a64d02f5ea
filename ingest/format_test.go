package ingest

import (
	"context"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
)

// TestFormatRecordsAreWhatItEmits: a format's Records field, which decides
// who may send it (the ingest API's client-failure token, the dataplane
// token, the operator's import only), is what its parser emits: every
// format read over its good lines, each event's kind checked against it.
// A format emitting a proxy's routing under ClientFailures would take
// dataplane events with the client-failure token.
func TestFormatRecordsAreWhatItEmits(t *testing.T) {
	for _, f := range Formats() {
		input, ok := goodLines[f.Name]
		if !ok {
			t.Fatalf("no good input for %s", f.Name)
		}
		st := newMemStore()
		im := &Importer{Store: st, Parser: parserFor(t, f.Name, formatOptions(f.Name)), Strict: true}
		if _, err := im.Import(context.Background(), "good.log", strings.NewReader(input)); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if len(st.events) == 0 {
			t.Fatalf("%s: its good lines stored nothing", f.Name)
		}
		for _, e := range st.events {
			var want Records
			switch {
			case e.Kind.IsDataplane():
				want = Routing
			case e.Kind == event.ProxyState:
				want = PodLog
			case e.Kind == event.ClientFailure:
				want = ClientFailures
			default:
				t.Fatalf("%s emitted a %s", f.Name, e.Kind)
			}
			if f.Records != want {
				t.Errorf("%s emits %s but its Records is %d, want %d", f.Name, e.Kind, f.Records, want)
			}
		}
	}
}

// TestRoutingNeedsTheDataplaneToken: every format whose records are a
// proxy's routing is refused with the client-failure token and taken with
// the dataplane token; no other is taken with the dataplane token.
func TestRoutingNeedsTheDataplaneToken(t *testing.T) {
	h := &Handler{Formats: FormatNames()} // a server told to take every format
	for _, f := range Formats() {
		client, dataplane := h.refuseFormat(f, false), h.refuseFormat(f, true)
		switch f.Records {
		case Routing:
			if client == "" || dataplane != "" {
				t.Errorf("%s: with the client-failure token %q, with the dataplane token %q", f.Name, client, dataplane)
			}
		case ClientFailures:
			if client != "" || dataplane == "" {
				t.Errorf("%s: with the client-failure token %q, with the dataplane token %q", f.Name, client, dataplane)
			}
		case PodLog:
			if client == "" || dataplane == "" {
				t.Errorf("%s, a pod's log: taken over the API", f.Name)
			}
		}
	}
}
