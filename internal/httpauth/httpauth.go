// Package httpauth holds the bearer-token check the web server and the
// client-failure ingest endpoint share.
package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Bearer returns the token of an "Authorization: Bearer …" header (the
// scheme in any case, as RFC 9110 has it), or "" when there is none.
func Bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// TokenOK compares got with want in constant time, over their hashes so
// that the length does not leak either. An empty got never matches.
func TokenOK(got, want string) bool {
	if got == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
