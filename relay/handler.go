package relay

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/httpauth"
	"github.com/drainscope/drainscope/store"
)

// EventsPath is where the web server mounts Handler.
const EventsPath = "/api/v1/agent/events"

// Defaults of Handler.
const (
	DefaultMaxBytes      = 16 << 20 // a body, before and after gzip
	DefaultMaxEvents     = 20000    // events in one batch
	DefaultMaxConcurrent = 512      // batches taken at once (read, checked, waiting for a merged write)
	// DefaultMaxEventsInFlight bounds their events: about 90 MiB decoded,
	// ten batches of MaxEvents or thousands of an agent's usual few.
	DefaultMaxEventsInFlight = 200000
	DefaultBodyTimeout       = 30 * time.Second
	// DefaultSlotWait: a burst of batches (thousands of agents flushing
	// at once, their reviews cached) waits its turn rather than being
	// answered 429, which an agent answers by backing off, up to 10 s.
	DefaultSlotWait = 2 * time.Second
	// DefaultMaxAge is how old an event may be when it arrives: as long as
	// the pod index remembers a deleted pod (DefaultPodRetain), since an
	// older event's pod could not be placed. An agent holds its events
	// through a server outage (its buffer, a million events by default)
	// and sends them once the server is back, within seconds; what it
	// held past the hour is refused, and an agent writing through the
	// server drops such events before sending them (store.WriterOptions
	// MaxAge).
	DefaultMaxAge = DefaultPodRetain
	// DefaultMaxAhead is how far past the server's clock an event's time
	// may be: the skew between a node's clock and the server's.
	DefaultMaxAhead = time.Minute
)

// Batch is the body an agent posts: events as package event defines them,
// in encoding/json's form of event.Event.
type Batch struct {
	Events []event.Event `json:"events"`
}

// Result answers a stored batch.
type Result struct {
	Stored int `json:"stored"`
}

// Refusal answers a refused batch. Event is the index of the event
// refused, when one was.
type Refusal struct {
	Error string `json:"error"`
	Event *int   `json:"event,omitempty"`
}

// agentSources are the sources an agent records. Client failures have
// their own endpoint and token (ingest), the lab's events are the lab's.
var agentSources = map[event.Source]bool{
	event.SourceWatcher: true, event.SourceKernel: true, event.SourceDataplane: true, event.SourceAgent: true,
}

// AgentSource reports whether agents record events of source s, and so
// may send them to Handler.
func AgentSource(s event.Source) bool { return agentSources[s] }

// KindSource is the source that records events of kind k, and ok false
// for a kind no source is known to record. The analysis goes by the kind:
// a signal it reads as the kernel's, whatever the event's source says, so
// Handler takes each kind only from its own source.
func KindSource(k event.Kind) (s event.Source, ok bool) {
	switch {
	case k.IsKernel(), k == event.KernelCapabilities:
		return event.SourceKernel, true
	case k.IsDataplane():
		return event.SourceDataplane, true
	case k.IsEndpoint():
		return event.SourceWatcher, true
	}
	switch k {
	case event.PodCreated, event.PodDeletion, event.PodReady, event.PodNotReady, event.PodFinished,
		event.ContainerStarted, event.ContainerTerminated, event.WorkloadChanged, event.ServiceChanged,
		event.KubeletEvent, event.NodeInfo:
		return event.SourceWatcher, true
	case event.RecorderCoverage:
		return event.SourceAgent, true
	case event.ClientFailure, event.ProxyState: // a client's log, a mesh proxy's: imported, no agent's
		return event.SourceClient, true
	}
	return "", false
}

// ClusterWide reports whether an agent may record events of kind k about
// pods on any node: an EndpointSlice's transitions (in all-nodes mode
// every agent records every endpoint, in leader mode the lease holder
// does), a workload's and a Service's changes. Handler places the pods of
// every other kind that names one.
func ClusterWide(k event.Kind) bool {
	return k.IsEndpoint() || k == event.WorkloadChanged || k == event.ServiceChanged
}

