package main

import (
	"fmt"
	"net/http"
	"net/http/pprof"
)

// errProfilesWithoutListener: --pprof without --metrics-listen.
var errProfilesWithoutListener = fmt.Errorf("%w: --pprof serves on --metrics-listen: set it too", errUsage)

// metricsHandler is h, with the runtime profiles beside it when profiles
// is set (--pprof).
func metricsHandler(h http.Handler, profiles bool) http.Handler {
	if !profiles {
		return h
	}
	return withProfiles(h)
}

// withProfiles serves Go's runtime profiles under /debug/pprof/ beside h
// (--pprof): the heap, allocs, goroutine, block, mutex and threadcreate
// profiles, a CPU profile (profile?seconds=N) and an execution trace, for
// `go tool pprof http://ADDR/debug/pprof/heap`. cmdline is not served:
// it would show the process's flags, the store's DSN and its password
// among them.
func withProfiles(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/pprof/cmdline" {
			http.NotFound(w, r)
			return
		}
		pprof.Index(w, r) // the index, and each named profile
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
