package fleet

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// agentSim is one simulated agent.
type agentSim struct {
	w  *store.Writer
	tr *http.Transport
}

// counters are the POSTs' outcomes, all agents together.
type counters struct {
	posts, s429, other atomic.Int64
	post, age          samples
	mu                 sync.Mutex
	others             map[string]int64 // what the other answers were
}

func (c *counters) otherAnswer(what string) {
	c.other.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.others == nil {
		c.others = map[string]int64{}
	}
	if len(c.others) < 20 {
		c.others[what]++
	} else {
		c.others["(others)"]++
	}
}

func (c *counters) otherAnswers() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k, v := range c.others {
		out = append(out, fmt.Sprintf("%d× %s", v, k))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// timed is an agent's relay.Client with its POSTs timed.
type timed struct {
	store.Store
	c *counters
}

func (t timed) Append(ctx context.Context, b []event.Event) error {
	t0 := time.Now()
	err := t.Store.Append(ctx, b)
	now := time.Now()
	t.c.post.add(now.Sub(t0))
	if err == nil && len(b) > 0 {
		oldest := b[0].Time
		for i := range b {
			oldest = min(oldest, b[i].Time)
		}
		t.c.age.add(now.Sub(time.Unix(0, oldest)))
	}
	return err
}

// statusCounter counts the server's answers by status.
type statusCounter struct {
	rt http.RoundTripper
	c  *counters
}

func (s statusCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	s.c.posts.Add(1)
	switch {
	case err != nil:
		msg := err.Error()
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:] // the cause, not the URL
		}
		s.c.otherAnswer(msg)
	case resp.StatusCode == http.StatusTooManyRequests:
		s.c.s429.Add(1)
	case resp.StatusCode != http.StatusOK:
		s.c.otherAnswer(resp.Status)
	}
	return resp, err
}
