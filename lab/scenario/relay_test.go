package scenario_test

import (
	"context"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// requireRelayed checks, after a lab's runs, that the agent's events went
// through the server's relay as an agent's with --server do: batches
// stored, none refused or left to retry, and no more events of an agent's
// sources and the lab node's in the store than the relay stored (the lab's
// own events, the clients' failures and an ingress's dataplane records go
// straight to the store).
func requireRelayed(t *testing.T, ctx context.Context, c *scenario.Cluster, st store.Store) {
	t.Helper()
	rs, ok := c.RelayStats()
	if !ok {
		t.Fatal("the lab's agent events did not go through the relay")
	}
	t.Logf("agent events through the relay: %s", rs)
	if rs.Stored == 0 || rs.Refused != 0 || rs.Failed != 0 {
		t.Errorf("relay: %+v, want batches stored and none refused or failed", rs)
	}
	agent, other := 0, 0
	if err := st.Scan(ctx, store.Query{}, func(e *event.Event) error {
		if relay.AgentSource(e.Source) && (e.Node == "" || e.Node == scenario.NodeName) {
			agent++
		} else {
			other++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("store: %d events of an agent's sources, %d of the lab's and the clients'", agent, other)
	if agent == 0 || int64(agent) > rs.Events {
		t.Errorf("the store holds %d events of an agent's sources, the relay stored %d: want some, all through the relay", agent, rs.Events)
	}
}
