package ingest

import (
	"bytes"
	"compress/flate"
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
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"

	"github.com/drainscope/drainscope/internal/httpauth"
)

// ClientFailuresPath is where the web server mounts Handler.
const ClientFailuresPath = "/api/v1/client-failures"

// DefaultMaxBytes is Handler's body limit unless set otherwise (8 MiB), before
// and after gzip decompression.
const DefaultMaxBytes = 8 << 20

// DefaultLookback is how long before a request's earliest failure Handler
// reads pod and endpoint events to resolve pods.
const DefaultLookback = 24 * time.Hour

// DefaultMaxConcurrent is how many ingest requests Handler serves at once
// unless set otherwise; more are answered 503 with Retry-After.
const DefaultMaxConcurrent = 4

// DefaultHandlerBatch is how many failures Handler hands the store in one
// Append.
const DefaultHandlerBatch = 2000

// DefaultBodyTimeout bounds how long Handler waits for a request's body.
const DefaultBodyTimeout = 60 * time.Second

// DefaultMaxPast and DefaultMaxAhead bound the times ingest accepts: from
// 30 days before the clock to 1 day after it.
const (
	DefaultMaxPast  = 30 * 24 * time.Hour
	DefaultMaxAhead = 24 * time.Hour
)

// TimeWindow bounds the times accepted, around the clock at the time of
// reading: a record's time must lie within [now-Past, now+Ahead]. A zero
// field takes its default (DefaultMaxPast, DefaultMaxAhead); a negative
// one lifts that side's bound.
type TimeWindow struct {
	Past, Ahead time.Duration
	Now         func() time.Time // nil: time.Now
}

// check rejects rec when its time lies outside the window, naming the
// field and the bounds.
func (w TimeWindow) check(rec *Record) *LineError {
	if rec.Err != nil || !rec.Failed {
		return nil // only failures are stored; their times matter
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	past, ahead := w.Past, w.Ahead
	if past == 0 {
		past = DefaultMaxPast
	}
	if ahead == 0 {
		ahead = DefaultMaxAhead
	}
	t := now()
	ts := time.Unix(0, rec.Time).UTC()
	switch {
	case past > 0 && ts.Before(t.Add(-past)):
		return &LineError{Line: rec.Line, Field: "time", Msg: fmt.Sprintf("%s is %s before now, more than the %s accepted (--max-past)",
			ts.Format(time.RFC3339), roundAge(t.Sub(ts)), roundAge(past))}
	case ahead > 0 && ts.After(t.Add(ahead)):
		return &LineError{Line: rec.Line, Field: "time", Msg: fmt.Sprintf("%s is %s after now, more than the %s accepted (--max-ahead)",
			ts.Format(time.RFC3339), roundAge(ts.Sub(t)), roundAge(ahead))}
	}
	return nil
}

// roundAge prints d in days past two days, else in time.Duration's form
// rounded to the second.
func roundAge(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%dd", int64(d/(24*time.Hour)))
	}
	return d.Round(time.Second).String()
}

// Bounded returns p with every failure whose time lies outside w turned
// into a rejected line (field "time"): an importer or the ingest API then
// never writes far-off times, each of which would need a partition of its
// own in Postgres. So is a failure that names a Service, namespace or node
// longer than Kubernetes allows (the field named). The credentials of the
// URLs in a failure's texts are removed (StripURLCredentials).
func Bounded(p Parser, w TimeWindow) Parser {
	return func(r io.Reader, emit Emit) error {
		return p(r, func(rec *Record) error {
			lerr := w.check(rec)
			if lerr == nil {
				lerr = checkNames(rec)
			}
			stripCredentials(rec)
			if lerr != nil {
				line := rec.Line
				rec.reset(line)
				rec.Err = lerr
			}
			return emit(rec)
		})
	}
}