// Handler takes agents' events: POST Batch as JSON (gzip allowed) with
// "Authorization: Bearer TOKEN", the agent pod's service account token.
//
// Each event's node must be the token's node: an event naming another node
// refuses the whole batch (403, naming the event and both nodes) and
// nothing of it is stored, since an agent that sends one is broken or
// forging. An event with no node is stamped with the token's. Every event
// is then sealed again, so its ID is that of what it says, node included:
// an agent cannot send another node's ID to pre-empt its event.
//
// Each kind is taken only from its own source (KindSource): the analysis
// goes by the kind, so a signal sent as a watcher's or a dataplane event
// would be read as the kernel's. Client failures are no agent's: they have
// their own endpoint and token (ingest).
//
// An event naming a pod must also be about a pod of the token's node, when
// Pods is set, whatever its source: the analysis attaches events to pods
// (by UID, else by namespace/name), so without this an agent could forge a
// SIGKILL, an exit or a container's end of a pod elsewhere under its own
// node's name. An event whose pod Pods places on another node, whose UID
// is another pod's name, or whose name (with a UID Pods does not know) is
// that of a pod on another node refuses the batch like an event of another
// node (403, naming the event, the pod and both nodes). A pod Pods does
// not know at all (it ended before the index saw it, or longer ago than
// the index remembers, or it is so new that the index's watch is behind
// the agent's) is let through and counted in Stats.Unplaced: the index
// cannot say where it ran. The kinds an agent records about pods of every
// node (ClusterWide: an EndpointSlice's transitions, recorded by every
// agent in all-nodes mode and by the lease holder in leader mode; a
// workload's or a Service's changes) are not placed.
//
// A kernel event's local address, and a pod's readiness's (ReadsLocal),
// must be an address of a pod of the token's node at the event's time, or
// no pod's address at all (checkLocal, over Pods' Holders): the analysis
// gives a pod the addresses its events name, and with them the failures of
// the clients that dialled them, and reads a kernel event with no pod as
// proof of a failure on the pod that held its address. An address a pod of
// another node held at the event's time, or within minutes of it (the
// analysis gives an address to the nearest holder within two), refuses the
// batch (403, naming the address, the pod and both nodes). The remote
// address is not checked: a node's sockets talk to pods on every node.
//
// What the checks cannot tell: a cluster-wide event is about the cluster,
// not the node, and carries the recording agent's node, so a compromised
// node's agent can still write endpoint transitions about pods elsewhere,
// under its own node's name, never under another's. The same holds for
// dataplane events: a node's proxy rules name endpoints on every node.
//
// The store is written by this process only. At most MaxConcurrent batches
// are taken at once, holding at most MaxEventsInFlight events among them,
// merged into at most MergeWriters store writes; past that, a batch waits
// up to SlotWait for a slot and room, then is answered 429 with
// Retry-After (the store is behind), and the agent keeps it and retries.
type Handler struct {
	Store store.Store
	Auth  Authenticator
	// Pods, when set, places the pods events name (PodIndex); nil: only
	// the events' node is checked.
	Pods          PodLocator
	MaxBytes      int64 // 0: DefaultMaxBytes
	MaxEvents     int   // 0: DefaultMaxEvents
	MaxConcurrent int   // 0: DefaultMaxConcurrent
	// MaxEventsInFlight bounds the events of the batches taken at once
	// (0: DefaultMaxEventsInFlight): a batch in the wire form takes the
	// count its header announces, one in JSON MaxEvents.
	MaxEventsInFlight int
	// SlotWait is how long a batch waits for one of MaxConcurrent slots
	// before it is answered 429 (0: DefaultSlotWait; negative: not at all).
	SlotWait time.Duration
	// MaxAge and MaxAhead bound an event's time around the server's clock
	// (0: DefaultMaxAge, DefaultMaxAhead).
	MaxAge, MaxAhead time.Duration
	BodyTimeout      time.Duration
	Log              *slog.Logger
	Now              func() time.Time // the clock; nil: time.Now
	// Stages, when set, is told how long each stage of a batch took (the
	// Stage constants), so that an operator can see what holds the slots
	// when agents are answered 429: the review, the wait for a slot and
	// room, the body, placing the pods, the wait for a merged write, or
	// the write. A stage a batch did not reach is not reported.
	Stages func(stage string, d time.Duration)

	semOnce sync.Once
	sem     chan struct{}
	room    *semaphore.Weighted // MaxEventsInFlight
	budget  int64

	stored, events, refused, failed, unplaced atomic.Int64

	// Batches waiting for a store write, merged into one (see append).
	mergeOnce sync.Once
	writers   chan struct{}
	qmu       sync.Mutex
	queue     []*queued
}

// MergeWriters is how many merged store writes run at once.
const MergeWriters = 2

// The stages of a batch, as Handler.Stages names them.
const (
	StageReview = "review" // authenticating the token (a TokenReview, or its cache)
	StageSlot   = "slot"   // waiting for one of MaxConcurrent slots (SlotWait at most)
	StageBody   = "body"   // receiving and decoding the body
	StageCheck  = "check"  // the node check and placing the events' pods
	StageQueue  = "queue"  // waiting for a merged store write to take the batch
	StageWrite  = "write"  // the store write that carried it
)

// queued is one request's batch, waiting to be stored.
type queued struct {
	evs  []event.Event
	at   time.Time // when it was queued
	done chan written
}

