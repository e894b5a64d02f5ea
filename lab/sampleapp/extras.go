package sampleapp

// What a service that has run for days does beside serving, for the lab's
// longlived profile: a worker process that the main process recycles, as
// gunicorn and php-fpm recycle theirs; a check subcommand for an exec
// readiness probe; and an admin port (which no Service selects) on which
// the service can be made to run out of memory, to crash or to fill its
// local disk.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// Admin paths, served on the admin listener only.
const (
	// PathOOM makes the service allocate memory until the kernel's
	// memory cgroup kills it (a container OOM kill); should it reach its
	// ceiling alive, it exits with ExitNoOOM instead.
	PathOOM = "/admin/oom"
	// PathCrash makes the service exit with ExitCrash at once.
	PathCrash = "/admin/crash"
	// PathFill makes the service write a file of ?mib= MiB (FillMiB when
	// not given) into its fill directory (--fill-dir), as a service that
	// caches or logs to local disk does, and answer once it is on disk.
	// Past the pod's ephemeral-storage limit the kubelet evicts the pod.
	PathFill = "/admin/fill"
)

// FillMiB is what PathFill writes when not told; MaxFillMiB bounds it.
const (
	FillMiB    = 64
	MaxFillMiB = 1024
)

// Exit codes of the admin paths.
const (
	ExitCrash = 3
	ExitNoOOM = 4
)

// check asks url once and returns the exit code an exec probe reads: 0 for
// a 2xx answer, 1 otherwise.
func check(url string, timeout time.Duration, stderr io.Writer) int {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(stderr, "sampleapp check:", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "sampleapp check: %s: HTTP %d\n", url, resp.StatusCode)
		return 1
	}
	return 0
}

// worker is the recycled worker process: it serves nothing, and exits at
// SIGTERM (its parent's recycling) or once its parent is gone.
func worker(stderr io.Writer) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, os.Interrupt)
	parent := os.Getppid()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-term:
			return 0
		case <-t.C:
			if os.Getppid() != parent {
				fmt.Fprintln(stderr, "sampleapp worker: parent gone, exiting")
				return 0
			}
		}
	}
}

// recycleWorkers keeps one worker process running, started as argv, and
// replaces it every period: the new one starts, then the old one gets
// SIGTERM and is waited for. It returns when ctx ends, leaving the last
// worker to notice its parent's exit.
func recycleWorkers(ctx context.Context, argv []string, period time.Duration, stderr io.Writer, log *slog.Logger) {
	start := func() *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Start(); err != nil {
			log.Warn("starting a worker", "err", err)
			return nil
		}
		return cmd
	}
	cur := start()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := start()
		if cur != nil {
			_ = cur.Process.Signal(syscall.SIGTERM)
			err := cur.Wait()
			log.Info("worker recycled", "old_pid", cur.Process.Pid, "exit", err, "new_pid", pidOf(next))
		}
		cur = next
	}
}

func pidOf(c *exec.Cmd) int {
	if c == nil || c.Process == nil {
		return 0
	}
	return c.Process.Pid
}

// ballast holds what PathOOM allocated, so the collector frees none of it.
var ballast [][]byte

// serveAdmin serves the admin paths on ln until it is closed; PathFill
// writes into fillDir ("": refused).
func serveAdmin(ln net.Listener, oomMax int64, fillDir string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathCrash, func(w http.ResponseWriter, _ *http.Request) {
		log.Warn("crashing on request", "exit_code", ExitCrash)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "crashing\n")
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			os.Exit(ExitCrash)
		}()
	})
	mux.HandleFunc("POST "+PathOOM, func(w http.ResponseWriter, _ *http.Request) {
		log.Warn("allocating until killed", "ceiling_bytes", oomMax)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "allocating\n")
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		go allocate(oomMax, log)
	})
	mux.HandleFunc("POST "+PathFill, func(w http.ResponseWriter, r *http.Request) {
		if fillDir == "" {
			http.Error(w, "no fill directory (--fill-dir)", http.StatusConflict)
			return
		}
		mib := FillMiB
		if v := r.URL.Query().Get("mib"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxFillMiB {
				http.Error(w, fmt.Sprintf("mib=%q: want 1 to %d", v, MaxFillMiB), http.StatusBadRequest)
				return
			}
			mib = n
		}
		path, err := fill(fillDir, mib)
		if err != nil {
			log.Error("filling the disk", "dir", fillDir, "mib", mib, "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		log.Warn("filled the disk on request", "path", path, "mib", mib)
		w.WriteHeader(http.StatusAccepted)
		_, _ = fmt.Fprintf(w, "wrote %d MiB to %s\n", mib, path)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(ln)
}

// allocate touches memory in 8 MiB chunks up to max bytes. Under a memory
// limit the kernel kills the process long before; without one it exits
// with ExitNoOOM rather than take the machine's memory.
func allocate(max int64, log *slog.Logger) {
	const chunk = 8 << 20
	for n := int64(0); n < max; n += chunk {
		b := make([]byte, chunk)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		ballast = append(ballast, b)
	}
	log.Error("allocated without being killed: no memory limit? exiting instead", "bytes", strconv.FormatInt(max, 10), "exit_code", ExitNoOOM)
	os.Exit(ExitNoOOM)
}

// fill writes a new file of mib MiB into dir and syncs it, so that the
// blocks are allocated before it answers: what the kubelet measures is the
// space the files take.
func fill(dir string, mib int) (path string, err error) {
	f, err := os.CreateTemp(dir, "fill-*.bin")
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i) | 1 // no zeros: nothing a file system could leave sparse
	}
	for range mib {
		if _, err := f.Write(chunk); err != nil {
			return f.Name(), err
		}
	}
	return f.Name(), f.Sync()
}
