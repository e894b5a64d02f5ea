package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestInstrumentKeepsResponseController: a handler behind InstrumentHTTP
// (as every route of drainscope serve is) can still set its own read
// deadline, as the ingest handler does to cut a slow body; the older
// promhttp wrappers hid the connection, so the deadline was silently
// never set.
func TestInstrumentKeepsResponseController(t *testing.T) {
	m := New("serve", "test")
	errs := make(chan error, 1)
	h := m.InstrumentHTTP("web", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		errs <- http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Minute))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if err := <-errs; err != nil {
		t.Errorf("SetReadDeadline through InstrumentHTTP: %v", err)
	}
}
