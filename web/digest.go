package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// A finished rollout's model is kept in the store as a digest (see
// store.Digest), so that the first timeline read in a new process is one
// row, not the rollout's 100,000 events read and analysed again. The
// digest holds two parts: what the timeline draws (lanes with their
// socket and failure marks packed, the summary, the analysis's timelines
// and rules) and the whole analysis, which the other answers need and
// which is read only for them.

// digestVersion changes whenever what a digest holds changes (its
// layout): digests of another version are never read. What the analysis
// makes of the same events is covered by the key without anyone
// remembering to bump it (see digestKey). 5: both parts s2 streams, the
// timelines and lanes a gob message each. 6: the found disruption is the
// account's (analysis.Disruption). 7: the recorder gaps.
const digestVersion = 7

// digestKey names a rollout's digest for this build and the analysis
// options in force: another build's analysis may read the same events
// differently. The key hashes the release and VCS revision, the binary
// itself (an image built without .git reads "(devel)", and a changed
// aligner changes the binary), every rule's text (its requirements,
// templates and fix, which options may replace) and the options.
func (s *Server) digestKey(key analysis.DisruptionKey) string {
	o := s.opts.Analysis.WithDefaults()
	var rules []string
	for _, r := range o.Rules {
		// Not the Finders: a func prints as its address.
		reqs := make([]string, 0, len(r.Requires))
		for _, q := range r.Requires {
			reqs = append(reqs, q.Name)
		}
		rules = append(rules, fmt.Sprintf("%s|%s|%q|%s|%s|%s|%v", r.Cause, r.Title, reqs, r.Explain, r.Summary, r.Fix, r.Likely))
	}
	o.Rules = nil
	h := sha256.Sum256(fmt.Appendf(nil, "%d %s %s %+v %q", digestVersion, buildID, binaryHash(), o, rules))
	return key.String() + " " + hex.EncodeToString(h[:8])
}

// buildID names the build: its module version and VCS revision (and
// whether the tree was modified) when it was built from a repository.
var buildID = func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	id := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
			id += " " + s.Value
		}
	}
	return id
}()

// binaryHash names the running executable, read once: any change to the
// code that made a digest changes it. It is the Go build ID the toolchain
// stamps into the binary (a hash of its inputs and of its content), read
// from the ELF note in microseconds; else, for a binary built without one
// (-ldflags=-buildid=) or not ELF, the SHA-256 of the whole file, which
// takes about 90 ms for a 110 MB binary, on the first timeline read of a
// new process. "" when the executable cannot be read, and then the build
// ID and rules still key it.
var binaryHash = sync.OnceValue(func() string {
	path, err := os.Executable()
	if err != nil {
		return ""
	}
	if id := goBuildID(path); id != "" {
		return "go build ID " + id
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
})

// goBuildID reads the Go build ID note (name "Go", type 4) of the ELF
// file at path, as `go tool buildid` does; "" when it has none.
func goBuildID(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const goBuildIDTag = 4
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<16 {
			continue
		}
		note, err := io.ReadAll(p.Open())
		if err != nil {
			return ""
		}
		for len(note) >= 12 {
			nameSize := int(f.ByteOrder.Uint32(note))
			descSize := int(f.ByteOrder.Uint32(note[4:]))
			tag := f.ByteOrder.Uint32(note[8:])
			nameEnd := 12 + (nameSize+3)&^3
			descEnd := nameEnd + (descSize+3)&^3
			if nameSize < 0 || descSize < 0 || descEnd > len(note) || descEnd < nameEnd {
				break
			}
			if tag == goBuildIDTag && nameSize == 4 && string(note[12:16]) == "Go\x00\x00" && descSize > 0 {
				return string(note[nameEnd : nameEnd+descSize])
			}
			note = note[descEnd:]
		}
	}
	return ""
}