// Handler takes client failures over HTTP: POST a body in any import format
// (?format=NAME, jsonl by default; ?log_format=… for nginx; ?fail_status=…
// to change which statuses are failures; ?client_timeout=5s, the clients'
// timeout, for timeouts logged with no duration) with "Authorization: Bearer
// TOKEN". Bodies may be gzip (Content-Encoding: gzip); MaxBytes bounds them
// before and after decompression.
//
// A request with any bad line stores nothing: the body is read and checked
// whole first (every line parsed, every failure's time within Window and
// its event valid), answering 400 with the first MaxExamples bad lines and
// the count of the rest. Only a body with no bad line is parsed again from
// the copy kept while reading (at most MaxBytes; dropped at the first bad
// line) and its failures stored in batches of BatchSize, each atomic. When
// the store fails part way the answer is 503 with the count stored; since
// the same lines make the same events and the store keeps an event once, a
// retry of the same body completes it without storing anything twice.
// Memory per request is thus bounded by MaxBytes plus one batch, whatever
// the body holds, and at most MaxConcurrent requests are served at once.
type Handler struct {
	Store store.Store
	// Token is the bearer token clients must send to post client failures.
	// With neither it nor DataplaneToken set the handler refuses every
	// request.
	Token string
	// Formats names the formats taken (?format=); empty:
	// ClientFailureFormats(). A dataplane format (envoy-clusters) is taken
	// only when named here, and only with DataplaneToken.
	Formats []string
	// DataplaneToken is the bearer token for dataplane formats: a proxy's
	// routing feeds the measured lag and "out of rotation", so whoever
	// posts client failures may not post it. Never equal to Token.
	DataplaneToken string
	MaxBytes       int64         // 0: DefaultMaxBytes
	Lookback       time.Duration // 0: DefaultLookback
	Options        Options       // defaults for FailStatus
	Log            *slog.Logger  // nil: slog.Default()
	// Window bounds the failures' times (zero: 30 days back, 1 day ahead).
	Window TimeWindow
	// MaxConcurrent bounds requests served at once (0: DefaultMaxConcurrent);
	// the others are answered 503 with Retry-After at once.
	MaxConcurrent int
	// BatchSize is the most failures in one store.Append (0: DefaultHandlerBatch).
	BatchSize int
	// BodyTimeout bounds the reading of one body, however slowly the client
	// sends it (0: DefaultBodyTimeout). The server's ReadTimeout still holds.
	BodyTimeout time.Duration

	semOnce sync.Once
	sem     chan struct{}
}

// IngestResult is the body of a successful answer.
type IngestResult struct {
	Lines     int `json:"lines"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Stored    int `json:"stored"`
	Resolved  int `json:"resolved"`
}

// IngestError is the body of a refused request.
type IngestError struct {
	Error    string         `json:"error"`
	Rejected []RejectedLine `json:"rejected,omitempty"`
	More     int            `json:"more_rejected,omitempty"`
	// Stored counts the failures stored before the store failed part way.
	Stored int `json:"stored,omitempty"`
}

// RejectedLine is one bad line in an IngestError.
type RejectedLine struct {
	Line  int    `json:"line"`
	Field string `json:"field"`
	Error string `json:"error"`
}

var errTooLarge = errors.New("body too large")

// maxEventTime is the first time event.Validate refuses (2262: past it a
// day partition's bound overflows int64).
var maxEventTime = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// KnownToken reports whether token is one the handler takes (Token or
// DataplaneToken), compared in constant time: the web server lets such a
// token through from an address other callers got blocked.
func (h *Handler) KnownToken(token string) bool {
	return (h.Token != "" && httpauth.TokenOK(token, h.Token)) || (h.DataplaneToken != "" && httpauth.TokenOK(token, h.DataplaneToken))
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dataplane, ok := h.admit(w, r)
	if !ok {
		return
	}
	parse, ok := h.requestParser(w, r, dataplane)
	if !ok {
		return
	}
	// Past this point a request holds memory: bound how many do.
	release, ok := h.acquire()
	if !ok {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: fmt.Sprintf("%d ingest requests are being served; retry later", cap(h.sem))})
		return
	}
	defer release()
	body, ok := h.requestBody(w, r)
	if !ok {
		return
	}
	chk, err := checkBody(parse, body)
	if err != nil {
		h.bodyError(w, err)
		return
	}
	if chk.nbad > 0 {
		writeJSON(w, http.StatusBadRequest, IngestError{
			Error:    fmt.Sprintf("%d of %d lines rejected; nothing was stored", chk.nbad, chk.res.Lines),
			Rejected: chk.bad, More: chk.nbad - len(chk.bad),
		})
		return
	}
	if chk.res.Failed == 0 {
		writeJSON(w, http.StatusOK, chk.res)
		return
	}
	h.storeBody(w, r, parse, chk)
}

// admit answers a request that is no POST, or that the handler may not
// serve (no token configured, wrong token, no store); ok says it was not
// answered, and dataplane whether it carries the dataplane token.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) (dataplane, ok bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, IngestError{Error: "use POST"})
		return false, false
	}
	if h.Token == "" && h.DataplaneToken == "" {
		writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: "no ingest token is configured on this server"})
		return false, false
	}
	dataplane, ok = h.authorized(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="drainscope"`)
		writeJSON(w, http.StatusUnauthorized, IngestError{Error: "missing or wrong bearer token"})
		return false, false
	}
	if h.Store == nil {
		writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: "no store configured"})
		return false, false
	}
	return dataplane, true
}

