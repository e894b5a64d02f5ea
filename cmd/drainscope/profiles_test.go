package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The profiles are served beside the handler they wrap, the heap as a
// gzipped profile; the command line, which holds the DSN, is not.
func TestWithProfiles(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "metrics") })
	srv := httptest.NewServer(withProfiles(inner))
	defer srv.Close()
	get := func(path string) (int, []byte) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	if code, b := get("/metrics"); code != 200 || string(b) != "metrics" {
		t.Errorf("/metrics: %d %q, want the wrapped handler's answer", code, b)
	}
	code, b := get("/debug/pprof/heap")
	if code != 200 {
		t.Fatalf("/debug/pprof/heap: %d", code)
	}
	if _, err := gzip.NewReader(bytes.NewReader(b)); err != nil {
		t.Errorf("/debug/pprof/heap is not a gzipped profile: %v", err)
	}
	if code, _ := get("/debug/pprof/goroutine?debug=1"); code != 200 {
		t.Errorf("/debug/pprof/goroutine: %d", code)
	}
	if code, b := get("/debug/pprof/cmdline"); code != 404 || bytes.Contains(b, []byte("test")) {
		t.Errorf("/debug/pprof/cmdline: %d %q, want 404 without the command line", code, b)
	}
}

// --pprof has nowhere to serve without --metrics-listen: a usage error
// naming both, for the server and the agent.
func TestProfilesNeedTheMetricsListener(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--pprof"},
		{"agent", "--pprof", "--metrics-listen="},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, "--pprof serves on --metrics-listen") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming --metrics-listen", args, code, stderr)
		}
	}
}
