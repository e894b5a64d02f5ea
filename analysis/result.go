package analysis

import (
	"bufio"
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"strings"
)

// Result is everything the report and the web UI show about a window.
type Result struct {
	From int64 `json:"from_ns"`
	To   int64 `json:"to_ns"` // 0: open-ended
	// Scope repeats the namespace/workload filter, empty for everything.
	Scope string `json:"scope,omitempty"`

	// Disruptions are the account's disruptions of the pods in scope
	// that overlap the window, each with what was found on its pods.
	Disruptions []Disruption  `json:"disruptions"`
	Timelines   []PodTimeline `json:"timelines"`

	// Causes groups the client-reported failures, InferredCauses the
	// failures kernel evidence alone proves; both in rule order.
	Causes         []CauseSummary `json:"causes"`
	InferredCauses []CauseSummary `json:"inferred_causes"`
	Inference      Inference      `json:"inference"`

	// Failures lists aligned failures, client-reported first, up to
	// Options.MaxFailures; Truncated says some were left out (the counts
	// above still include them).
	Failures  []AlignedFailure `json:"failures"`
	Truncated bool             `json:"truncated"`

	// Offsets of client failures (inferred ones when there are none) from
	// their pod's SIGTERM and exit, in 50 ms bins.
	FromSigterm Histogram `json:"offsets_from_sigterm"`
	FromExit    Histogram `json:"offsets_from_exit"`

	Totals Totals     `json:"totals"`
	Rules  []RuleView `json:"rules"`
	Stats  Stats      `json:"stats"`

	// Kernels lists the nodes whose kernel keeps some kernel evidence
	// from them (their agents' latest kernel_capabilities event), so that
	// a failure no kernel event explains there is not read as unproven.
	Kernels []NodeKernel `json:"kernel_limits,omitempty"`

	// DataplaneLag is, per node whose proxy's rules were recorded, how long
	// after the watch saw an endpoint leave rotation that node's proxy
	// stopped sending to it: the time a preStop sleep must exceed.
	DataplaneLag []NodeLag `json:"dataplane_lag,omitempty"`

	// Proxies lists each node's proxy mode as its agent detected it (its
	// latest kernel_capabilities event), so that a node without dataplane
	// events says why.
	Proxies []NodeProxy `json:"proxies,omitempty"`

	// Cluster is the versions the API server and the nodes' kubelets run,
	// as their agents recorded them (node_info): what form of fix each
	// accepts. Nil when none was recorded.
	Cluster *Cluster `json:"cluster,omitempty"`

	// RecorderGaps are the spans of the window where a node's record is
	// incomplete (its agent not running, running without its kernel
	// capture, or losing events), from the agents' recorder_coverage
	// spans. A failure whose evidence lies in one is unexplained and
	// names it. A gap still open at the newest span read ends at Open.
	RecorderGaps []RecorderGap `json:"recorder_gaps,omitempty"`
}

// NodeProxy is how one node's Services are proxied and whether
// drainscope records its rule changes.
type NodeProxy struct {
	Node     string `json:"node"`
	Mode     string `json:"mode"` // nftables, iptables, iptables-legacy, ipvs, off, "" (none found)
	Recorded bool   `json:"recorded"`
	Evidence string `json:"evidence,omitempty"`
}

// NodeKernel is what one node's kernel cannot show.
type NodeKernel struct {
	Node    string   `json:"node"`
	Release string   `json:"kernel_release,omitempty"`
	Missing []string `json:"missing_evidence"` // e.g. refused_connections
}

// Totals are exact counts over the window's client-reported failures, for
// experiment runners that assert on them (every failure of a rollout
// attributed to a terminating pod and a cause, …).
type Totals struct {
	ClientFailures int `json:"client_failures"`
	// WithPod were tied to a pod; OnTerminatingPod to one that was
	// terminating; Explained got a cause other than unexplained.
	WithPod          int `json:"with_pod"`
	OnTerminatingPod int `json:"on_terminating_pod"`
	Explained        int `json:"explained"`
	// ExplainedOnTerminatingPod have both.
	ExplainedOnTerminatingPod int `json:"explained_on_terminating_pod"`
}

// RuleView is a rule as results list it.
type RuleView struct {
	Cause    Cause    `json:"cause"`
	Title    string   `json:"title"`
	Requires []string `json:"requires"`
	Fix      string   `json:"fix,omitempty"`
}

// CauseSummary is the failures of one cause.
type CauseSummary struct {
	Cause       Cause            `json:"cause"`
	Title       string           `json:"title"`
	Count       int              `json:"count"`
	Pods        []PodCount       `json:"pods"`
	Explanation string           `json:"explanation"`
	Fix         string           `json:"fix,omitempty"`
	Evidence    map[string]int   `json:"evidence"` // role → failures it supported
	FromSigterm Histogram        `json:"offsets_from_sigterm"`
	FromExit    Histogram        `json:"offsets_from_exit"`
	Examples    []AlignedFailure `json:"examples"`
}