// requestParser builds the parser the query names (?format=, ?log_format=,
// ?fail_status=, ?client_timeout=), bounded by Window, or answers why it
// cannot (ok false).
func (h *Handler) requestParser(w http.ResponseWriter, r *http.Request, dataplane bool) (parse Parser, ok bool) {
	q := r.URL.Query()
	name := q.Get("format")
	if name == "" {
		name = "jsonl"
	}
	f, err := LookupFormat(name)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, IngestError{Error: err.Error()})
		return nil, false
	}
	if msg := h.refuseFormat(f, dataplane); msg != "" {
		writeJSON(w, http.StatusForbidden, IngestError{Error: msg})
		return nil, false
	}
	opts := h.Options
	opts.LogFormat = q.Get("log_format")
	if fs := q.Get("fail_status"); fs != "" {
		if opts.FailStatus, err = ParseCodeSet(fs); err != nil {
			writeJSON(w, http.StatusBadRequest, IngestError{Error: err.Error()})
			return nil, false
		}
	}
	if ct := q.Get("client_timeout"); ct != "" {
		if opts.ClientTimeout, err = time.ParseDuration(ct); err != nil || opts.ClientTimeout <= 0 {
			writeJSON(w, http.StatusBadRequest, IngestError{Error: fmt.Sprintf("client_timeout %q: want a positive duration such as 5s", ct)})
			return nil, false
		}
	}
	parse, err = f.Parser(opts)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, IngestError{Error: err.Error()})
		return nil, false
	}
	return Bounded(parse, h.Window), true
}

// requestBody sets the body's read deadline (BodyTimeout) and returns it
// bounded by MaxBytes, decompressed when gzip, or answers an encoding it
// does not take (ok false).
func (h *Handler) requestBody(w http.ResponseWriter, r *http.Request) (body io.Reader, ok bool) {
	timeout := h.BodyTimeout
	if timeout <= 0 {
		timeout = DefaultBodyTimeout
	}
	// Not every ResponseWriter supports it (a test recorder); the server's
	// ReadTimeout still holds then.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))

	limit := h.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	body = http.MaxBytesReader(w, r.Body, limit)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			h.bodyError(w, err)
			return nil, false
		}
		body = &limitReader{r: zr, left: limit}
	default:
		writeJSON(w, http.StatusUnsupportedMediaType, IngestError{Error: fmt.Sprintf("content encoding %q: send identity or gzip", enc)})
		return nil, false
	}
	return body, true
}

// checked is what the first pass over a body found.
type checked struct {
	res      IngestResult
	bad      []RejectedLine // the first MaxExamples bad lines
	nbad     int
	copy     *spool // the body, while no line is bad
	from, to int64  // the time range the failures span
}

