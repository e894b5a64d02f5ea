package ingest

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// DefaultBatchSize is how many failures the importer hands the store at once.
const DefaultBatchSize = 5000

// MaxExamples is how many rejected lines a Summary keeps word for word.
const MaxExamples = 20

// Importer reads client logs and stores their failures.
type Importer struct {
	// Store receives the failures. With no store the importer only parses
	// and counts (a dry run).
	Store  store.Store
	Parser Parser
	// Strict stores nothing from an input that has any bad line; otherwise
	// good lines are stored and bad ones reported.
	Strict bool
	// BatchSize bounds each store.Append in the default mode; in strict
	// mode an input's failures go in one Append, so they land atomically.
	BatchSize int
	// Resolver attributes failures to pods. When nil and Store is set, it
	// is loaded from the store's pod and endpoint events at the first
	// failure.
	Resolver *Resolver
	// Progress, when set, is updated as inputs are read (for a progress bar).
	Progress *Progress
	// ParserFor, when set, gives the parser of the input called name in
	// place of Parser (envoy-clusters names each file's proxy after it).
	ParserFor func(name string) Parser
}

// RejectedError is returned for an input with bad lines in strict mode.
type RejectedError struct {
	File     string
	Rejected int
	First    *LineError
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%s: %d line(s) rejected, so nothing from it was stored (strict); first: %v", e.File, e.Rejected, e.First)
}

// Import reads one input called name (for messages) and stores its
// failures. It returns the input's summary; the error is non-nil when the
// input could not be read to the end, the store failed, or (strict) a line
// was rejected. What was stored before an error stays stored, except in
// strict mode where nothing is.
func (im *Importer) Import(ctx context.Context, name string, r io.Reader) (*Summary, error) {
	sum := newSummary(name)
	sum.DryRun = im.Store == nil
	p := im.Progress
	if p == nil {
		p = &Progress{}
	}
	p.start(name)
	in, err := decompress(&countingReader{r: r, n: &p.bytes})
	if err != nil {
		return sum, fmt.Errorf("%s: %w", name, err)
	}
	bs := im.BatchSize
	if bs <= 0 {
		bs = DefaultBatchSize
	}
	conv := newConverter(im.Resolver)
	var batch []event.Event
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if im.Store != nil {
			if err := im.Store.Append(ctx, batch); err != nil {
				return fmt.Errorf("%w %d failures: %w", errStore, len(batch), err)
			}
			sum.Stored += len(batch)
		}
		batch = batch[:0]
		return nil
	}
	parse := im.Parser
	if im.ParserFor != nil {
		parse = im.ParserFor(name)
	}
	err = parse(in, func(rec *Record) error {
		sum.Lines++
		p.lines.Add(1)
		if rec.Err != nil {
			rec.Err.File = name
			sum.reject(rec.Err)
			p.rejected.Add(1)
			return nil
		}
		if !rec.Failed {
			sum.Successes++
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if conv.res == nil && im.Store != nil && rec.Kind == "" {
			res, err := LoadResolver(ctx, im.Store, event.Window{})
			if err != nil {
				return err
			}
			im.Resolver, conv.res = res, res
		}
		e, lerr := conv.event(rec)
		if lerr != nil {
			lerr.File = name
			sum.reject(lerr)
			p.rejected.Add(1)
			return nil
		}
		switch {
		case rec.Kind == event.ProxyState:
			sum.States++
		case rec.Kind != "":
			sum.Changes++
		default:
			sum.Failures++
		}
		p.failures.Add(1)
		if !e.Pod.IsZero() {
			sum.Resolved++
		}
		batch = append(batch, e)
		if !im.Strict && len(batch) >= bs {
			return flush()
		}
		return nil
	})
	sum.Bytes = p.bytes.Load()
	if err != nil {
		if im.Strict {
			return sum, fmt.Errorf("%s: line %d: %w (strict: nothing from it was stored)", name, sum.Lines+1, err)
		}
		err = fmt.Errorf("%s: after line %d: %w", name, sum.Lines, err)
		if ctx.Err() == nil && !errors.Is(err, errStore) {
			// The lines read so far are good: keep them.
			if ferr := flush(); ferr != nil {
				return sum, errors.Join(err, ferr)
			}
		}
		return sum, err
	}
	if im.Strict && sum.Rejected > 0 {
		return sum, &RejectedError{File: name, Rejected: sum.Rejected, First: sum.Examples[0]}
	}
	if err := flush(); err != nil {
		return sum, err
	}
	return sum, nil
}

// converter turns failed records into sealed events: pod resolution, and an
// occurrence number that keeps identical failures in one input apart while
// letting a re-import of the same input store nothing twice.
type converter struct {
	res  *Resolver
	seen map[event.ID]int
}

func newConverter(res *Resolver) *converter {
	return &converter{res: res, seen: map[event.ID]int{}}
}

