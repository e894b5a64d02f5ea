package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// TestLongUIDAmongHonestBatches: nine agents post at once to a relay
// writing to a real Postgres, one of them an event with a 10 KB pod UID.
// Postgres would refuse its index row (SQLSTATE 54000), and before that
// was a row's refusal every merged batch was answered 503. Now the event
// is refused at decode, for its bound, and the eight honest batches are
// stored, whatever batches they are merged with.
func TestLongUIDAmongHonestBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := store.OpenPostgres(ctx, pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	srv := httptest.NewServer(&relay.Handler{Store: pg, Auth: nodeToken{}})
	defer srv.Close()
	base := time.Now().Add(-time.Minute)
	for round := range 3 {
		var wg sync.WaitGroup
		codes := make([]int, 9)
		for i := range codes {
			node := fmt.Sprintf("node-%d", i)
			evs := events(node, base.Add(time.Duration(round)*time.Second), 50, "web-"+node)
			if i == 4 {
				evs[17].Pod.UID = incompressible(10_000)
				evs[17].Seal()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i], _ = post(t, srv.URL, "node:"+node, evs)
			}()
		}
		wg.Wait()
		for i, code := range codes {
			want := http.StatusOK
			if i == 4 {
				want = http.StatusBadRequest
			}
			if code != want {
				t.Errorf("round %d, node-%d: %d, want %d", round, i, code, want)
			}
		}
	}
	for i := range 9 {
		want := 150
		if i == 4 {
			want = 0
		}
		if n := count(t, pg, fmt.Sprintf("node-%d", i)); n != want {
			t.Errorf("node-%d: %d events stored, want %d", i, n, want)
		}
	}
}

// incompressible is n random letters and digits: Postgres compresses an
// index row before it measures it, and a 10 KB run of one letter fits.
func incompressible(n int) string {
	const abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	r := rand.New(rand.NewPCG(uint64(n), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = abc[r.IntN(len(abc))]
	}
	return string(b)
}
