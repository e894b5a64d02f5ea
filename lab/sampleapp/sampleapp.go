// Package sampleapp is the HTTP service the lab deploys. It is a small
// HTTP/1.1 server whose only interesting property is what it does when told to
// stop. Its behaviours are the ones field reports compare:
//
//   - exit: no SIGTERM handler; the kernel ends the process at once and
//     closes every connection it had.
//   - graceful: at SIGTERM close the listener, let requests in progress
//     finish, exit after a fixed delay. Established keep-alive connections
//     stay open until the exit closes them.
//   - drain: at SIGTERM keep the listener open and keep serving, but answer
//     every request with "Connection: close" so each client leaves by
//     itself after a complete response; exit once no connection is left.
//
// A preStop hook is not the application's business: the lab adds it to the
// pod spec, with the graceful behaviour inside.
package sampleapp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Behaviour is what the server does at SIGTERM.
type Behaviour string

// The behaviours.
const (
	Exit     Behaviour = "exit"
	Graceful Behaviour = "graceful"
	Drain    Behaviour = "drain"
)

// Behaviours lists them in the order the lab runs them.
var Behaviours = []Behaviour{Exit, Graceful, Drain}

// ParseBehaviour accepts the names above.
func ParseBehaviour(s string) (Behaviour, error) {
	for _, b := range Behaviours {
		if string(b) == s {
			return b, nil
		}
	}
	return "", fmt.Errorf("unknown shutdown behaviour %q (want exit, graceful or drain)", s)
}

// Config sets the server up.
type Config struct {
	Behaviour Behaviour
	ExitDelay time.Duration // graceful: SIGTERM to exit
	DrainMin  time.Duration // drain: keep serving at least this long after SIGTERM
	DrainIdle time.Duration // drain: exit once no connection was open for this long
	DrainMax  time.Duration // drain: exit after this long whatever is still open
	Work      time.Duration // how long each request takes to answer
	Pod       string        // name to answer with
	Log       *slog.Logger
}

// Defaults are the timings of the field report the lab reproduces.
var Defaults = Config{
	Behaviour: Exit,
	ExitDelay: 3 * time.Second,
	DrainMin:  time.Second,
	DrainIdle: 500 * time.Millisecond,
	DrainMax:  20 * time.Second,
}

// Response headers the load generator reads.
const (
	HeaderBackend = "X-Backend" // the pod address:port that answered
	HeaderPod     = "X-Pod"     // the pod name
)

// Paths served.
const (
	PathHealth = "/healthz"
)

// Server is one instance of the service.
type Server struct {
	cfg      Config
	srv      *http.Server
	lnMu     sync.Mutex // Serve sets ln on its goroutine, terminate closes it on another
	ln       net.Listener
	draining atomic.Bool // SIGTERM seen: report not ready
	closing  atomic.Bool // drain: answer with Connection: close
	stopping atomic.Bool
	open     atomic.Int64 // connections open
	lastConn atomic.Int64 // unix ns of the last client activity (see connState)
	conns    sync.Map     // net.Conn → *connInfo
	inFlight atomic.Int64 // requests being answered
	once     sync.Once
}

// New returns a server for cfg, with unset durations taken from Defaults.
func New(cfg Config) (*Server, error) {
	if cfg.Behaviour == "" {
		cfg.Behaviour = Defaults.Behaviour
	}
	if _, err := ParseBehaviour(string(cfg.Behaviour)); err != nil {
		return nil, err
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.ExitDelay, Defaults.ExitDelay)
	def(&cfg.DrainMin, Defaults.DrainMin)
	def(&cfg.DrainIdle, Defaults.DrainIdle)
	def(&cfg.DrainMax, Defaults.DrainMax)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealth, s.health)
	mux.HandleFunc("/", s.serve)
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// No idle timeout: a server that closed idle keep-alive connections
		// on its own would race its clients in the control run too.
		ConnState: s.connState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ci := &connInfo{}
			s.conns.Store(c, ci)
			return context.WithValue(ctx, connKey{}, ci)
		},
		ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// Serve accepts connections on ln until the listener is closed. It returns
// nil when the close was part of a shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.lnMu.Lock()
	s.ln = ln
	s.lnMu.Unlock()
	err := s.srv.Serve(ln)
	if s.stopping.Load() || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// connInfo is what the server knows about one connection.
