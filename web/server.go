package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/httpauth"
	"github.com/drainscope/drainscope/store"
)

// AnalyzeFunc is the seam to the analysis: it reads q's window from st and
// explains it. analysis.AnalyzeWith is the default; tests may pass another.
type AnalyzeFunc func(ctx context.Context, st store.Store, q store.Query, opts analysis.Options) (*analysis.Result, error)

// Options configure NewHandler. Only Store is required.
type Options struct {
	Store store.Store
	// Ingest, when set, is mounted at POST /api/v1/client-failures. It
	// checks its own bearer token, so the UI's token does not guard it.
	Ingest http.Handler
	// AgentEvents, when set, is mounted at POST /api/v1/agent/events
	// (relay.Handler): agents' events, each agent authenticated by its
	// own service account token, so the UI's token does not guard it.
	AgentEvents http.Handler
	// Ready, when set, says whether the server can take all it serves:
	// /readyz answers 503 with its error until it returns nil (a
	// Kubernetes readiness probe then keeps the Service's traffic, the
	// agents' and the UI's, on a server that can). nil: ready at once.
	Ready func() error
	// AuthToken, when set, is required of every other request except
	// /healthz and /readyz: as "Authorization: Bearer TOKEN", or as the
	// cookie that /login (or any page opened with ?token=TOKEN) sets.
	AuthToken string
	// AllowedHosts, when set, is the only Host header values accepted (any
	// port): it keeps a page on another site from reaching a loopback
	// listener through DNS rebinding.
	AllowedHosts []string

	Log      *slog.Logger     // nil: slog.Default()
	Now      func() time.Time // nil: time.Now
	Analyze  AnalyzeFunc      // nil: analysis.AnalyzeWith
	Analysis analysis.Options // zero: the analysis's defaults, with MaxFailures raised to 50,000
	Limits   Limits           // zero: DefaultLimits

	// CacheModels is how many rollouts stay in memory (default 4);
	// CacheWeight bounds their total size in events (default 2,000,000).
	CacheModels int
	CacheWeight int
	// LiveTTL is how long a rollout still in progress is served before it
	// is read again (default 3 s); FinishedTTL the same for one that ended
	// (default 5 min: client logs are often imported after the fact).
	LiveTTL     time.Duration
	FinishedTTL time.Duration
	// ListTTL is the least time the rollouts list is reused (default 2 s;
	// it grows to five times what the store took to answer).
	ListTTL time.Duration
	// BuildTimeout bounds reading one rollout (default 2 min).
	BuildTimeout time.Duration
	// Context ends background work (default: never; Close ends it too).
	Context context.Context
	// ListLimit is the most rollouts one list answer carries (default 200).
	ListLimit int
	// MaxStreams bounds concurrent update streams (default 64);
	// MaxClientStreams bounds those of one client address (default 8), so
	// that one client cannot take them all. StreamLifetime ends each
	// stream after a while (default 10 min, less up to a tenth so that
	// clients do not come back together): the browser reconnects, and a
	// stream no one reads does not hold its slot for ever.
	MaxStreams       int
	MaxClientStreams int
	StreamLifetime   time.Duration
	// AuthFailures limits wrong tokens per client address, at /login, in
	// bearer headers, cookies and ?token= and at the ingest endpoint
	// (nil: 10 at once, then one more every 6 s). A blocked address is
	// answered 429 with Retry-After.
	AuthFailures *httpauth.FailureLimiter
	// UpdateEvery is how often update streams look for changes (default 2 s).
	UpdateEvery time.Duration
}

// Server is the UI and the API. It is an http.Handler.
type Server struct {
	opts   Options
	st     store.Store
	log    *slog.Logger
	router chi.Router
	limits Limits

	mu      sync.Mutex
	models  map[analysis.DisruptionKey]*cached
	tick    uint64
	flight  map[analysis.DisruptionKey]*flight
	sums    map[analysis.DisruptionKey]keptSummary
	lists   map[listFilter]*listEntry
	queue   []*analysis.Disruption
	queued  map[analysis.DisruptionKey]bool
	working bool
	builds  chan struct{} // one token per concurrent build
	digests store.Digests // nil: none kept
	version atomic.Uint64 // bumped when a summary lands
	statics map[string]staticFile
	pages   *pageTemplates

	failures *httpauth.FailureLimiter

	streamMu     sync.Mutex
	streamsTotal int
	streamsBy    map[string]int // client address → open streams

	ctx    context.Context // ends background reads; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type cached struct {
	m    *model
	used uint64
}

