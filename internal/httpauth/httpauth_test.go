package httpauth

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestBearer(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer s3cret":   "s3cret",
		"bearer  s3cret ": "s3cret",
		"Basic czNjcmV0":  "",
		"Bearer":          "",
		"":                "",
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", h)
		if got := Bearer(r); got != want {
			t.Errorf("Authorization %q: token %q, want %q", h, got, want)
		}
	}
	if !TokenOK("s3cret", "s3cret") || TokenOK("s3cre", "s3cret") || TokenOK("", "") {
		t.Error("TokenOK: want equal tokens only, never an empty one")
	}
}

func TestCheckToken(t *testing.T) {
	if err := CheckToken("--auth-token (env DRAINSCOPE_AUTH_TOKEN)", "short"); err == nil ||
		!strings.Contains(err.Error(), "--auth-token (env DRAINSCOPE_AUTH_TOKEN)") || !strings.Contains(err.Error(), "32") {
		t.Errorf("a 5-character token: %v", err)
	}
	if err := CheckToken("x", strings.Repeat("a", 31)); err == nil {
		t.Error("a 31-character token was accepted")
	}
	if err := CheckToken("x", strings.Repeat("a", 32)); err != nil {
		t.Errorf("a 32-character token: %v", err)
	}
	if err := CheckToken("x", ""); err != nil {
		t.Errorf("no token (the feature off): %v", err)
	}
}

func TestFailureLimiter(t *testing.T) {
	now := time.Unix(1e9, 0)
	l := &FailureLimiter{Burst: 3, Every: 10 * time.Second, Max: 4, Now: func() time.Time { return now }}
	for i := range 3 {
		if w := l.Wait("a"); w != 0 {
			t.Fatalf("attempt %d: wait %v within the burst", i, w)
		}
		l.Fail("a")
	}
	w := l.Wait("a")
	if w <= 0 || w > 10*time.Second {
		t.Fatalf("after the burst: wait %v, want up to one interval", w)
	}
	if l.Wait("b") != 0 {
		t.Error("another address is blocked too")
	}
	now = now.Add(w)
	if l.Wait("a") != 0 {
		t.Errorf("still blocked after the wait it was told")
	}
	l.Fail("a")
	if l.Wait("a") == 0 {
		t.Error("a failure after the wait did not block again")
	}
	// Many addresses share one bucket once Max are tracked.
	for _, k := range []string{"c", "d", "e", "f", "g", "h"} {
		for range 3 {
			l.Fail(k)
		}
	}
	if n := len(l.buckets); n > 5 {
		t.Errorf("%d buckets, want at most Max and the shared one", n)
	}
	if l.Wait("never-seen") == 0 {
		t.Error("an untracked address does not share the full overflow bucket")
	}
	if RetryAfter(1500*time.Millisecond) != "2" || RetryAfter(0) != "1" {
		t.Errorf("RetryAfter: %s %s", RetryAfter(1500*time.Millisecond), RetryAfter(0))
	}
}

func TestClientKey(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:5123":            "192.0.2.7",
		"[::ffff:192.0.2.7]:5123":   "192.0.2.7",
		"[2001:db8:1:2:3::4]:443":   "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::]:443": "2001:db8:1:2::/64",
	} {
		r := &http.Request{RemoteAddr: addr}
		if got := ClientKey(r); got != want {
			t.Errorf("ClientKey(%s) = %q, want %q", addr, got, want)
		}
	}
}
