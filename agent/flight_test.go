package agent_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/drainscope/drainscope/agent"
	"github.com/drainscope/drainscope/store"
)

// TestFlightDebug: /debug/flight serves the flight recorder's counts, and
// says so when --flight-recorder=false turned it off.
func TestFlightDebug(t *testing.T) {
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tc := range []struct {
		disabled bool
		want     string
	}{
		{false, `{"enabled":true,"total":{"held":0,"persisted":0,"discarded":0,"passed":0},"pods":[]}`},
		{true, `{"enabled":false}`},
	} {
		a, err := agent.New(agent.Config{
			Node: "node-a", Client: fake.NewClientset(), Store: st,
			Kernel:    agent.KernelConfig{Disabled: true},
			Dataplane: agent.DataplaneConfig{Disabled: true},
			Flight:    agent.FlightConfig{Disabled: tc.disabled},
			Logger:    testLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/flight", nil))
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != tc.want {
			t.Errorf("disabled %v: /debug/flight %d %s, want %s", tc.disabled, rec.Code, got, tc.want)
		}
	}
}