// PodCount is the failures of one pod.
type PodCount struct {
	Pod   string `json:"pod"`
	Count int    `json:"count"`
}

// Inference compares what kernel evidence alone proves with what clients
// reported.
type Inference struct {
	Inferred int `json:"inferred"`
	// Likely of Inferred rest on evidence that makes a failure likely
	// (LikelyProof), not on a packet that proves it.
	Likely  int            `json:"likely"`
	ByProof map[string]int `json:"by_proof"`
	// ClientFailures with a client address can be matched to kernel
	// evidence; Proven of them were, ProvenLikely of those only by a
	// likely inferred failure.
	ClientFailures    int      `json:"client_failures"`
	WithClientAddress int      `json:"with_client_address"`
	Proven            int      `json:"proven"`
	ProvenLikely      int      `json:"proven_likely"`
	Ratio             *float64 `json:"ratio,omitempty"` // Proven / ClientFailures
	// RefusedOutOfRotation counts refused SYNs that came after the pod's
	// endpoint had left rotation everywhere: probes or clients bypassing
	// the Service, not counted as failures.
	RefusedOutOfRotation int `json:"refused_out_of_rotation"`
}

// WriteJSON writes the result as one JSON document, laid out for a
// person to read with indent: the report of a 1,000-pod rollout is tens
// of megabytes, and indenting them was a seventh of its time.
//
// The compact form, what a program or a file gets, is streamed: the same
// bytes as json.Encoder's, but each element of the result's lists is
// encoded and written on its own. The encoder builds the whole document
// in one buffer first, grown by doubling: 128 MB of fresh memory for a
// 5,000-node rollout's 35 MB report. The elements go through one
// json.Encoder, whose buffer is reused from one to the next (json.Marshal
// would return a copy of each: the 35 MB again).
func WriteJSON(w io.Writer, r *Result, indent bool) error {
	if indent {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := streamObject(bw, json.NewEncoder(valueWriter{bw}), reflect.ValueOf(r).Elem()); err != nil {
		return err
	}
	bw.WriteByte('\n')
	return bw.Flush()
}

// valueWriter writes what a json.Encoder writes to bw, but for the
// newline that ends each value: the encoder writes a value and its
// newline in one call.
type valueWriter struct{ bw *bufio.Writer }

func (w valueWriter) Write(b []byte) (int, error) {
	if _, err := w.bw.Write(b[:len(b)-1]); err != nil {
		return 0, err
	}
	return len(b), nil
}

// streamObject writes struct v as encoding/json would, streaming the
// elements of its slice fields through enc (which writes to bw, see
// valueWriter); other fields are encoded whole. Write errors stay in bw,
// which Flush returns.
func streamObject(bw *bufio.Writer, enc *json.Encoder, v reflect.Value) error {
	bw.WriteByte('{')
	first := true
	for i := range v.NumField() {
		sf, fv := v.Type().Field(i), v.Field(i)
		name, omitEmpty, ok := jsonField(sf)
		if !ok || omitEmpty && emptyJSON(fv) {
			continue
		}
		if !first {
			bw.WriteByte(',')
		}
		first = false
		key, _ := json.Marshal(name)
		bw.Write(key)
		bw.WriteByte(':')
		if fv.Kind() != reflect.Slice || fv.IsNil() || fv.Type().Elem().Kind() == reflect.Uint8 {
			if err := encodeTo(enc, fv); err != nil {
				return err
			}
			continue
		}
		bw.WriteByte('[')
		for j := range fv.Len() {
			if j > 0 {
				bw.WriteByte(',')
			}
			if err := encodeTo(enc, fv.Index(j)); err != nil {
				return err
			}
		}
		bw.WriteByte(']')
	}
	bw.WriteByte('}')
	return nil
}

// encodeTo encodes v, through its address when it has one: encoding/json
// calls a pointer method (MarshalJSON, MarshalText) of an addressable
// value, as a struct's field or a slice's element is.
func encodeTo(enc *json.Encoder, v reflect.Value) error {
	x := v.Interface()
	if v.CanAddr() {
		x = v.Addr().Interface()
	}
	return enc.Encode(x)
}

// jsonField reads a field's json tag: its name, omitempty, and whether it
// is encoded at all (exported, not "-").
func jsonField(sf reflect.StructField) (name string, omitEmpty, ok bool) {
	tag := sf.Tag.Get("json")
	if !sf.IsExported() || tag == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = sf.Name
	}
	return name, slices.Contains(strings.Split(opts, ","), "omitempty"), true
}

// emptyJSON is encoding/json's test for omitempty.
func emptyJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}