// digestWindow is every time whose events can change r's model: the
// analysis's history before the rollout, and after its end the quiet gap
// within which another termination would have extended it.
func digestWindow(r *analysis.Disruption, o analysis.Options) event.Window {
	o = o.WithDefaults()
	w := r.Window()
	from := min(w.From-int64(o.Lead), r.From-int64(analysis.TriggerLead))
	to := max(w.To+int64(o.Lookahead)+1, r.Until+int64(analysis.RolloutGap)+1)
	return event.Window{From: max(from, 0), To: to}
}

// scanWindow is the window buildModel's analysis reads (AnalyzeWith's).
func scanWindow(r *analysis.Disruption, o analysis.Options) event.Window {
	o = o.WithDefaults()
	w := r.Window()
	return event.Window{From: max(w.From-int64(o.Lead), 0), To: w.To + int64(o.Lookahead) + 1}
}

type digestView struct {
	Rollout   *analysis.Disruption
	Capture   event.Window
	Extent    event.Window
	Summary   RolloutSummary
	Events    int
	ClientN   int
	Took      time.Duration
	Rules     []analysis.RuleView
	Truncated bool
	Classes   []string // each failure's Failure.Reason, by index
	Gaps      []analysis.RecorderGap
	// The messages that follow: NTimelines analysis.PodTimeline, then
	// NLanes digestLane.
	NTimelines, NLanes int
}

type digestLane struct {
	Key         string
	Pod         analysis.PodView
	Role, Node  string
	First, Last int64
	Start       int64
	TL          int // index into Timelines; -1 for none
	Marks       []digestMark
	Dropped     int
	Socks       []byte // packSocks
	Fails       []byte // packFails
	Inferred    []byte
}

type digestMark struct {
	T       int64
	ID      event.ID
	Kind    event.Kind
	Signal  int32
	Node    string
	Summary string
}

func packSocks(ss []sockMark) []byte {
	b := make([]byte, 0, len(ss)*12)
	prev := int64(0)
	for _, s := range ss {
		b = binary.AppendVarint(b, s.t-prev)
		prev = s.t
		b = binary.LittleEndian.AppendUint64(b, uint64(s.id))
		b = append(b, s.kind<<4|s.series)
	}
	return b
}

func unpackSocks(b []byte) ([]sockMark, error) {
	var out []sockMark
	prev := int64(0)
	for len(b) > 0 {
		d, n := binary.Varint(b)
		if n <= 0 || len(b) < n+9 {
			return nil, fmt.Errorf("socket marks cut short")
		}
		prev += d
		out = append(out, sockMark{t: prev, id: event.ID(binary.LittleEndian.Uint64(b[n:])), kind: b[n+8] >> 4, series: b[n+8] & 15})
		b = b[n+9:]
	}
	return out, nil
}

func packFails(fs []failMark) []byte {
	b := make([]byte, 0, len(fs)*8)
	prev := int64(0)
	for _, f := range fs {
		b = binary.AppendVarint(b, f.t-prev)
		prev = f.t
		b = binary.AppendUvarint(b, uint64(f.i))
		inf := byte(0)
		if f.inferred {
			inf = 1
		}
		b = append(b, f.cause, inf)
	}
	return b
}

func unpackFails(b []byte) ([]failMark, error) {
	var out []failMark
	prev := int64(0)
	for len(b) > 0 {
		d, n := binary.Varint(b)
		if n <= 0 {
			return nil, fmt.Errorf("failure marks cut short")
		}
		i, m := binary.Uvarint(b[n:])
		if m <= 0 || len(b) < n+m+2 {
			return nil, fmt.Errorf("failure marks cut short")
		}
		prev += d
		out = append(out, failMark{t: prev, i: int32(i), cause: b[n+m], inferred: b[n+m+1] == 1})
		b = b[n+m+2:]
	}
	return out, nil
}

