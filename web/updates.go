package web

import (
	"fmt"
	mathrand "math/rand/v2"
	"net/http"
	"time"

	"github.com/drainscope/drainscope/store"
)

// apiUpdates streams server-sent events: "rollouts" with the list's version
// whenever the rollouts matching the filter (the list API's parameters)
// change or their analysis lands. The page then fetches the list again.
// Browsers without EventSource, or behind a proxy that buffers, poll the
// list instead; the version makes that cheap to compare. Each client
// address has its share of the streams, and each stream a lifetime.
func (s *Server) apiUpdates(w http.ResponseWriter, r *http.Request) {
	f, err := parseListFilter(r.URL.Query(), s.opts.Now())
	if err != nil {
		s.fail(w, r, bad(err))
		return
	}
	release, ok := s.streamSlot(w, r)
	if !ok {
		return
	}
	defer release()
	// The stream ends after its lifetime, less up to a tenth; the browser
	// connects again after the retry below.
	life := s.opts.StreamLifetime - time.Duration(mathrand.Int64N(int64(s.opts.StreamLifetime)/10+1))
	end := time.NewTimer(life)
	defer end.Stop()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(format string, args ...any) bool {
		// The server's write timeout would end the stream; each write
		// gets its own deadline instead.
		rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("retry: 5000\n\n") {
		return
	}
	tick := time.NewTicker(s.opts.UpdateEvery)
	defer tick.Stop()
	last, quiet := "", 0
	for {
		if since := f.Since; since != "" {
			// A relative window moves with the clock.
			if nf, err := parseListFilter(r.URL.Query(), s.opts.Now()); err == nil {
				f = nf
			}
		}
		list, err := s.rollouts(r.Context(), f)
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			// The store's error stays in the log: it may name the
			// database, or worse.
			id := newRequestID()
			s.log.Error("update stream: reading rollouts", "request_id", id, "err", store.Redact(err.Error()))
			if !send("event: error\ndata: %q\n\n", "reading the rollouts failed; the server logged it as request "+id) {
				return
			}
		} else if list.Version != last {
			last, quiet = list.Version, 0
			if !send("event: rollouts\ndata: {\"version\":%q,\"total\":%d,\"pending\":%d}\n\n", list.Version, list.Total, list.Pending) {
				return
			}
		} else if quiet++; quiet*int(s.opts.UpdateEvery) >= int(15*time.Second) {
			quiet = 0
			if !send(": keep-alive\n\n") {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		case <-end.C:
			return
		case <-tick.C:
		}
	}
}
