// Package httpauth holds the bearer-token check of the web server and the
// ingest endpoint. It also holds the least length of a token and the limit on
// failed attempts per client.
package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
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

// MinTokenLength is the shortest token a server accepts at start: 32
// characters (of `openssl rand -hex 32`, 64) leave nothing to guess.
const MinTokenLength = 32

// CheckToken refuses a token shorter than MinTokenLength, naming where it
// came from (flag and environment variable, as the caller words it). An
// empty token is left to the caller: it means the feature is off.
func CheckToken(source, token string) error {
	if n := utf8.RuneCountInString(token); token != "" && n < MinTokenLength {
		return fmt.Errorf("%s is %d characters; want at least %d (for example: openssl rand -hex 32)", source, n, MinTokenLength)
	}
	return nil
}

// FailureLimiter bounds failed authentications per client address, a token
// bucket each: Burst failures at once, then one more per Every. It is safe
// for concurrent use; the zero value uses the defaults.
type FailureLimiter struct {
	Burst int              // default 10
	Every time.Duration    // default 6 s: 10 a minute
	Max   int              // addresses tracked at once (default 10,000), then one bucket they share
	Now   func() time.Time // default time.Now

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// overflowKey is the bucket every address shares once Max addresses are
// tracked, so that many addresses cannot grow the map without bound.
const overflowKey = "\x00overflow"

func (l *FailureLimiter) params() (burst float64, every time.Duration, maxKeys int, now time.Time) {
	burst, every, maxKeys = 10, 6*time.Second, 10000
	if l.Burst > 0 {
		burst = float64(l.Burst)
	}
	if l.Every > 0 {
		every = l.Every
	}
	if l.Max > 0 {
		maxKeys = l.Max
	}
	if l.Now != nil {
		return burst, every, maxKeys, l.Now()
	}
	return burst, every, maxKeys, time.Now()
}

// refill brings b up to now.
func refill(b *bucket, burst float64, every time.Duration, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(burst, b.tokens+float64(d)/float64(every))
	}
	b.at = now
}

// Wait reports how long key must wait before its next attempt: 0 when it
// may try now. Call it before checking a credential, so that a blocked
// client learns nothing from the check.
func (l *FailureLimiter) Wait(key string) time.Duration {
	burst, every, maxKeys, now := l.params()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		// Untracked: it shares the overflow bucket while the map is full.
		if b = l.buckets[overflowKey]; b == nil || len(l.buckets) < maxKeys {
			return 0
		}
	}
	refill(b, burst, every, now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(every))
}

// Fail records a failed attempt by key. Attempts that raced past Wait
// together may drive the bucket below zero, down to -Burst: they are paid
// for with a longer wait.
func (l *FailureLimiter) Fail(key string) {
	burst, every, maxKeys, now := l.params()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*bucket{}
	}
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxKeys {
			// A full bucket is as good as none: forget those first.
			for k, x := range l.buckets {
				if refill(x, burst, every, now); x.tokens >= burst && k != overflowKey {
					delete(l.buckets, k)
				}
			}
		}
		if len(l.buckets) >= maxKeys {
			key = overflowKey
		}
		if b = l.buckets[key]; b == nil {
			b = &bucket{tokens: burst, at: now}
			l.buckets[key] = b
		}
	}
	refill(b, burst, every, now)
	b.tokens = max(b.tokens-1, -burst)
}

// ClientKey names the client of r for FailureLimiter: its IP address, the
// /64 for IPv6 (one host holds a whole /64). Behind a proxy every client
// is the proxy's address.
func ClientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// RetryAfter is d as a Retry-After header value: whole seconds, at least 1.
func RetryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
