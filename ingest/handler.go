package ingest

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"

	"github.com/drainscope/drainscope/internal/httpauth"
)

// ClientFailuresPath is where the web server mounts Handler.
const ClientFailuresPath = "/api/v1/client-failures"

// DefaultMaxBytes is Handler's body limit unless set otherwise.
const DefaultMaxBytes = 8 << 20

// DefaultLookback is how long before a request's earliest failure Handler
// reads pod and endpoint events to resolve pods.
const DefaultLookback = 24 * time.Hour

// Handler takes client failures over HTTP: POST a body in any import format
// (?format=NAME, jsonl by default; ?log_format=… for nginx; ?fail_status=…
// to change which statuses are failures) with "Authorization: Bearer
// TOKEN". A request is all or nothing: with any bad line nothing is stored
// and the answer (400) lists the lines; otherwise every failure is stored in
// one atomic append and the answer (200) counts them. Bodies may be gzip
// (Content-Encoding: gzip); MaxBytes bounds them before and after
// decompression.
type Handler struct {
	Store store.Store
	// Token is the bearer token clients must send. With none set the
	// handler refuses every request.
	Token    string
	MaxBytes int64         // 0: DefaultMaxBytes
	Lookback time.Duration // 0: DefaultLookback
	Options  Options       // defaults for FailStatus
	Log      *slog.Logger  // nil: slog.Default()
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
}

// RejectedLine is one bad line in an IngestError.
type RejectedLine struct {
	Line  int    `json:"line"`
	Field string `json:"field"`
	Error string `json:"error"`
}

var errTooLarge = errors.New("body too large")

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, IngestError{Error: "use POST"})
		return
	}
	if h.Token == "" {
		writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: "no ingest token is configured on this server"})
		return
	}
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="drainscope"`)
		writeJSON(w, http.StatusUnauthorized, IngestError{Error: "missing or wrong bearer token"})
		return
	}
	if h.Store == nil {
		writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: "no store configured"})
		return
	}
	q := r.URL.Query()
	name := q.Get("format")
	if name == "" {
		name = "jsonl"
	}
	f, err := LookupFormat(name)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, IngestError{Error: err.Error()})
		return
	}
	opts := h.Options
	opts.LogFormat = q.Get("log_format")
	if fs := q.Get("fail_status"); fs != "" {
		if opts.FailStatus, err = ParseCodeSet(fs); err != nil {
			writeJSON(w, http.StatusBadRequest, IngestError{Error: err.Error()})
			return
		}
	}
	parse, err := f.Parser(opts)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, IngestError{Error: err.Error()})
		return
	}
	limit := h.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, limit)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			h.bodyError(w, err)
			return
		}
		body = &limitReader{r: zr, left: limit}
	default:
		writeJSON(w, http.StatusUnsupportedMediaType, IngestError{Error: fmt.Sprintf("content encoding %q: send identity or gzip", enc)})
		return
	}

	// Read everything first: the request is all or nothing, and the pods are
	// resolved over the time range the failures span.
	var res IngestResult
	var recs []Record
	var bad []*LineError
	from, to := int64(0), int64(0)
	err = parse(body, func(rec *Record) error {
		res.Lines++
		switch {
		case rec.Err != nil:
			bad = append(bad, rec.Err)
		case !rec.Failed:
			res.Succeeded++
		default:
			c := *rec
			c.Attrs = maps.Clone(rec.Attrs)
			recs = append(recs, c)
			if from == 0 || c.Time < from {
				from = c.Time
			}
			to = max(to, c.Time)
		}
		return nil
	})
	if err != nil {
		h.bodyError(w, err)
		return
	}
	if len(bad) > 0 {
		e := IngestError{Error: fmt.Sprintf("%d of %d lines rejected; nothing was stored", len(bad), res.Lines)}
		for i, b := range bad {
			if i == MaxExamples {
				e.More = len(bad) - i
				break
			}
			e.Rejected = append(e.Rejected, RejectedLine{Line: b.Line, Field: b.Field, Error: b.Error()})
		}
		writeJSON(w, http.StatusBadRequest, e)
		return
	}
	res.Failed = len(recs)
	if len(recs) > 0 {
		lookback := h.Lookback
		if lookback <= 0 {
			lookback = DefaultLookback
		}
		resolver, err := LoadResolver(r.Context(), h.Store, event.Window{
			From: max(from-int64(lookback), 0), To: to + int64(DefaultLookahead) + 1,
		})
		if err != nil {
			log.Warn("ingest: resolving pods", "err", err)
			writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: "reading pod addresses from the store failed; retry later"})
			return
		}
		conv := newConverter(resolver)
		batch := make([]event.Event, 0, len(recs))
		for i := range recs {
			e, lerr := conv.event(&recs[i])
			if lerr != nil {
				writeJSON(w, http.StatusBadRequest, IngestError{Error: "nothing was stored", Rejected: []RejectedLine{{Line: lerr.Line, Field: lerr.Field, Error: lerr.Error()}}})
				return
			}
			if !e.Pod.IsZero() {
				res.Resolved++
			}
			batch = append(batch, e)
		}
		if err := h.Store.Append(r.Context(), batch); err != nil {
			log.Warn("ingest: storing client failures", "n", len(batch), "err", err)
			writeJSON(w, http.StatusServiceUnavailable, IngestError{Error: "the store failed; nothing was stored, retry later"})
			return
		}
		res.Stored = len(batch)
	}
	writeJSON(w, http.StatusOK, res)
}

// authorized compares the bearer token in constant time (over hashes, so
// the length does not leak either).
func (h *Handler) authorized(r *http.Request) bool {
	return httpauth.TokenOK(httpauth.Bearer(r), h.Token)
}

func (h *Handler) bodyError(w http.ResponseWriter, err error) {
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