type keptSummary struct {
	sum   RolloutSummary
	built time.Time
	took  time.Duration
}

type flight struct {
	done chan struct{}
	m    *model
	err  error
	// full: the model must answer more than the timeline; again: read the
	// rollout from its events, not from a digest.
	full, again bool
}

// NewHandler returns the router serving the pages, the static files and
// the API.
func NewHandler(opts Options) http.Handler { return New(opts) }

// New is NewHandler returning the concrete type.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Analyze == nil {
		opts.Analyze = analysis.AnalyzeWith
	}
	if opts.Analysis.MaxFailures == 0 {
		opts.Analysis.MaxFailures = 50000
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opts.LiveTTL, 3*time.Second)
	def(&opts.FinishedTTL, 5*time.Minute)
	def(&opts.ListTTL, 2*time.Second)
	def(&opts.BuildTimeout, 2*time.Minute)
	def(&opts.UpdateEvery, 2*time.Second)
	if opts.CacheModels <= 0 {
		opts.CacheModels = 4
	}
	if opts.CacheWeight <= 0 {
		opts.CacheWeight = 2_000_000
	}
	if opts.ListLimit <= 0 {
		opts.ListLimit = 200
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = 64
	}
	if opts.MaxClientStreams <= 0 {
		opts.MaxClientStreams = 8
	}
	def(&opts.StreamLifetime, 10*time.Minute)
	if opts.AuthFailures == nil {
		opts.AuthFailures = &httpauth.FailureLimiter{}
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	s := &Server{
		opts: opts, st: opts.Store, log: opts.Log, limits: opts.Limits.withDefaults(),
		models: map[analysis.DisruptionKey]*cached{}, flight: map[analysis.DisruptionKey]*flight{},
		sums: map[analysis.DisruptionKey]keptSummary{}, lists: map[listFilter]*listEntry{},
		queued: map[analysis.DisruptionKey]bool{}, builds: make(chan struct{}, 1), digests: digestsOf(opts),
		statics: loadStatics(opts.Analysis.WithDefaults().Rules), failures: opts.AuthFailures, streamsBy: map[string]int{},
	}
	s.pages = mustTemplates(s.staticVersion)
	s.ctx, s.cancel = context.WithCancel(opts.Context)
	s.router = s.routes()
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// Close stops the background reads and waits for them, so the store can be
// closed after it.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(escapedRouting, middleware.Recoverer, securityHeaders, s.hostCheck, middleware.GetHead,
		// A zoomed-out timeline is a few hundred kilobytes of JSON; it
		// compresses tenfold. Event streams are not compressed.
		middleware.Compress(5, "application/json", "text/html", "text/css", "text/javascript", "image/svg+xml"))
	r.NotFound(s.notFound)
	r.MethodNotAllowed(s.methodNotAllowed(r))

	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Ready != nil {
			if err := s.opts.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable) // as the agent's
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	if s.opts.Ingest != nil {
		r.Post("/api/v1/client-failures", s.guardIngest(s.opts.Ingest))
	}
	if s.opts.AgentEvents != nil {
		r.Post("/api/v1/agent/events", s.guardIngest(s.opts.AgentEvents))
	}
	r.Get("/login", s.loginPage)
	r.Post("/login", s.login)
	r.Group(func(r chi.Router) {
		r.Use(s.auth)
		r.Get("/", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/rollouts", http.StatusSeeOther)
		})
		r.Get("/static/{file}", s.static)
		r.Get("/rollouts", s.rolloutsPage)
		r.Get("/check", s.checkPage)
		r.Get("/rollouts/{ns}/{kind}/{name}/{start}", s.timelinePage)
		r.Get("/rollouts/{ns}/{kind}/{name}/{start}/alignment", s.alignmentPage)

		r.Route("/api/v1", func(r chi.Router) {
			r.Get("/rollouts", s.apiRollouts)
			r.Get("/rollouts/{ns}/{kind}/{name}/{start}", s.apiRollout)
			r.Get("/rollouts/{ns}/{kind}/{name}/{start}/timeline", s.apiTimeline)
			r.Get("/rollouts/{ns}/{kind}/{name}/{start}/alignment", s.apiAlignment)
			r.Get("/rollouts/{ns}/{kind}/{name}/{start}/failures", s.apiFailures)
			r.Get("/rollouts/{ns}/{kind}/{name}/{start}/failures/{i}", s.apiFailure)
			r.Get("/events/{time}/{id}", s.apiEvent)
			r.Get("/causes", s.apiCauses)
			r.Get("/check", s.apiCheck)
			r.Get("/updates", s.apiUpdates)
		})
	})
	return r
}