type connInfo struct {
	requests atomic.Int64 // requests other than health checks
	probes   atomic.Int64 // health checks
}

type connKey struct{}

// connState counts open connections and notes client activity. A
// connection that only carried health checks (the kubelet's probes, one
// connection each) is not client activity: counting it would keep a
// draining server from ever being idle.
func (s *Server) connState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.open.Add(-1)
		v, _ := s.conns.LoadAndDelete(c)
		if ci, ok := v.(*connInfo); !ok || ci.requests.Load() > 0 || ci.probes.Load() == 0 {
			s.lastConn.Store(time.Now().UnixNano())
		}
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if ci, ok := r.Context().Value(connKey{}).(*connInfo); ok {
		ci.probes.Add(1)
	}
	if s.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok\n")
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	if ci, ok := r.Context().Value(connKey{}).(*connInfo); ok {
		ci.requests.Add(1)
	}
	s.lastConn.Store(time.Now().UnixNano())
	defer func() { s.lastConn.Store(time.Now().UnixNano()) }()
	if s.cfg.Work > 0 {
		time.Sleep(s.cfg.Work)
	}
	h := w.Header()
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		h.Set(HeaderBackend, a.String())
	}
	if s.cfg.Pod != "" {
		h.Set(HeaderPod, s.cfg.Pod)
	}
	if s.closing.Load() {
		// The client reads this whole response, then leaves this
		// connection and opens a new one, which the Service sends to a
		// pod that is not going away.
		h.Set("Connection", "close")
	}
	body := "ok " + s.cfg.Pod + "\n"
	h.Set("Content-Type", "text/plain")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = io.WriteString(w, body)
}

// Terminate does what the behaviour does between SIGTERM and exit, and
// returns when the process should exit. For Exit it returns at once (the
// real process never gets here: it has no SIGTERM handler).
func (s *Server) Terminate(ctx context.Context) {
	s.once.Do(func() { s.terminate(ctx) })
}

func (s *Server) closeListener() {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.ln != nil {
		_ = s.ln.Close()
	}
}

func (s *Server) terminate(ctx context.Context) {
	start := time.Now()
	log := s.cfg.Log
	switch s.cfg.Behaviour {
	case Exit:
		return
	case Graceful:
		log.Info("SIGTERM: closing the listener", "exit_in", s.cfg.ExitDelay)
		s.stopping.Store(true)
		s.draining.Store(true)
		s.closeListener()
		wait(ctx, s.cfg.ExitDelay)
		for s.inFlight.Load() > 0 && ctx.Err() == nil {
			wait(ctx, 10*time.Millisecond)
		}
		log.Info("exiting", "after", time.Since(start).Round(time.Millisecond), "open_connections", s.open.Load())
	case Drain:
		log.Info("SIGTERM: draining with Connection: close")
		s.draining.Store(true)
		s.closing.Store(true)
		for ctx.Err() == nil {
			now := time.Now()
			// Idle: nothing open now and nothing opened or closed for
			// DrainIdle. Connections that live a millisecond between a
			// client's requests would slip through a sampled count.
			idle := s.open.Load() == 0 && now.Sub(time.Unix(0, s.lastConn.Load())) >= s.cfg.DrainIdle
			if idle && now.Sub(start) >= s.cfg.DrainMin {
				break
			}
			if now.Sub(start) >= s.cfg.DrainMax {
				log.Warn("drain timed out", "open_connections", s.open.Load())
				break
			}
			wait(ctx, 10*time.Millisecond)
		}
		s.stopping.Store(true)
		s.closeListener()
		// A connection accepted between the idle check and the close (the
		// kubelet's readiness probe goes on while a pod drains) would be
		// cut in use by the exit: the kernel capture rightly records it as
		// such. Let what is open finish, with Connection: close, first.
		for s.open.Load() > 0 && ctx.Err() == nil && time.Since(start) < s.cfg.DrainMax {
			wait(ctx, 10*time.Millisecond)
		}
		log.Info("exiting", "after", time.Since(start).Round(time.Millisecond), "open_connections", s.open.Load())
	}
}

