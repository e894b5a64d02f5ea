package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// TestTimeoutWithUnknownStart: a single-replica Recreate Deployment. Its
// pod is deleted and ends, the new one is created after and ready 3 s
// later; the Service has no ready endpoint in between. A client logs a
// timeout at its end, in that gap, with no duration (and no
// --client-timeout gave one): it may have begun while the old pod was
// ready, so no rule can judge it. A duration gives it a start, and the
// rules judge it there as before; a refusal is over at once.
func TestTimeoutWithUnknownStart(t *testing.T) {
	const unknown = "the request's start: the log has no duration; pass --client-timeout or log the duration"
	for _, tc := range []struct {
		name     string
		class    string
		duration time.Duration
		want     Cause
		missing  bool // the missing evidence and the explanation name the start
	}{
		{"timeout, no duration", event.FailTimeout, 0, CauseUnexplained, true},
		{"timeout of 200 ms: begun in the gap", event.FailTimeout, 200 * time.Millisecond, CauseNoReadyEndpoints, false},
		{"timeout of 5 s: begun while the old pod was ready", event.FailTimeout, 5 * time.Second, CauseUnexplained, false},
		{"refused, no duration", event.FailRefused, 0, CauseNoReadyEndpoints, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			old, neu := r.pod("web-1", "10.244.0.11"), r.pod("web-2", "10.244.0.12")
			r.created(old, -70*s)
			r.ready(old, -60*s)
			r.deletion(old, 0, 30*time.Second)
			r.leave(old, 100*ms, 0)
			r.mainSignal(old, 200*ms, 15)
			r.mainExit(old, 300*ms, 0, 0)
			r.removed(old, 400*ms, 0)
			r.terminated(old, 500*ms, "Completed", 0)
			r.created(neu, 1*s)
			r.ready(neu, 3*s)
			r.failure(1500*ms, client(1), tc.class, took(tc.duration))

			fs := decided(t, analyzeAll(t, r))
			if len(fs) != 1 {
				t.Fatalf("%d client failures decided, want 1", len(fs))
			}
			f := fs[0]
			missing := strings.Join(f.Missing, "; ")
			t.Logf("%s: %s | missing: %s", f.Cause, f.Explanation, missing)
			if f.Cause != tc.want {
				t.Errorf("%s: %s, want %s", tc.name, f.Cause, tc.want)
			}
			says := strings.Contains(missing, unknown) && strings.Contains(f.Explanation, "its start is unknown")
			if says != tc.missing {
				t.Errorf("explanation %q, missing %q: naming the unknown start is %v, want %v", f.Explanation, missing, says, tc.missing)
			}
		})
	}
}
