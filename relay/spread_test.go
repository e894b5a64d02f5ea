package relay

import (
	"crypto/sha256"
	"strconv"
	"testing"
	"time"
)

// TestSpreadTTL: answers for tokens reviewed together fall due over half a
// TTL, never before the TTL, and one token's is always the same.
func TestSpreadTTL(t *testing.T) {
	const ttl = time.Minute
	lo, hi := time.Duration(1<<62), time.Duration(0)
	buckets := make([]int, 6) // 5 s each over [60 s, 90 s)
	for i := range 5000 {
		key := sha256.Sum256([]byte("token-" + strconv.Itoa(i)))
		d := spreadTTL(key, ttl)
		if d != spreadTTL(key, ttl) {
			t.Fatalf("token %d: two answers for one token", i)
		}
		if d < ttl || d >= ttl*3/2 {
			t.Fatalf("token %d: %v, want in [%v, %v)", i, d, ttl, ttl*3/2)
		}
		lo, hi = min(lo, d), max(hi, d)
		buckets[(d-ttl)/(5*time.Second)]++
	}
	if hi-lo < 25*time.Second {
		t.Errorf("5,000 tokens spread over %v only, want most of 30 s", hi-lo)
	}
	for i, n := range buckets {
		if n < 5000/6/2 { // each 5 s holds about a sixth; half of that at least
			t.Errorf("%d of 5,000 answers fall due in [%ds, %ds): %v", n, 60+5*i, 65+5*i, buckets)
		}
	}
}