// written answers a queued batch: the store's error, how long the batch
// waited to be taken and how long the write that carried it took.
type written struct {
	err          error
	queue, write time.Duration
}

// append stores evs together with the batches other agents posted
// meanwhile, in one store write (one COPY and one commit in Postgres):
// with thousands of agents each posting a few events every 200 ms, a
// transaction per batch is what the store cannot keep up with, not the
// events. The request that finds a writer free writes everything queued
// (up to MaxEvents, then again); the others wait for its answer. When the
// merged write is refused for one row (store.RowLevel), each batch is
// written alone, so that only the agent that sent the bad event hears of
// it.
func (h *Handler) append(ctx context.Context, evs []event.Event) written {
	h.mergeOnce.Do(func() { h.writers = make(chan struct{}, MergeWriters) })
	q := &queued{evs: evs, at: time.Now(), done: make(chan written, 1)}
	h.qmu.Lock()
	h.queue = append(h.queue, q)
	h.qmu.Unlock()
	for {
		select {
		case w := <-q.done:
			return w
		default:
		}
		select {
		case w := <-q.done:
			return w
		case h.writers <- struct{}{}:
			h.flush(ctx)
			<-h.writers
		}
	}
}

// flush writes what is queued, as one batch of at most MaxEvents events
// (a single larger batch alone).
func (h *Handler) flush(ctx context.Context) {
	limit := h.MaxEvents
	if limit <= 0 {
		limit = DefaultMaxEvents
	}
	h.qmu.Lock()
	var take []*queued
	n := 0
	for len(h.queue) > 0 && (len(take) == 0 || n+len(h.queue[0].evs) <= limit) {
		take = append(take, h.queue[0])
		n += len(h.queue[0].evs)
		h.queue[0] = nil
		h.queue = h.queue[1:]
	}
	h.qmu.Unlock()
	if len(take) == 0 {
		return
	}
	taken := time.Now()
	// answer tells each batch its error and its two stages: the write
	// timed from start, its wait until the merged write took it.
	answer := func(q *queued, err error, start time.Time) {
		q.done <- written{err: err, queue: taken.Sub(q.at), write: time.Since(start)}
	}
	// Not this request's context alone: its client going away must not
	// fail the others' events.
	timeout := h.BodyTimeout
	if timeout <= 0 {
		timeout = DefaultBodyTimeout
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if len(take) == 1 {
		answer(take[0], h.Store.Append(wctx, take[0].evs), taken)
		return
	}
	merged := make([]event.Event, 0, n)
	for _, q := range take {
		merged = append(merged, q.evs...)
	}
	err := h.Store.Append(wctx, merged)
	if err != nil && store.RowLevel(err) {
		for _, q := range take {
			answer(q, h.Store.Append(wctx, q.evs), taken)
		}
		return
	}
	for _, q := range take {
		answer(q, err, taken)
	}
}

// stage reports one stage of a batch to Stages, when set.
func (h *Handler) stage(name string, since time.Time) time.Time {
	now := time.Now()
	if h.Stages != nil {
		h.Stages(name, now.Sub(since))
	}
	return now
}

// Stats counts what a Handler did with the batches it was sent.
type Stats struct {
	Stored   int64 // batches stored
	Events   int64 // events in them
	Refused  int64 // batches refused for the token or what they say (4xx but 429)
	Failed   int64 // batches not stored for the server's sake: 429, 503 (the agent retries)
	Unplaced int64 // stored events whose pod Pods could not place
}

// Stats reports the counts so far.
func (h *Handler) Stats() Stats {
	return Stats{Stored: h.stored.Load(), Events: h.events.Load(), Refused: h.refused.Load(),
		Failed: h.failed.Load(), Unplaced: h.unplaced.Load()}
}

// String is one line of the counts.
func (s Stats) String() string {
	out := fmt.Sprintf("%d batches stored (%d events), %d refused, %d to retry", s.Stored, s.Events, s.Refused, s.Failed)
	if s.Unplaced > 0 {
		out += fmt.Sprintf(", %d events of pods the server could not place", s.Unplaced)
	}
	return out
}

// KnownToken reports whether token is one Auth has already accepted and
// still holds (TokenReviewer.Known): the web server lets it through from
// an address other callers got blocked, at no TokenReview's cost.
func (h *Handler) KnownToken(token string) bool {
	k, ok := h.Auth.(interface{ Known(string) bool })
	return ok && k.Known(token)
}

func (h *Handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &counting{ResponseWriter: rw}
	defer func() {
		switch {
		case w.code == http.StatusOK:
		case w.code == http.StatusTooManyRequests || w.code >= 500:
			h.failed.Add(1)
		default:
			h.refused.Add(1)
		}
	}()
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	w.Header().Set("Accept-Post", acceptPost)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, Refusal{Error: "use POST"})
		return
	}
	if h.Auth == nil || h.Store == nil {
		writeJSON(w, http.StatusServiceUnavailable, Refusal{Error: "agent writes are not configured on this server"})
		return
	}
	t := time.Now()
	agent, err := h.Auth.Authenticate(r.Context(), httpauth.Bearer(r))
	t = h.stage(StageReview, t)
	if err != nil {
		if ae, ok := asAuthError(err); ok {
			if ae.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="drainscope"`)
			}
			writeJSON(w, ae.Status, Refusal{Error: ae.Msg})
			return
		}
		log.Warn("agent events: authenticating", "err", err)
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, Refusal{Error: "the token could not be reviewed; retry later"})
		return
	}
	// A slot, then room for the batch's events (once its header says how
	// many): both waited for until SlotWait has passed, then 429.
	wait := h.SlotWait
	if wait == 0 {
		wait = DefaultSlotWait
	}
	t = time.Now()
	deadline := t.Add(max(wait, 0))
	release, ok := h.acquire(r.Context(), deadline)
	slotWait := time.Since(t)
	if !ok {
		h.stage(StageSlot, t)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, Refusal{Error: fmt.Sprintf("%d batches are being stored; retry later", cap(h.sem))})
		return
	}
	defer release()
	timeout := h.BodyTimeout
	if timeout <= 0 {
		timeout = DefaultBodyTimeout
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))

	var held int64             // events of the budget this batch holds
	var roomWait time.Duration // waiting for them
	defer func() { h.releaseEvents(held) }()
	admit := func(n int64) bool {
		t0 := time.Now()
		ok := h.takeEvents(r.Context(), n, deadline)
		roomWait = time.Since(t0)
		if ok {
			held = n
		}
		return ok
	}
	t = time.Now()
	evs, out := h.receive(w, r, agent, admit)
	// The events are checked as they are decoded: the body's stage is
	// the time of the two less the checks' and the wait for room.
	if h.Stages != nil {
		h.Stages(StageSlot, slotWait+roomWait)
		if out.status != http.StatusTooManyRequests {
			h.Stages(StageBody, time.Since(t)-out.check-roomWait)
			h.Stages(StageCheck, out.check)
		}
	}
	switch {
	case out.status == http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, out.status, Refusal{Error: out.msg})
		return
	case out.status == http.StatusServiceUnavailable:
		log.Warn("agent events: placing pods", "err", out.msg)
		w.Header().Set("Retry-After", "5")
		writeJSON(w, out.status, Refusal{Error: out.msg})
		return
	case out.status != 0 && out.event >= 0:
		i := out.event
		log.Warn("agent events: batch refused", "node", agent.Node, "pod", agent.PodNamespace+"/"+agent.Pod, "event", i, "err", out.msg)
		writeJSON(w, out.status, Refusal{Error: out.msg, Event: &i})
		return
	case out.status != 0:
		writeJSON(w, out.status, Refusal{Error: out.msg})
		return
	}
	if len(evs) > 0 {
		wr := h.append(r.Context(), evs)
		if h.Stages != nil {
			h.Stages(StageQueue, wr.queue)
			h.Stages(StageWrite, wr.write)
		}
		if err := wr.err; err != nil {
			if store.RowLevel(err) {
				writeJSON(w, http.StatusBadRequest, Refusal{Error: "the store refused the batch: " + err.Error()})
				return
			}
			log.Warn("agent events: storing", "node", agent.Node, "events", len(evs), "err", err)
			w.Header().Set("Retry-After", "5")
			writeJSON(w, http.StatusServiceUnavailable, Refusal{Error: "the store failed; nothing was stored, retry later"})
			return
		}
	}
	h.stored.Add(1)
	h.events.Add(int64(len(evs)))
	h.unplaced.Add(int64(out.unplaced))
	writeJSON(w, http.StatusOK, Result{Stored: len(evs)})
}

// counting keeps the status a response was answered with.
type counting struct {
	http.ResponseWriter
	code int
}

func (c *counting) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *counting) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// MaxEventBytes bounds one event's JSON in a batch: the strings' bounds
// (event.Bounds, the attributes' 64 KiB) escaped at worst, with room to
// spare. The decoder holds one event at a time; this bounds what it holds.
const MaxEventBytes = 512 << 10

// outcome is what receive made of a body: status non-zero refuses the
// batch, with msg, and names the event refused when event >= 0; check is
// the time the checks of the events took, unplaced the events whose pod
// the index could not place.
type outcome struct {
	status   int
	msg      string
	event    int
	unplaced int
	check    time.Duration
}

// receive decodes the body as it streams, event by event, and checks each
// one as it comes (check): the first event past MaxEvents, the first
// longer than MaxEventBytes, the first with a string past its bound
// (event.CheckBounds) or refused by the checks refuses the batch there,
// before the rest of the body is read. A small gzip body can expand to
// millions of events; none past the first refused is ever allocated.
//
// The body is JSON (Batch), or the wire form (event.WireType) when its
// Content-Type says so.
//
// Before the first event is decoded, admit is asked for room for the
// batch's events: the count the wire form's header announces (the reader
// holds the body to it), or MaxEvents for JSON, which announces none. A
// batch admit refuses is answered 429.
func (h *Handler) receive(w http.ResponseWriter, r *http.Request, agent Agent, admit func(events int64) bool) (evs []event.Event, out outcome) {
	out.event = -1
	limit := h.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	max := h.MaxEvents
	if max <= 0 {
		max = DefaultMaxEvents
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, limit)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, outcome{status: http.StatusBadRequest, msg: "reading the gzip body: " + err.Error(), event: -1}
		}
		body = &limitReader{r: zr, left: limit}
	default:
		return nil, outcome{status: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("content encoding %q: send identity or gzip", enc), event: -1}
	}
	refuse := func(i int, err error) ([]event.Event, outcome) {
		out.status, out.event = http.StatusBadRequest, -1
		if errors.As(err, new(batchError)) {
			i = -1
		}
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe) || errors.Is(err, errTooLarge):
			out.status, out.msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes; nothing was stored (send smaller batches)", limit)
		case errors.Is(err, errEventTooLarge) || errors.Is(err, event.ErrWireTooLarge):
			out.status, out.event = http.StatusRequestEntityTooLarge, i
			out.msg = fmt.Sprintf("event %d: more than %d bytes; nothing was stored", i, MaxEventBytes)
		case errors.Is(err, os.ErrDeadlineExceeded):
			out.status, out.msg = http.StatusRequestTimeout, "the body did not arrive in time; nothing was stored"
		case i >= 0:
			out.event, out.msg = i, fmt.Sprintf("decoding event %d: %v; nothing was stored", i, err)
		default:
			out.msg = "decoding the batch: " + err.Error() + "; nothing was stored"
		}
		return nil, out
	}
	var src eventStream
	size := 64 // events kept before the slice grows
	room := int64(max)
	switch ct := mediaType(r.Header.Get("Content-Type")); ct {
	case event.WireType:
		count, err := event.ReadWireHeader(body)
		if err != nil {
			return refuse(-1, err)
		}
		// One past MaxEvents is the most the reader decodes: the batch
		// is refused there.
		room = int64(min(count, max+1))
		need := room
		if need == 0 {
			need = 1 // an empty batch takes one all the same
		}
		if !admit(need) {
			return nil, h.busy(need)
		}
		src = event.NewWireRecords(body, count, MaxEventBytes)
		// The count the header announces, up to what a few hundred
		// kilobytes hold: past that, the slice grows to it once the
		// body has brought that many (below).
		size = min(count, max+1, 1024)
	case "", "application/json":
		if !admit(room) {
			return nil, h.busy(room)
		}
		js, err := newJSONStream(body)
		if err != nil {
			return refuse(-1, err)
		}
		src = js
	default:
		return nil, outcome{status: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("content type %q: send %s", ct, acceptPost), event: -1}
	}
	now := h.now()
	evs = make([]event.Event, 0, size)
	for i := 0; ; i++ {
		if i == cap(evs) {
			if wr, ok := src.(*event.WireReader); ok && wr.Count() > i {
				evs = slices.Grow(evs, min(wr.Count(), max+1)-i)
			}
		}
		evs = append(evs, event.Event{})
		e := &evs[i]
		if err := src.Next(e); err == io.EOF {
			return evs[:i], out
		} else if err != nil {
			return refuse(i, err)
		}
		if i == max {
			out.status, out.event = http.StatusRequestEntityTooLarge, -1
			out.msg = fmt.Sprintf("more than the %d events taken in one batch; nothing was stored", max)
			return nil, out
		}
		t := time.Now()
		placed, status, msg := h.check(i, e, agent, now)
		out.check += time.Since(t)
		if status != 0 {
			out.status, out.msg, out.event = status, msg, i
			if status == http.StatusServiceUnavailable {
				out.event = -1
			}
			return nil, out
		}
		if !placed {
			out.unplaced++
		}
	}
}

// acceptPost names the bodies Handler takes, for the Accept-Post header
// of its every answer: an agent sends the wire form once it has seen it
// there, and JSON to a server that does not name it.
const acceptPost = "application/json, " + event.WireType

// mediaType is a Content-Type's type, lower case, without parameters.
func mediaType(ct string) string {
	t, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(t))
}

// eventStream yields a body's events one at a time, io.EOF after the last.
type eventStream interface {
	Next(*event.Event) error
}

// jsonStream reads Batch's JSON event by event, holding at most
// MaxEventBytes of one event at a time (eventBudget).
type jsonStream struct {
	dec *json.Decoder
	// inArray: within "events"' array; seen: "events" was read.
	inArray, seen bool
}

func newJSONStream(body io.Reader) (*jsonStream, error) {
	budget := &eventBudget{r: body, max: MaxEventBytes}
	dec := json.NewDecoder(budget)
	budget.dec = dec
	dec.DisallowUnknownFields()
	js := &jsonStream{dec: dec}
	if err := js.delim('{', "the batch"); err != nil {
		return nil, err
	}
	return js, nil
}

func (js *jsonStream) delim(want json.Delim, what string) error {
	tok, err := js.dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("%s: want %q, got %v", what, want, tok)
	}
	return nil
}

func (js *jsonStream) Next(e *event.Event) error {
	if err := js.advance(); err != nil {
		return err
	}
	return js.dec.Decode(e)
}

// advance reads the batch's structure up to the next event, or to its end
// (io.EOF); an error is the batch's (batchError), not an event's.
func (js *jsonStream) advance() error {
	for {
		if js.inArray {
			if js.dec.More() {
				return nil
			}
			js.inArray = false
			if err := js.delim(']', `field "events"`); err != nil {
				return batchError{err}
			}
		}
		if !js.dec.More() {
			if err := js.delim('}', "the batch"); err != nil {
				return batchError{err}
			}
			return io.EOF
		}
		tok, err := js.dec.Token()
		if err != nil {
			return batchError{err}
		}
		// encoding/json's own matching of the field name, as Batch's was.
		if key, _ := tok.(string); !strings.EqualFold(key, "events") {
			return batchError{fmt.Errorf("json: unknown field %q", key)}
		}
		if js.seen {
			return batchError{errors.New(`field "events" twice`)}
		}
		js.seen = true
		if tok, err = js.dec.Token(); err != nil {
			return batchError{err}
		}
		if tok == nil {
			continue // "events": null
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return batchError{fmt.Errorf(`field "events": want an array, got %v`, tok)}
		}
		js.inArray = true
	}
}

// batchError is an error in a body's structure, outside any one event.
type batchError struct{ error }

func (e batchError) Unwrap() error { return e.error }

// check stamps and seals event i for agent, or refuses it: 400 for one
// with a string past its bound or that is not valid, 403 for an event of
// another node, of a source agents do not record, of a kind its source
// does not record, or about a pod on another node; 503 when the pods
// cannot be placed yet. placed is false for an event whose pod the index
// does not know.
func (h *Handler) check(i int, e *event.Event, agent Agent, now time.Time) (placed bool, status int, msg string) {
	// First, and without echoing the event's strings: any may be long.
	if err := e.CheckBounds(); err != nil {
		return false, http.StatusBadRequest, fmt.Sprintf("event %d: %v; nothing was stored", i, err)
	}
	if e.Node == "" {
		e.Node = agent.Node
	}
	if e.Node != agent.Node {
		return false, http.StatusForbidden, fmt.Sprintf("event %d (kind %s, time %d) is node %q's, but the token is node %q's; nothing was stored",
			i, e.Kind, e.Time, e.Node, agent.Node)
	}
	if !agentSources[e.Source] {
		return false, http.StatusForbidden, fmt.Sprintf("event %d (kind %s, time %d): source %q is not an agent's; nothing was stored",
			i, e.Kind, e.Time, e.Source)
	}
	// An unknown kind is Validate's to refuse, below.
	if src, ok := KindSource(e.Kind); e.Kind.Valid() && (!ok || !agentSources[src]) {
		return false, http.StatusForbidden, fmt.Sprintf("event %d (kind %s, time %d): kind %s is no agent's to send (client failures and proxies' logs are imported); nothing was stored",
			i, e.Kind, e.Time, e.Kind)
	} else if ok && src != e.Source {
		return false, http.StatusForbidden, fmt.Sprintf("event %d (kind %s, time %d): kind %s comes from source %s only, not %s; nothing was stored",
			i, e.Kind, e.Time, e.Kind, src, e.Source)
	}
	if msg := h.checkTime(e, now); msg != "" {
		return false, http.StatusBadRequest, fmt.Sprintf("event %d (kind %s): %s; nothing was stored", i, e.Kind, msg)
	}
	placed = true
	if h.Pods != nil && !e.Pod.IsZero() && !ClusterWide(e.Kind) {
		var status int
		var msg string
		placed, status, msg = h.placePod(i, e, agent)
		if status != 0 {
			return false, status, msg
		}
	}
	if h.Pods != nil && ReadsLocal(e.Kind) && e.Local.IsValid() {
		if status, msg := h.checkLocal(i, e, agent); status != 0 {
			return false, status, msg
		}
	}
	e.Seal()
	if err := e.Validate(); err != nil {
		return false, http.StatusBadRequest, fmt.Sprintf("event %d (kind %s, time %d): %v; nothing was stored", i, e.Kind, e.Time, err)
	}
	return placed, 0, ""
}

// ReadsLocal reports whether the analysis reads the local address of an
// event of kind k as an address of the node that recorded it: its pod's
// (the analysis gives the pod the address, and with it the failures of
// the clients that dialled it), or, for a kernel event with no pod, the
// address whose clients' failures the event proves (a refused SYN, a
// reset). An endpoint's address is any node's pod's.
func ReadsLocal(k event.Kind) bool {
	return k.IsKernel() || k == event.PodReady || k == event.PodNotReady
}

// How the tenures of an address are read for an event at time t: a pod
// of the token's node held the address then if its tenure, widened by
// ownBefore and ownAfter, covers t; a pod of another node stands in the
// way if its tenure comes within otherReach of t.
const (
	// ownBefore: the nodes' clocks against the API server's.
	ownBefore = time.Minute
	// ownAfter: an agent names an ended pod in its kernel events for two
	// minutes after the pod is gone (its cache's linger), and the clocks.
	ownAfter = 3 * time.Minute
	// otherReach: the analysis gives an address to the pod that held it,
	// else to the nearest that held it within two minutes (its Retain);
	// and the clocks.
	otherReach = 5 * time.Minute
)

// checkLocal refuses event i when its local address is one a pod of
// another node held at its time or near it, and no pod of agent's node
// held it then: 403 naming the address, the pod and both nodes. An
// address no pod is known to have held (a node's own, a Service's, one
// of a pod the index never saw) is let through.
func (h *Handler) checkLocal(i int, e *event.Event, agent Agent) (status int, msg string) {
	ip := e.Local.Addr().Unmap()
	ts, err := h.Pods.Holders(ip)
	if err != nil {
		return http.StatusServiceUnavailable, "placing the events' addresses: " + err.Error() + "; nothing was stored, retry later"
	}
	t := e.Time
	var other *AddrTenure
	for j := range ts {
		a := &ts[j]
		switch {
		case a.Pod.Node == agent.Node:
			if a.From-int64(ownBefore) <= t && (a.To == 0 || t <= a.To+int64(ownAfter)) {
				return 0, ""
			}
		case a.Pod.Node != "":
			if a.From-int64(otherReach) <= t && (a.To == 0 || t <= a.To+int64(otherReach)) {
				other = a
			}
		}
	}
	if other == nil {
		return 0, ""
	}
	held := "holds it"
	if other.To != 0 {
		held = "held it until " + time.Unix(0, other.To).UTC().Format(time.RFC3339Nano)
	}
	return http.StatusForbidden, fmt.Sprintf("event %d (kind %s, time %d): local address %s is pod %s/%s's (uid %q), on node %q, which %s; no pod of node %q held it then; the token is node %q's; nothing was stored",
		i, e.Kind, e.Time, ip, other.Pod.Namespace, other.Pod.Name, other.Pod.UID, other.Pod.Node, held, agent.Node, agent.Node)
}

// checkTime says what is wrong with e's time, "" when it is within
// MaxAge before now and MaxAhead after. An event from 1970 or 2261 would
// sit where no one looks for it, or ahead of every window, and an old one
// is about pods the index no longer remembers.
func (h *Handler) checkTime(e *event.Event, now time.Time) string {
	age, ahead := cmp.Or(h.MaxAge, DefaultMaxAge), cmp.Or(h.MaxAhead, DefaultMaxAhead)
	at := time.Unix(0, e.Time)
	switch d := now.Sub(at); {
	case d > age:
		return fmt.Sprintf("field time: %s is %v before the server's clock, more than the %v taken", at.UTC().Format(time.RFC3339Nano), d.Round(time.Second), age)
	case -d > ahead:
		return fmt.Sprintf("field time: %s is %v past the server's clock, more than the %v taken", at.UTC().Format(time.RFC3339Nano), (-d).Round(time.Second), ahead)
	}
	return ""
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// placePod checks that event i's pod is on agent's node. placed is false
// when Pods does not know the pod.
func (h *Handler) placePod(i int, e *event.Event, agent Agent) (placed bool, status int, msg string) {
	ref := e.Pod
	refuse := func(why string) (bool, int, string) {
		pod := fmt.Sprintf("pod %s (uid %q)", ref, ref.UID)
		if ref.Name == "" {
			pod = fmt.Sprintf("the pod of uid %q", ref.UID)
		}
		return false, http.StatusForbidden, fmt.Sprintf("event %d (kind %s, time %d) is about %s, %s; the token is node %q's; nothing was stored",
			i, e.Kind, e.Time, pod, why, agent.Node)
	}
	p, ok, err := h.Pods.Place(ref)
	if err != nil {
		return false, http.StatusServiceUnavailable, "placing the events' pods: " + err.Error() + "; nothing was stored, retry later"
	}
	if ok {
		switch {
		case ref.Name != "" && (p.Namespace != ref.Namespace || p.Name != ref.Name):
			return refuse(fmt.Sprintf("but that UID is pod %s/%s's, on node %q", p.Namespace, p.Name, p.Node))
		case p.Node == "":
			return false, 0, "" // not bound yet as far as the index knows
		case p.Node != agent.Node:
			return refuse(fmt.Sprintf("which is on node %q", p.Node))
		}
		return true, 0, ""
	}
	// A UID the index does not know, with a name: refused when that name is
	// a pod's on another node, as an agent's own pods are known by name
	// and UID alike.
	if ref.UID != "" && ref.Name != "" {
		p, ok, err := h.Pods.Place(event.PodRef{Namespace: ref.Namespace, Name: ref.Name})
		if err != nil {
			return false, http.StatusServiceUnavailable, "placing the events' pods: " + err.Error() + "; nothing was stored, retry later"
		}
		if ok && p.Node != "" && p.Node != agent.Node {
			return refuse(fmt.Sprintf("a UID the server does not know, while pod %s/%s (uid %q) is on node %q", p.Namespace, p.Name, p.UID, p.Node))
		}
	}
	return false, 0, ""
}

// init makes the slots and the budget of events once.
func (h *Handler) init() {
	h.semOnce.Do(func() {
		n := h.MaxConcurrent
		if n <= 0 {
			n = DefaultMaxConcurrent
		}
		h.sem = make(chan struct{}, n)
		h.budget = int64(h.MaxEventsInFlight)
		if h.budget <= 0 {
			h.budget = DefaultMaxEventsInFlight
		}
		// A batch of MaxEvents must fit, or it would wait forever.
		h.budget = max(h.budget, int64(h.maxEvents())+1)
		h.room = semaphore.NewWeighted(h.budget)
	})
}

func (h *Handler) maxEvents() int {
	if h.MaxEvents > 0 {
		return h.MaxEvents
	}
	return DefaultMaxEvents
}

// acquire takes one of MaxConcurrent slots, waiting for one until
// deadline (or ctx is done). A batch waiting holds no more than its
// goroutine: its body is read once it has a slot.
func (h *Handler) acquire(ctx context.Context, deadline time.Time) (release func(), ok bool) {
	h.init()
	select {
	case h.sem <- struct{}{}:
		return func() { <-h.sem }, true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case h.sem <- struct{}{}:
		return func() { <-h.sem }, true
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, false
}

// takeEvents takes room for n events from the budget of MaxEventsInFlight,
// waiting until deadline (or ctx is done); releaseEvents gives it back.
// Batches wait their turn in order of arrival.
func (h *Handler) takeEvents(ctx context.Context, n int64, deadline time.Time) bool {
	h.init()
	if h.room.TryAcquire(n) {
		return true
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return h.room.Acquire(ctx, n) == nil
}

func (h *Handler) releaseEvents(n int64) {
	if n > 0 {
		h.room.Release(n)
	}
}

// busy is the outcome of a batch refused room for its events.
func (h *Handler) busy(n int64) outcome {
	return outcome{status: http.StatusTooManyRequests, event: -1,
		msg: fmt.Sprintf("room for %d more events is not free (%d are taken at once); retry later", n, h.budget)}
}

var (
	errTooLarge      = errors.New("body too large")
	errEventTooLarge = errors.New("event too large")
)

// eventBudget fails a read while the decoder holds more than max bytes it
// has not consumed: the decoder reads more only to complete the value it
// is decoding, so those bytes are that one value's, and a single event (or
// a string between events) of megabytes is refused before it is whole.
type eventBudget struct {
	r    io.Reader
	dec  *json.Decoder
	read int64
	max  int64
}

func (b *eventBudget) Read(p []byte) (int, error) {
	if b.dec != nil && b.read-b.dec.InputOffset() > b.max {
		return 0, errEventTooLarge
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
}

// limitReader fails once more than left bytes would be read: a bound on
// what a compressed body may expand to. It never hands on a byte past the
// bound, and fails every read after: a decoder reading value by value
// takes the bytes that come with an error and reports the error only when
// it needs more, so a body past the bound must never be whole.
type limitReader struct {
	r    io.Reader
	left int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		n, l.left = int(l.left), -1
		return n, errTooLarge
	}
	l.left -= int64(n)
	return n, err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
