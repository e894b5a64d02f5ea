package ingest

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/drainscope/drainscope/event"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// TestVegetaFixture attacks local servers that fail in each way a rollout
// makes requests fail, with vegeta itself, encodes the results with
// vegeta's own JSON and CSV encoders, and imports them.
func TestVegetaFixture(t *testing.T) {
	okOrFail := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	})
	a := startPod(t, "web-a", "127.0.0.2", okOrFail)      // 503 on /fail
	b := startPod(t, "web-b", "127.0.0.3", hangUp(false)) // closes without answering: EOF
	c := startPod(t, "web-c", "127.0.0.4", hangUp(true))  // aborts: connection reset
	d := startPod(t, "web-d", "127.0.0.5", okOrFail)      // stopped mid-run: refused
	var served atomic.Int64
	d.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		okOrFail(w, r)
	})

	targeter := vegeta.NewStaticTargeter(
		vegeta.Target{Method: "GET", URL: a.srv.URL + "/"},
		vegeta.Target{Method: "GET", URL: a.srv.URL + "/fail"},
		vegeta.Target{Method: "GET", URL: b.srv.URL + "/"},
		vegeta.Target{Method: "GET", URL: c.srv.URL + "/"},
		vegeta.Target{Method: "GET", URL: d.srv.URL + "/"},
	)
	attacker := vegeta.NewAttacker(vegeta.Timeout(2*time.Second), vegeta.Workers(4), vegeta.MaxWorkers(16))
	rate := vegeta.Rate{Freq: 200, Per: time.Second}

	began := time.Now()
	var stopped time.Time
	stopAfter := time.AfterFunc(500*time.Millisecond, func() {
		d.srv.Listener.Close()
		d.srv.CloseClientConnections()
		stopped = time.Now()
	})
	defer stopAfter.Stop()
	var results []vegeta.Result
	for res := range attacker.Attack(targeter, rate, time.Second, "rollout") {
		results = append(results, *res)
	}
	if stopped.IsZero() {
		t.Fatal("the attack ended before web-d was stopped")
	}
	var jsonOut, csvOut bytes.Buffer
	jenc, cenc := vegeta.NewJSONEncoder(&jsonOut), vegeta.NewCSVEncoder(&csvOut)
	wantFailed := 0
	for i := range results {
		if err := jenc.Encode(&results[i]); err != nil {
			t.Fatal(err)
		}
		if err := cenc.Encode(&results[i]); err != nil {
			t.Fatal(err)
		}
		if results[i].Code == 0 || results[i].Code >= 500 {
			wantFailed++
		}
	}
	writeSample(t, "vegeta.jsonl", jsonOut.Bytes(), 12)
	writeSample(t, "vegeta.csv", csvOut.Bytes(), 12)
	t.Logf("vegeta: %d requests, %d failed, web-d served %d before it stopped", len(results), wantFailed, served.Load())

	st := storeWithPods(began.Add(-time.Minute).UnixNano(), a, b, c, d)
	sum := importBytes(t, st, "vegeta-json", "results.json", jsonOut.Bytes())
	if sum.Lines != len(results) || sum.Failures != wantFailed || sum.Stored != wantFailed || sum.Rejected != 0 {
		t.Fatalf("json import: %+v; vegeta had %d results, %d failed", sum, len(results), wantFailed)
	}
	if sum.Resolved != wantFailed {
		t.Errorf("json import: %d of %d failures attributed to a pod", sum.Resolved, wantFailed)
	}

	byPod := map[string]map[string]int{} // pod → reason → count
	for _, e := range st.failures() {
		if e.Source != event.SourceClient || e.Kind != event.ClientFailure {
			t.Fatalf("event %+v", e)
		}
		if byPod[e.Pod.Name] == nil {
			byPod[e.Pod.Name] = map[string]int{}
		}
		byPod[e.Pod.Name][e.Reason]++
		switch e.Pod.Name {
		case "web-a":
			if e.Code != 503 || e.Reason != event.FailStatus || e.Attrs[event.AttrTarget] != a.srv.URL+"/fail" {
				t.Errorf("web-a failure: %+v", e)
			}
		case "web-b":
			if e.Reason != event.FailEOF || e.Remote != b.addr {
				t.Errorf("web-b failure (server hung up): %+v", e)
			}
		case "web-c":
			if e.Reason != event.FailReset || e.Remote != c.addr {
				t.Errorf("web-c failure (server reset): %+v", e)
			}
		case "web-d":
			// Requests that began before the stop may have been cut on the
			// way; none may fail before it.
			if e.At().Before(stopped.Add(-100*time.Millisecond)) || e.Remote != d.addr {
				t.Errorf("web-d failure before it stopped (%v): %+v", stopped, e)
			}
		default:
			t.Errorf("failure on no known pod: %+v", e)
		}
	}
	t.Logf("failures by pod and reason: %v", byPod)
	if byPod["web-a"][event.FailStatus] == 0 || byPod["web-b"][event.FailEOF] == 0 ||
		byPod["web-c"][event.FailReset] == 0 || byPod["web-d"][event.FailRefused] == 0 {
		t.Errorf("missing a failure class: %v", byPod)
	}

	// The CSV encoding of the same results holds the same failures: a
	// second import stores nothing new.
	before := len(st.failures())
	csum := importBytes(t, st, "vegeta-csv", "results.csv", csvOut.Bytes())
	if csum.Lines != len(results) || csum.Failures != wantFailed || csum.Rejected != 0 {
		t.Fatalf("csv import: %+v", csum)
	}
	if after := len(st.failures()); after != before {
		t.Errorf("csv import of the same results added %d events", after-before)
	}
}