func (c *converter) event(rec *Record) (event.Event, *LineError) {
	e := rec.Event()
	// A proxy's name for its upstream (namespace-service-port) says the
	// Service, where it can be split one way only or one split is known.
	if e.Kind == event.ClientFailure && e.Service == "" {
		if name := rec.Attrs[AttrUpstreamName]; name != "" {
			var known func(string) bool
			if c.res != nil {
				known = c.res.KnownService
			}
			e.Service = UpstreamService(name, known)
		}
	}
	// A proxy's endpoint change names the endpoint only: the analysis finds
	// the pod that held the address then.
	if c.res != nil && rec.Kind == "" {
		ip, ok := backendAddr(rec.Backend)
		if !ok {
			ip = rec.Remote.Addr()
		}
		if o, ok := c.res.Lookup(ip, e.Time); ok {
			e.Pod, e.Workload = o.Pod, o.Workload
			if e.Service == "" {
				e.Service = o.Service
			}
		}
	}
	e.Seal()
	c.seen[e.ID]++
	if n := c.seen[e.ID]; n > 1 {
		if e.Attrs == nil {
			e.Attrs = map[string]string{}
		}
		e.Attrs[AttrOccurrence] = strconv.Itoa(n)
		e.Seal()
	}
	if err := e.Validate(); err != nil {
		return e, &LineError{Line: rec.Line, Field: "(event)", Msg: err.Error()}
	}
	return e, nil
}

// decompress sees through gzip, so rotated logs import as they are.
func decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(2)
	if len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("reading gzip: %w", err)
		}
		return bufio.NewReaderSize(zr, 64<<10), nil
	}
	return br, nil
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Summary counts what one input (or, summed, several) held.
type Summary struct {
	File      string
	Bytes     int64
	Lines     int  // lines (records) read, blank lines not counted
	Successes int  // requests that succeeded: counted, not stored
	Failures  int  // failed requests found
	Stored    int  // failures handed to the store (duplicates of stored ones are kept once)
	Resolved  int  // failures attributed to a pod
	Rejected  int  // lines that could not be read
	Changes   int  // proxy endpoint changes found (envoy-clusters), stored like failures
	States    int  // a mesh proxy's states found (istio-proxy, linkerd-proxy), stored like failures
	DryRun    bool // no store: failures were counted, not stored
	ByField   map[string]int
	Examples  []*LineError // the first MaxExamples rejections
}

func newSummary(name string) *Summary { return &Summary{File: name, ByField: map[string]int{}} }

func (s *Summary) reject(e *LineError) {
	s.Rejected++
	s.ByField[e.Field]++
	if len(s.Examples) < MaxExamples {
		c := *e
		s.Examples = append(s.Examples, &c)
	}
}

// Add folds o into s (for a total over several inputs).
func (s *Summary) Add(o *Summary) {
	if s.ByField == nil {
		s.ByField = map[string]int{}
	}
	s.Bytes += o.Bytes
	s.Lines += o.Lines
	s.Successes += o.Successes
	s.Failures += o.Failures
	s.Stored += o.Stored
	s.Resolved += o.Resolved
	s.Rejected += o.Rejected
	s.Changes += o.Changes
	s.States += o.States
	s.DryRun = s.DryRun || o.DryRun
	for k, v := range o.ByField {
		s.ByField[k] += v
	}
	for _, e := range o.Examples {
		if len(s.Examples) < MaxExamples {
			s.Examples = append(s.Examples, e)
		}
	}
}

// Counts is the summary's line of counts: lines read, succeeded, failed
// (stored or not, attributed), rejected.
func (s *Summary) Counts() string {
	stored := fmt.Sprintf("%d stored", s.Stored)
	if s.DryRun {
		stored = "dry run: none stored"
	}
	if s.Changes > 0 {
		return fmt.Sprintf("%d proxy endpoint changes (%s), %d rejected", s.Changes, stored, s.Rejected)
	}
	if s.States > 0 {
		return fmt.Sprintf("%d states of the proxy (%s), %d rejected", s.States, stored, s.Rejected)
	}
	return fmt.Sprintf("%d lines read: %d succeeded, %d failed (%s, %d attributed to a pod), %d rejected",
		s.Lines, s.Successes, s.Failures, stored, s.Resolved, s.Rejected)
}

// WriteTo prints the summary for people.
func (s *Summary) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	b.WriteString(s.File + ": " + s.Counts() + "\n")
	if s.Rejected > 0 {
		fields := make([]string, 0, len(s.ByField))
		for f := range s.ByField {
			fields = append(fields, f)
		}
		sort.Slice(fields, func(i, j int) bool {
			if s.ByField[fields[i]] != s.ByField[fields[j]] {
				return s.ByField[fields[i]] > s.ByField[fields[j]]
			}
			return fields[i] < fields[j]
		})
		b.WriteString("  rejected by field:")
		for _, f := range fields {
			fmt.Fprintf(&b, " %s %d;", f, s.ByField[f])
		}
		b.WriteString("\n")
		for _, e := range s.Examples {
			fmt.Fprintf(&b, "  %v\n", e)
		}
		if s.Rejected > len(s.Examples) {
			fmt.Fprintf(&b, "  … and %d more\n", s.Rejected-len(s.Examples))
		}
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// errStore marks a failure of the store, as opposed to the input.
var errStore = errors.New("storing")

// NoGoodLines reports whether an input had lines and every one was rejected.
func (s *Summary) NoGoodLines() bool { return s.Rejected > 0 && s.Rejected == s.Lines }