// NewServer wraps h in an http.Server with the timeouts a long-running
// daemon needs. Update streams lift the write deadline for themselves.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       60 * time.Second, // ingest bodies up to 8 MiB
		WriteTimeout:      2 * time.Minute,  // a cold rollout may take a while to read
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// model returns the rollout's model, reading it if it is not cached or has
// expired. Concurrent requests for one rollout share one read.
func (s *Server) model(ctx context.Context, key analysis.DisruptionKey, refresh bool) (*model, error) {
	return s.modelFor(ctx, key, refresh, false)
}

// modelFor is model; a model that answers only the timeline will do when
// timeline is set.
func (s *Server) modelFor(ctx context.Context, key analysis.DisruptionKey, refresh, timeline bool) (*model, error) {
	for range 2 {
		s.mu.Lock()
		if c := s.models[key]; c != nil && !refresh && s.fresh(c.m) && (timeline || !c.m.partial) {
			s.tick++
			c.used = s.tick
			s.mu.Unlock()
			return c.m, nil
		}
		f := s.flight[key]
		if f == nil {
			f = &flight{done: make(chan struct{}), full: !timeline, again: refresh}
			s.flight[key] = f
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.fly(key, f, nil, true)
			}()
		}
		s.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil || timeline || !f.m.partial {
			return f.m, f.err
		}
		// Joined a flight that read only the timeline: read the rest.
	}
	return nil, fmt.Errorf("reading rollout %s: no whole model", key)
}

func (s *Server) fresh(m *model) bool { return s.freshAt(m.built, m.took, m.live) }

// freshAt says whether what was read at built, taking took, may still be
// served. A rollout in progress is read again after LiveTTL, or five times
// as long as reading it took, so that watching a big one does not keep the
// store busy.
func (s *Server) freshAt(built time.Time, took time.Duration, live bool) bool {
	ttl := s.opts.FinishedTTL
	if live {
		ttl = max(s.opts.LiveTTL, 5*took)
	}
	return s.opts.Now().Sub(built) < ttl
}

// errNoRollout is returned for a key that names no rollout.
var errNoRollout = errors.New("no such rollout")

// fly reads one rollout (r when the caller already has it) and lands it in
// the caches. keep says whether the model may push others out of the cache
// (background summaries only fill free room).
func (s *Server) fly(key analysis.DisruptionKey, f *flight, r *analysis.Disruption, keep bool) {
	defer close(f.done)
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.BuildTimeout)
	defer cancel()
	select {
	case s.builds <- struct{}{}:
	case <-ctx.Done():
		f.err = ctx.Err()
		s.land(key, f, keep)
		return
	}
	defer func() { <-s.builds }()
	if r == nil && s.digests != nil && !f.again {
		m, err := s.loadDigest(ctx, key, f.full)
		if err != nil {
			s.log.Warn("reading a digest; reading the rollout instead", "rollout", key.String(), "err", err)
		}
		if m != nil {
			f.m = m
			s.log.Debug("rollout read from its digest", "rollout", key.String(), "lanes", len(m.lanes), "took", m.took)
			s.land(key, f, keep)
			return
		}
	}
	if r == nil {
		ro, err := s.findRollout(ctx, key)
		if err != nil {
			f.err = err
			s.land(key, f, keep)
			return
		}
		r = ro
	}
	// What the read's window holds before the read, for keepDigest (of a
	// rollout that has ended): the read itself takes fewer of its events
	// than that (the other namespaces' re-observations stay out; see
	// analysis.AnalyzeWith).
	before := int64(-1)
	if s.digests != nil && !r.Live(s.opts.Now().UnixNano()) {
		if n, err := s.digests.CountEvents(ctx, scanWindow(r, s.opts.Analysis)); err == nil {
			before = n
		}
	}
	m, err := buildModel(ctx, s.st, s.opts.Analyze, s.opts.Analysis, r, s.opts.Now())
	if err != nil {
		f.err = fmt.Errorf("reading rollout %s: %w", key, err)
	} else {
		f.m = m
		s.log.Debug("rollout read", "rollout", key.String(), "lanes", len(m.lanes), "events", m.events,
			"failures", len(m.result.Failures), "took", m.took)
		if s.digests != nil && !m.live && before >= 0 {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				if err := s.keepDigest(s.ctx, m, before); err != nil && s.ctx.Err() == nil {
					s.log.Warn("keeping a digest", "rollout", key.String(), "err", err)
				}
			}()
		}
	}
	s.land(key, f, keep)
}