// checkBody is the first pass, as the body arrives: check every line, keep
// a copy of the body (not of its records: the body is their most compact
// form) while no line is bad, and the time range the failures span.
func checkBody(parse Parser, body io.Reader) (*checked, error) {
	c := &checked{copy: &spool{}}
	err := parse(io.TeeReader(body, c.copy), func(rec *Record) error {
		c.res.Lines++
		// What event.Validate could refuse of a client failure is only its
		// time (the rest is set by Record.Event and Seal): check that here,
		// without building the event, so the second pass cannot meet a
		// bad line after storing some batches.
		if rec.Err == nil && rec.Failed && (rec.Time <= 0 || rec.Time >= maxEventTime) {
			rec.Err = &LineError{Line: rec.Line, Field: "time", Msg: fmt.Sprintf("%d ns is outside 1970–2261, the range events are stored in", rec.Time)}
		}
		switch {
		case rec.Err != nil:
			c.nbad++
			c.copy.drop() // nothing will be stored: only count from here
			if len(c.bad) < MaxExamples {
				c.bad = append(c.bad, RejectedLine{Line: rec.Err.Line, Field: rec.Err.Field, Error: rec.Err.Error()})
			}
		case !rec.Failed:
			c.res.Succeeded++
		default:
			c.res.Failed++
			if c.from == 0 || rec.Time < c.from {
				c.from = rec.Time
			}
			c.to = max(c.to, rec.Time)
		}
		return nil
	})
	return c, err
}