// encodeDigest packs m's timeline part and its whole analysis.
//
// The timeline part is a gob stream: the digestView, then each of its
// NTimelines pod timelines and NLanes lanes as a message of its own. A
// decoder then holds one lane's message at a time, not a copy of the whole
// part (a 1,000-pod rollout's is 4.9 MB), and decodes each lane's marks
// into the same slice. gob, not JSON: it decodes five times as fast, and
// the timeline part is what a cold read waits for. Both parts are s2
// streams (klauspost/compress's extension of snappy): a cold read waits
// as much on Postgres reading the value out of its TOAST chunks and on
// the copies of it, and compressed the timeline part is a third as
// large; read as a stream it is never decompressed whole.
func encodeDigest(m *model) (view, full []byte, err error) {
	res := m.result
	v := digestView{Rollout: m.rollout, Capture: m.capture, Extent: m.extent, Summary: m.summary,
		Events: m.events, ClientN: m.clientN, Took: m.took, Rules: res.Rules, Truncated: res.Truncated, Gaps: m.gaps,
		Classes: make([]string, len(res.Failures)), NTimelines: len(res.Timelines), NLanes: len(m.lanes)}
	for i := range res.Failures {
		v.Classes[i] = res.Failures[i].Failure.Reason
	}
	tlIndex := map[*analysis.PodTimeline]int{}
	for i := range res.Timelines {
		tlIndex[&res.Timelines[i]] = i
	}
	var buf bytes.Buffer
	zw := s2.NewWriter(&buf, s2.WriterConcurrency(1), s2.WriterBlockSize(digestBlock))
	enc := gob.NewEncoder(zw)
	if err := enc.Encode(v); err != nil {
		return nil, nil, fmt.Errorf("encoding the timeline: %w", err)
	}
	for _, tl := range res.Timelines {
		tl.Events = nil // the lanes' marks hold what the timeline draws of them
		if err := enc.Encode(tl); err != nil {
			return nil, nil, fmt.Errorf("encoding pod %s's timeline: %w", tl.Pod.String(), err)
		}
	}
	var dl digestLane
	for _, l := range m.lanes {
		dl = digestLane{Key: l.key, Pod: l.pod, Role: l.role, Node: l.node, First: l.first, Last: l.last, Start: l.start,
			TL: -1, Dropped: l.dropped, Socks: packSocks(l.socks), Fails: packFails(l.fails), Inferred: packFails(l.inferred),
			Marks: dl.Marks[:0]}
		if l.tl != nil {
			i, ok := tlIndex[l.tl]
			if !ok {
				return nil, nil, fmt.Errorf("lane %s: its timeline is not the analysis's", l.key)
			}
			dl.TL = i
		}
		for _, lm := range l.marks {
			dl.Marks = append(dl.Marks, digestMark{T: lm.t, ID: lm.id, Kind: lm.kind, Signal: lm.signal, Node: lm.node, Summary: lm.summary})
		}
		if err := enc.Encode(&dl); err != nil {
			return nil, nil, fmt.Errorf("encoding lane %s: %w", l.key, err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, nil, fmt.Errorf("compressing the timeline: %w", err)
	}
	view = buf.Bytes()
	var fb bytes.Buffer
	zw.Reset(&fb)
	if err := json.NewEncoder(zw).Encode(res); err != nil {
		return nil, nil, fmt.Errorf("encoding the analysis: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, nil, fmt.Errorf("compressing the analysis: %w", err)
	}
	return view, fb.Bytes(), nil
}

// digestBlock is the digest streams' block size. A reader holds a block
// and its compressed form: 2 MiB at s2's default of 1 MiB, for a stream
// of 1.7 MB.
const digestBlock = 256 << 10

// decodeDigest makes a model from a digest. Without the whole analysis
// (full empty) the model answers the timeline only (partial).
func decodeDigest(key analysis.DisruptionKey, view, full []byte) (*model, error) {
	dec := gob.NewDecoder(s2.NewReader(bytes.NewReader(view), s2.ReaderMaxBlockSize(digestBlock)))
	var v digestView
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding the timeline: %w", err)
	}
	if v.NTimelines < 0 || v.NLanes < 0 {
		return nil, fmt.Errorf("decoding the timeline: %d timelines and %d lanes", v.NTimelines, v.NLanes)
	}
	m := &model{key: key, rollout: v.Rollout, capture: v.Capture, extent: v.Extent, summary: v.Summary,
		events: v.Events, clientN: v.ClientN, took: v.Took, gaps: v.Gaps}
	res := &analysis.Result{}
	if len(full) > 0 {
		if err := json.NewDecoder(s2.NewReader(bytes.NewReader(full), s2.ReaderMaxBlockSize(digestBlock))).Decode(res); err != nil {
			return nil, fmt.Errorf("decoding the analysis: %w", err)
		}
		if len(res.Failures) != len(v.Classes) || len(res.Timelines) != v.NTimelines {
			return nil, fmt.Errorf("the analysis does not match the timeline")
		}
	} else {
		m.partial = true
		res.Rules, res.Truncated = v.Rules, v.Truncated
		res.Failures = make([]analysis.AlignedFailure, len(v.Classes))
		for i, c := range v.Classes {
			res.Failures[i].Failure.Reason = c
		}
	}
	// Each message decodes into zero values: gob leaves a field the
	// message omits (a zero) as it was. With the whole analysis, its
	// timelines (events included) are the ones kept.
	tls := make([]analysis.PodTimeline, 0, min(v.NTimelines, 1<<16))
	for i := range v.NTimelines {
		tls = append(tls, analysis.PodTimeline{})
		if err := dec.Decode(&tls[i]); err != nil {
			return nil, fmt.Errorf("decoding timeline %d of %d: %w", i, v.NTimelines, err)
		}
	}
	if m.partial {
		res.Timelines = tls
	}
	m.result = res
	m.lanes = make([]*lane, 0, min(v.NLanes, 1<<16))
	var dl digestLane
	for i := range v.NLanes {
		marks := dl.Marks[:cap(dl.Marks)]
		clear(marks)
		dl = digestLane{Marks: marks[:0]}
		if err := dec.Decode(&dl); err != nil {
			return nil, fmt.Errorf("decoding lane %d of %d: %w", i, v.NLanes, err)
		}
		l, err := laneOf(&dl, res)
		if err != nil {
			return nil, fmt.Errorf("lane %s: %w", dl.Key, err)
		}
		m.lanes = append(m.lanes, l)
	}
	return m, nil
}

// laneOf makes a lane of its digest, its timeline and failures in res.
func laneOf(dl *digestLane, res *analysis.Result) (*lane, error) {
	l := &lane{key: dl.Key, pod: dl.Pod, role: dl.Role, node: dl.Node, first: dl.First, last: dl.Last, start: dl.Start, dropped: dl.Dropped}
	if dl.TL >= 0 {
		if dl.TL >= len(res.Timelines) {
			return nil, fmt.Errorf("timeline %d of %d", dl.TL, len(res.Timelines))
		}
		l.tl = &res.Timelines[dl.TL]
	}
	l.marks = make([]landmark, len(dl.Marks))
	for i, dm := range dl.Marks {
		l.marks[i] = landmark{t: dm.T, id: dm.ID, kind: dm.Kind, signal: dm.Signal, node: dm.Node, summary: dm.Summary}
	}
	var err error
	if l.socks, err = unpackSocks(dl.Socks); err != nil {
		return nil, err
	}
	if l.fails, err = unpackFails(dl.Fails); err != nil {
		return nil, err
	}
	if l.inferred, err = unpackFails(dl.Inferred); err != nil {
		return nil, err
	}
	for _, fs := range [][]failMark{l.fails, l.inferred} {
		for _, f := range fs {
			if int(f.i) >= len(res.Failures) {
				return nil, fmt.Errorf("failure %d of %d", f.i, len(res.Failures))
			}
		}
	}
	l.all = append(append(make([]failMark, 0, len(l.fails)+len(l.inferred)), l.fails...), l.inferred...)
	sort.SliceStable(l.all, func(i, j int) bool { return l.all[i].t < l.all[j].t })
	return l, nil
}

// digestsOf returns the store's digests when this server may use them:
// only with the default analysis, whose results the options name.
func digestsOf(opts Options) store.Digests {
	d, ok := opts.Store.(store.Digests)
	if !ok || (opts.Analyze != nil && reflect.ValueOf(opts.Analyze).Pointer() != reflect.ValueOf(analysis.AnalyzeWith).Pointer()) {
		return nil
	}
	return d
}

// loadDigest reads key's model from its digest, or returns nil when there
// is none or it no longer matches the store's events.
func (s *Server) loadDigest(ctx context.Context, key analysis.DisruptionKey, full bool) (*model, error) {
	began := time.Now()
	d, ok, err := s.digests.GetDigest(ctx, s.digestKey(key), full)
	if err != nil || !ok {
		return nil, err
	}
	read := time.Since(began)
	// The count waits on the store, the decoding on the CPU: side by side.
	type decoded struct {
		m    *model
		err  error
		took time.Duration
	}
	dc := make(chan decoded, 1)
	go func() {
		t0 := time.Now()
		m, err := decodeDigest(key, d.Timeline, d.Analysis)
		dc <- decoded{m, err, time.Since(t0)}
	}()
	n, err := s.digests.CountEvents(ctx, d.Window)
	counted := time.Since(began) - read
	dec := <-dc
	if err != nil {
		return nil, err
	}
	if n != d.Events {
		return nil, nil // events were added since: read the rollout again
	}
	if dec.err != nil {
		s.log.Warn("unreadable digest; reading the rollout again", "rollout", key.String(), "err", dec.err)
		return nil, nil
	}
	m := dec.m
	m.built = s.opts.Now()
	m.took = time.Since(began)
	s.log.Debug("digest read", "rollout", key.String(), "bytes", len(d.Timeline)+len(d.Analysis), "read", read, "count", counted, "decode", dec.took, "took", m.took)
	m.fromDigest = true
	return m, nil
}

// keepDigest stores m's digest when nothing changed in its window while it
// was read: before is how many events the read's window held before the
// read. Counting again before and after finding the rollout again makes
// sure no event landed in the window in between (events are only added,
// so equal counts mean the same events).
func (s *Server) keepDigest(ctx context.Context, m *model, before int64) error {
	if m.live || m.partial || m.fromDigest {
		return nil
	}
	for _, g := range m.gaps {
		if g.What == analysis.GapNotYet {
			// A recorder has not vouched for the end of it yet: its
			// next span, after the digest's window, may close the gap.
			return nil
		}
	}
	if ro, ok := s.st.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() {
		return nil
	}
	o := s.opts.Analysis
	scan, win := scanWindow(m.rollout, o), digestWindow(m.rollout, o)
	counts := func() (int64, int64, error) {
		a, err := s.digests.CountEvents(ctx, scan)
		if err != nil {
			return 0, 0, err
		}
		all, err := s.digests.CountEvents(ctx, win)
		return a, all, err
	}
	a, all, err := counts()
	if err != nil || a != before {
		s.log.Debug("digest not kept: events changed while reading", "before", before, "after", a)
		return err
	}
	r, err := s.findRollout(ctx, m.key)
	if err != nil || !sameShape(r, m.found) {
		s.log.Debug("digest not kept: the rollout changed while reading")
		return err
	}
	view, full, err := encodeDigest(m)
	if err != nil {
		return err
	}
	a2, all2, err := counts()
	if err != nil || a2 != a || all2 != all {
		return err
	}
	return s.digests.PutDigest(ctx, store.Digest{Key: s.digestKey(m.key), Window: win, Events: all,
		Built: m.built.UnixNano(), Timeline: view, Analysis: full})
}

// sameShape says whether two reads of a rollout found the same one: the
// same span, trigger and pods. (The list reads every kind of event of a
// namespace, findRollout only the workload's own, so the times the kernel
// gives, and the counts, may differ between them.)
func sameShape(a, b *analysis.Disruption) bool {
	if a.From != b.From || a.To != b.To || a.Until != b.Until || a.Trigger != b.Trigger || a.TriggerAt != b.TriggerAt ||
		a.InProgress != b.InProgress || len(a.Replaced) != len(b.Replaced) {
		return false
	}
	pods := map[analysis.PodView]int{}
	for _, p := range a.Replaced {
		pods[p]++
	}
	for _, p := range b.Replaced {
		pods[p]--
	}
	for _, n := range pods {
		if n != 0 {
			return false
		}
	}
	return true
}