func (s *Server) land(key analysis.DisruptionKey, f *flight, keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.flight, key)
	if f.m == nil {
		return
	}
	s.sums[key] = keptSummary{sum: f.m.summary, built: f.m.built, took: f.m.took}
	s.version.Add(1)
	if len(s.sums) > 10000 {
		for k := range s.sums { // drop an arbitrary tenth; they are rebuilt on demand
			delete(s.sums, k)
			if len(s.sums) <= 9000 {
				break
			}
		}
	}
	s.tick++
	if !keep && len(s.models) >= s.opts.CacheModels {
		return
	}
	s.models[key] = &cached{m: f.m, used: s.tick}
	s.evict()
}

// evict drops the least recently used models beyond the cache's bounds,
// never the newest.
func (s *Server) evict() {
	for {
		total := 0
		var lru analysis.DisruptionKey
		var lruUsed uint64
		found := false
		for k, c := range s.models {
			total += c.m.weight()
			if c.used != s.tick && (!found || c.used < lruUsed) {
				lru, lruUsed, found = k, c.used, true
			}
		}
		if !found || (len(s.models) <= s.opts.CacheModels && total <= s.opts.CacheWeight) {
			return
		}
		delete(s.models, lru)
	}
}

// findRollout asks the account for the disruption that starts at
// key.Start.
func (s *Server) findRollout(ctx context.Context, key analysis.DisruptionKey) (*analysis.Disruption, error) {
	// A disruption ends after a quiet RolloutGap, or when its rollout is
	// complete; read ahead in growing steps until the one found ends well
	// inside what was read.
	for span := 6 * time.Hour; ; span *= 4 {
		q := store.Query{Namespace: key.Namespace, Workload: key.Workload(),
			Window: event.Window{From: key.Start, To: key.Start + int64(span)}}
		rs, err := analysis.FindDisruptions(ctx, s.st, q, s.opts.Analysis)
		if err != nil {
			return nil, err
		}
		var found *analysis.Disruption
		for _, r := range rs {
			if r.Key() == key {
				found = r
				break
			}
		}
		if found == nil {
			return nil, errNoRollout
		}
		if !found.InProgress && found.Until+int64(analysis.RolloutGap) < q.Window.To || span > 30*24*time.Hour {
			return found, nil
		}
	}
}

// enqueue asks the background worker for the summaries of rs.
func (s *Server) enqueue(rs []*analysis.Disruption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		k := r.Key()
		if s.queued[k] || s.flight[k] != nil || len(s.queue) >= 256 {
			continue
		}
		s.queued[k] = true
		s.queue = append(s.queue, r)
	}
	if !s.working && len(s.queue) > 0 && s.ctx.Err() == nil {
		s.working = true
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.work()
		}()
	}
}

// work reads queued rollouts one at a time and exits when none are left.
func (s *Server) work() {
	for {
		s.mu.Lock()
		if len(s.queue) == 0 || s.ctx.Err() != nil {
			s.working = false
			s.queue = nil
			clear(s.queued)
			s.mu.Unlock()
			return
		}
		r := s.queue[0]
		s.queue = s.queue[1:]
		k := r.Key()
		delete(s.queued, k)
		if s.flight[k] != nil {
			s.mu.Unlock()
			continue
		}
		f := &flight{done: make(chan struct{})}
		s.flight[k] = f
		s.mu.Unlock()
		s.fly(k, f, r, false)
		if f.err != nil {
			s.log.Warn("summarising rollout", "rollout", k.String(), "err", store.Redact(f.err.Error()))
		}
	}
}