// storeBody is the second pass, over the copy of a body checked whole:
// resolve pods, store in batches and answer.
func (h *Handler) storeBody(w http.ResponseWriter, r *http.Request, parse Parser, c *checked) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	res := c.res
	lookback := h.Lookback
	if lookback <= 0 {
		lookback = DefaultLookback
	}
	resolver, err := LoadResolver(r.Context(), h.Store, event.Window{
		From: max(c.from-int64(lookback), 0), To: c.to + int64(DefaultLookahead) + 1,
	})
	if err != nil {
		log.Warn("ingest: resolving pods", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: "reading pod addresses from the store failed; nothing was stored, retry later"})
		return
	}
	lineErr, err := h.storeBatches(r.Context(), parse, c.copy.reader(), newConverter(resolver), &res)
	switch {
	case lineErr != nil:
		writeJSON(w, http.StatusBadRequest, IngestError{Error: fmt.Sprintf("%d of %d failures were stored before a bad line", res.Stored, res.Failed),
			Rejected: []RejectedLine{{Line: lineErr.Line, Field: lineErr.Field, Error: lineErr.Error()}}, Stored: res.Stored})
		return
	case err != nil:
		log.Warn("ingest: storing client failures", "stored", res.Stored, "failed", res.Failed, "err", err)
		msg := "the store failed; nothing was stored, retry later"
		if res.Stored > 0 {
			msg = fmt.Sprintf("the store failed after %d of %d failures were stored; retry the same body: nothing is stored twice", res.Stored, res.Failed)
		}
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: msg, Stored: res.Stored})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// storeBatches parses body again and appends its failures to the store in
// batches of BatchSize, counting in res those stored and resolved. lineErr
// is a bad line met on the way (the first pass checked the same: not
// expected).
func (h *Handler) storeBatches(ctx context.Context, parse Parser, body io.Reader, conv *converter, res *IngestResult) (lineErr *LineError, err error) {
	bs := h.BatchSize
	if bs <= 0 {
		bs = DefaultHandlerBatch
	}
	batch := make([]event.Event, 0, min(bs, res.Failed))
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := h.Store.Append(ctx, batch); err != nil {
			return err
		}
		res.Stored += len(batch)
		clear(batch) // let the strings go
		batch = batch[:0]
		return nil
	}
	err = parse(body, func(rec *Record) error {
		if rec.Err != nil || !rec.Failed {
			return nil
		}
		e, lerr := conv.event(rec)
		if lerr != nil {
			lineErr = lerr // the first pass checked the same: not expected
			return lerr
		}
		if !e.Pod.IsZero() {
			res.Resolved++
		}
		batch = append(batch, e)
		if len(batch) >= bs {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return lineErr, err
}

// acquire takes one of MaxConcurrent slots without waiting.
func (h *Handler) acquire() (release func(), ok bool) {
	h.semOnce.Do(func() {
		n := h.MaxConcurrent
		if n <= 0 {
			n = DefaultMaxConcurrent
		}
		h.sem = make(chan struct{}, n)
	})
	select {
	case h.sem <- struct{}{}:
		return func() { <-h.sem }, true
	default:
		return nil, false
	}
}

// spool keeps a body, compressed (JSON and text logs shrink several times
// over at flate's fastest level), in 64 KiB chunks: no doubling copies while
// it grows, and dropped at once when it will not be read again. Holding the
// body between the check and the store is what an ingest costs in memory.
type spool struct {
	chunks  chunks
	zw      *flate.Writer
	dropped bool
}

func (s *spool) Write(p []byte) (int, error) {
	if s.dropped {
		return len(p), nil
	}
	if s.zw == nil {
		s.zw, _ = flate.NewWriter(&s.chunks, flate.BestSpeed) // the level is valid
	}
	return s.zw.Write(p)
}

func (s *spool) drop() { s.chunks, s.zw, s.dropped = nil, nil, true }

// reader reads the body back; call it once, after the last Write.
func (s *spool) reader() io.Reader {
	if s.zw == nil {
		return bytes.NewReader(nil)
	}
	if err := s.zw.Close(); err != nil {
		return errReader{err}
	}
	s.zw = nil
	return flate.NewReader(s.chunks.reader())
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// chunks is a byte store in 64 KiB pieces.
type chunks [][]byte

const spoolChunk = 64 << 10

func (c *chunks) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(*c) == 0 || len((*c)[len(*c)-1]) == spoolChunk {
			*c = append(*c, make([]byte, 0, spoolChunk))
		}
		last := &(*c)[len(*c)-1]
		k := min(len(p), spoolChunk-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

func (c chunks) reader() io.Reader {
	rs := make([]io.Reader, len(c))
	for i, b := range c {
		rs[i] = bytes.NewReader(b)
	}
	return io.MultiReader(rs...)
}

// authorized compares the bearer token in constant time (over hashes, so
// the length does not leak either).
// authorized says whether r carries one of the handler's tokens, and
// whether it was the dataplane one.
func (h *Handler) authorized(r *http.Request) (dataplane, ok bool) {
	b := httpauth.Bearer(r)
	if h.DataplaneToken != "" && httpauth.TokenOK(b, h.DataplaneToken) {
		return true, true
	}
	return false, h.Token != "" && httpauth.TokenOK(b, h.Token)
}

// refuseFormat says why f may not be posted with the token given (the
// dataplane token or the client-failure one), or "" when it may.
func (h *Handler) refuseFormat(f Format, dataplane bool) string {
	allowed := h.Formats
	if len(allowed) == 0 {
		allowed = ClientFailureFormats()
	}
	if !slices.Contains(allowed, f.Name) {
		return fmt.Sprintf("format %s is not taken here (this server takes %s; --ingest-formats)", f.Name, strings.Join(allowed, ", "))
	}
	switch {
	case f.PodLog():
		return fmt.Sprintf("format %s speaks for a pod's proxy: import it with drainscope import --pod, not over the API", f.Name)
	case f.Dataplane() && !dataplane:
		return fmt.Sprintf("format %s is a proxy's routing, not client failures: it needs the dataplane token (--ingest-dataplane-token)", f.Name)
	case !f.Dataplane() && dataplane:
		return fmt.Sprintf("the dataplane token posts dataplane formats only, not %s", f.Name)
	}
	return ""
}

func (h *Handler) bodyError(w http.ResponseWriter, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		writeJSON(w, http.StatusRequestTimeout, IngestError{Error: "the body did not arrive in time; nothing was stored"})
		return
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || errors.Is(err, errTooLarge) {
		limit := h.MaxBytes
		if limit <= 0 {
			limit = DefaultMaxBytes
		}
		writeJSON(w, http.StatusRequestEntityTooLarge, IngestError{Error: fmt.Sprintf("body larger than %d bytes; nothing was stored (split it)", limit)})
		return
	}
	writeJSON(w, http.StatusBadRequest, IngestError{Error: "reading the body: " + err.Error() + "; nothing was stored"})
}

// limitReader fails once more than left bytes were read: a bound on what a
// compressed body may expand to.
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
	l.left -= int64(n)
	if l.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
