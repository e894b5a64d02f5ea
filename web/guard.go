package web

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/drainscope/drainscope/internal/httpauth"
)

// newRequestID names one failed request in the log and in the answer, so
// that an operator finds the details a client was not shown.
func newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tooManyFailures answers 429 when the client's address failed too many
// token checks lately; it reports whether it did. The UI's token is
// compared first (wrongToken): its right token passes from any address.
// The ingest and agents' endpoints, whose handlers check their own
// tokens, refuse a blocked address before the check unless the handler
// already knows the token (guardIngest).
func (s *Server) tooManyFailures(w http.ResponseWriter, r *http.Request) bool {
	wait := s.failures.Wait(httpauth.ClientKey(r))
	if wait <= 0 {
		return false
	}
	w.Header().Set("Retry-After", httpauth.RetryAfter(wait))
	const msg = "too many wrong tokens from this address; retry after the time in Retry-After"
	if isAPI(r) {
		writeJSON(w, http.StatusTooManyRequests, apiError{Error: msg})
		return true
	}
	s.render(w, r, http.StatusTooManyRequests, "error.html", errorData{Status: http.StatusTooManyRequests,
		Message: "Too many wrong tokens from this address. Retry in " + httpauth.RetryAfter(wait) + " s."})
	return true
}

// failed records a wrong token from r's client.
func (s *Server) failed(r *http.Request) {
	s.failures.Fail(httpauth.ClientKey(r))
	s.log.Warn("wrong token", "client", httpauth.ClientKey(r), "path", r.URL.Path)
}

// KnownTokens is what a handler behind guardIngest may say of a bearer
// token without asking anyone: that it takes it (ingest's configured
// tokens; an agent's token its TokenReview accepted and still caches).
type KnownTokens interface {
	KnownToken(token string) bool
}

// guardIngest puts the ingest and agents' handlers' bearer checks under
// the same limit: a blocked address is refused before the handler sees a
// token it does not know, and each 401 the handler answers counts as a
// failure. A token the handler knows (KnownTokens) passes from a blocked
// address: agents behind one NAT, or log shippers behind one proxy, share
// it, and one wrong token must not stop the others. An unknown token
// from a blocked address costs nothing (no TokenReview).
func (s *Server) guardIngest(next http.Handler) http.HandlerFunc {
	kt, _ := next.(KnownTokens)
	return func(w http.ResponseWriter, r *http.Request) {
		tok := httpauth.Bearer(r)
		if tok != "" && (kt == nil || !kt.KnownToken(tok)) && s.tooManyFailures(w, r) {
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		// No token at all is not a guess; a wrong one is.
		if sw.status == http.StatusUnauthorized && httpauth.Bearer(r) != "" {
			s.failed(r)
		}
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// streamSlot takes one of the update streams, within the total and the
// client's own share; release gives it back. It answers for itself when
// there is none.
func (s *Server) streamSlot(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	client := httpauth.ClientKey(r)
	s.streamMu.Lock()
	total, mine := s.streamsTotal, s.streamsBy[client]
	if total < s.opts.MaxStreams && mine < s.opts.MaxClientStreams {
		s.streamsTotal++
		s.streamsBy[client]++
	}
	s.streamMu.Unlock()
	switch {
	case mine >= s.opts.MaxClientStreams:
		w.Header().Set("Retry-After", "30")
		writeJSON(w, http.StatusTooManyRequests, apiError{Error: "too many update streams from this address; close some, or poll /api/v1/rollouts"})
		return nil, false
	case total >= s.opts.MaxStreams:
		w.Header().Set("Retry-After", "10")
		writeJSON(w, http.StatusServiceUnavailable, apiError{Error: "too many update streams; poll /api/v1/rollouts instead"})
		return nil, false
	}
	return func() {
		s.streamMu.Lock()
		s.streamsTotal--
		if s.streamsBy[client]--; s.streamsBy[client] <= 0 {
			delete(s.streamsBy, client)
		}
		s.streamMu.Unlock()
	}, true
}