// Open is the number of connections open now.
func (s *Server) Open() int64 { return s.open.Load() }

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Main runs the service as a process: flags in args, pod name from
// $POD_NAME. It returns the exit code; with the exit behaviour SIGTERM ends
// the process before it returns.
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sampleapp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":8080", "address to listen on")
	behaviour := fs.String("behaviour", string(Defaults.Behaviour), "what to do at SIGTERM: exit, graceful or drain")
	cfg := Defaults
	fs.DurationVar(&cfg.ExitDelay, "exit-delay", Defaults.ExitDelay, "graceful: time from SIGTERM to exit")
	fs.DurationVar(&cfg.DrainMin, "drain-min", Defaults.DrainMin, "drain: serve at least this long after SIGTERM")
	fs.DurationVar(&cfg.DrainIdle, "drain-idle", Defaults.DrainIdle, "drain: exit once no connection was open this long")
	fs.DurationVar(&cfg.DrainMax, "drain-max", Defaults.DrainMax, "drain: exit after this long whatever is still open")
	fs.DurationVar(&cfg.Work, "work", 0, "time each request takes")
	checkURL := fs.String("check", "", "ask this URL once and exit 0 if it answers 2xx, 1 otherwise (an exec readiness probe)")
	isWorker := fs.Bool("worker", false, "run as the recycled worker process: serve nothing, exit at SIGTERM or when the parent is gone")
	workerEvery := fs.Duration("worker-every", 0, "keep a worker process (this program with --worker) and replace it this often (0: none)")
	admin := fs.String("admin-listen", "", "serve "+PathOOM+", "+PathCrash+" and "+PathFill+" (POST) on this address (empty: none)")
	fillDir := fs.String("fill-dir", "", "the directory "+PathFill+" writes into (empty: it is refused)")
	oomMax := fs.Int64("oom-max", 1<<30, "bytes "+PathOOM+" allocates at most before it exits instead of being killed")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case *checkURL != "":
		return check(*checkURL, time.Second, stderr)
	case *isWorker:
		return worker(stderr)
	}
	b, err := ParseBehaviour(*behaviour)
	if err != nil {
		fmt.Fprintln(stderr, "sampleapp:", err)
		return 2
	}
	cfg.Behaviour = b
	cfg.Pod = os.Getenv("POD_NAME")
	cfg.Log = slog.New(slog.NewTextHandler(stderr, nil)).With("pod", cfg.Pod, "behaviour", b)
	s, err := New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "sampleapp:", err)
		return 2
	}
	// Whatever the embedding program registered (drainscope's main catches
	// SIGTERM for its own shutdown), the exit behaviour needs SIGTERM's
	// default action: the kernel ends the process.
	signal.Reset(syscall.SIGTERM, os.Interrupt)
	// Register for SIGTERM before listening, so a readiness probe never
	// sees a process that the default disposition would still kill.
	var term chan os.Signal
	if b != Exit {
		term = make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "sampleapp:", err)
		return 1
	}
	cfg.Log.Info("listening", "addr", ln.Addr().String())
	if *admin != "" {
		aln, err := net.Listen("tcp", *admin)
		if err != nil {
			fmt.Fprintln(stderr, "sampleapp:", err)
			return 1
		}
		cfg.Log.Info("admin listening", "addr", aln.Addr().String())
		go serveAdmin(aln, *oomMax, *fillDir, cfg.Log)
	}
	if *workerEvery > 0 {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "sampleapp:", err)
			return 1
		}
		// This program as it was started, up to the arguments Main got
		// (drainscope's "lab sampleapp", or nothing for a test binary).
		argv := append([]string{exe}, os.Args[1:len(os.Args)-len(args)]...)
		go recycleWorkers(context.Background(), append(argv, "--worker"), *workerEvery, stderr, cfg.Log)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	if term == nil {
		// Exit: nothing to do but serve; SIGTERM's default action ends us.
		if err := <-served; err != nil {
			fmt.Fprintln(stderr, "sampleapp:", err)
			return 1
		}
		return 0
	}
	select {
	case err := <-served:
		if err != nil {
			fmt.Fprintln(stderr, "sampleapp:", err)
			return 1
		}
		return 0
	case <-term:
	}
	s.Terminate(context.Background())
	// Exit without closing connections ourselves: the kernel closes what
	// is left, exactly as it would for any process that exits.
	return 0
}
