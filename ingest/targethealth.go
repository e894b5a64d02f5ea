package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"sort"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// Proxy kinds of the load balancers' target health (Attrs[proxy]).
const (
	ProxyALB   = event.ProxyALB   // AWS elbv2 target group health
	ProxyGCPLB = event.ProxyGCPLB // Google Cloud backend service health
)

// AttrTargetState is a target's state as the load balancer reported it
// (healthy, draining, unhealthy …; HEALTHY, UNHEALTHY, DRAINING).
const AttrTargetState = "target_state"

// maxSnapshotBytes bounds one target-health snapshot's JSON.
const maxSnapshotBytes = 64 << 20

// ParseTargetHealth reads timestamped snapshots of a cloud load balancer's
// view of its targets, each begun by a timestamp line the polling loop
// writes and followed by the command's JSON (pretty-printed or not):
//
//	while sleep 2; do
//	  date -u +'# %Y-%m-%dT%H:%M:%S.%NZ shop/web'
//	  aws elbv2 describe-target-health --target-group-arn "$TG" --output json
//	done >> alb-web.health
//
// or `gcloud compute backend-services get-health BS --global --format=json`
// in its place. A timestamp line is "#", an RFC 3339 time or Unix seconds,
// and optionally the Kubernetes Service (namespace/name) the target group
// or backend service serves (else Options.Service, else the proxy name).
// Targets are IP:port (AWS's IP target mode, GCP's network endpoint
// groups); instance targets name no pod and are skipped. A target is in
// rotation while healthy: AWS's healthy, GCP's HEALTHY. Successive
// snapshots are diffed as envoy-clusters' are: draining (deregistration)
// and every other state are a removal, dataplane_endpoint_removed at the
// snapshot's time, with the load balancer (Options.ProxyName, default alb
// or gcp-lb) as its node. A snapshot with no JSON (the poll failed) is
// skipped, as is a last one the input does not end with a newline after.
func ParseTargetHealth(r io.Reader, opts Options, emit Emit) error {
	p := &targetHealthParser{lr: newLineReader(r), opts: opts, emit: emit, first: true}
	if p.lr.notText != nil {
		p.rec.reset(p.lr.notText.Line)
		p.rec.Err = p.lr.notText
		return emit(&p.rec)
	}
	for {
		line, tooLong, err := p.lr.next()
		if err == io.EOF {
			if p.lr.unterminated {
				return nil
			}
			return p.finish(p.lr.n + 1)
		}
		if err != nil {
			return err
		}
		if err := p.line(line, tooLong); err != nil {
			return err
		}
	}
}

// targetKey is one target of one Service.
type targetKey struct {
	svc  string
	addr netip.AddrPort
}

// targetHealthParser is ParseTargetHealth's state from one line to the next.
type targetHealthParser struct {
	lr   *lineReader
	opts Options
	emit Emit
	rec  Record

	prev     map[targetKey]string // target → state, in the last snapshot
	first    bool                 // no snapshot was decoded yet
	have     bool                 // a good timestamp line began the snapshot being read
	at       int64                // the snapshot's time
	svc      string               // the snapshot's Service, from its timestamp line
	buf      []byte               // the snapshot's JSON
	bufLine  int                  // the line the snapshot's JSON starts on
	proxy    string
	tooBig   bool
	dropping bool // after a timestamp line: its snapshot's lines are no stray JSON
}

// bad emits a bad line.
func (p *targetHealthParser) bad(line int, field, format string, args ...any) error {
	p.rec.reset(line)
	p.rec.Err = lineErr(line, field, format, args...)
	if p.lr.unterminated {
		p.rec.Err.Unterminated = true
	}
	return p.emit(&p.rec)
}

// line takes the input's next line.
func (p *targetHealthParser) line(line []byte, tooLong bool) error {
	nul := bytes.IndexByte(line, 0)
	if tooLong || nul >= 0 {
		// A damaged line spoils its snapshot, which is skipped like a
		// failed poll (and its JSON's own error, which would come after
		// this line's, is never read).
		p.have, p.buf, p.dropping = false, p.buf[:0], true
	}
	switch {
	case tooLong:
		return p.bad(p.lr.n, FieldLine, "longer than %d bytes", MaxLineBytes)
	case nul >= 0:
		return p.bad(p.lr.n, FieldLine, "binary data (NUL byte at column %d)", nul+1)
	case len(line) > 0 && line[0] == '#':
		return p.timestampLine(line)
	default:
		return p.jsonLine(line)
	}
}

// timestampLine ends the snapshot before it, good or bad, and begins the
// next; after a bad one its JSON is dropped with it.
func (p *targetHealthParser) timestampLine(line []byte) error {
	if err := p.finish(p.lr.n); err != nil {
		return err
	}
	p.have, p.buf, p.dropping = false, p.buf[:0], true
	fields := strings.Fields(string(line[1:]))
	if len(fields) == 0 || len(fields) > 2 {
		return p.bad(p.lr.n, "time", "want '# TIME [namespace/service]'")
	}
	t, err := parseSnapshotTime(fields[0])
	if err != nil {
		return p.bad(p.lr.n, "time", "%v", err)
	}
	p.have, p.at, p.buf, p.bufLine, p.tooBig, p.svc = true, t, p.buf[:0], p.lr.n+1, false, ""
	if len(fields) == 2 {
		if err := checkJSONString(fields[1]); err != nil || strings.Count(fields[1], "/") != 1 {
			return p.bad(p.lr.n, "service", "%q is not namespace/name", truncate(fields[1], 60))
		}
		p.svc = fields[1]
	}
	return nil
}

// jsonLine adds a line to the snapshot's JSON.
func (p *targetHealthParser) jsonLine(line []byte) error {
	if !p.have {
		if len(bytes.TrimSpace(line)) == 0 || p.dropping {
			return nil
		}
		return p.bad(p.lr.n, FieldLine, "JSON before the first timestamp line (# 2026-03-01T09:00:00.123Z): each snapshot must begin with one")
	}
	if len(p.buf)+len(line) > maxSnapshotBytes {
		p.tooBig = true
		return nil
	}
	p.buf = append(p.buf, line...)
	p.buf = append(p.buf, '\n')
	return nil
}

// finish decodes the snapshot read and emits how its targets changed
// since the one before, as of line atLine.
func (p *targetHealthParser) finish(atLine int) error {
	if !p.have || len(bytes.TrimSpace(p.buf)) == 0 {
		return nil
	}
	if p.tooBig {
		return p.bad(p.bufLine, FieldLine, "the snapshot's JSON is longer than %d bytes", maxSnapshotBytes)
	}
	targets, kind, err := decodeTargetHealth(p.buf)
	if err != nil {
		line, field, msg := snapshotError(p.buf, p.bufLine, err)
		return p.bad(line, field, "%s", msg)
	}
	if p.proxy == "" {
		p.proxy = kind
	}
	node := p.opts.ProxyName
	if node == "" {
		node = p.proxy
	}
	service := p.opts.Service
	if service == "" {
		service = p.svc
	}
	if service == "" {
		service = node
	}
	cur := make(map[targetKey]string, len(targets))
	for _, t := range targets {
		cur[targetKey{service, t.addr}] = t.state
	}
	if p.first {
		p.first = false
		if p.opts.BaselineOnly {
			p.prev = cur
			return nil
		}
	}
	if err := p.emitChanges(cur, node, atLine); err != nil {
		return err
	}
	p.prev = cur
	return nil
}

// snapshotError names the line (the snapshot's JSON starts on line
// bufLine), the field and the message of err, buf's decoding error.
func snapshotError(buf []byte, bufLine int, err error) (line int, field, msg string) {
	line, field, msg = bufLine, FieldLine, err.Error()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off := min(int(se.Offset), len(buf))
		line += bytes.Count(buf[:off], []byte("\n"))
		field = lastJSONKey(buf, off)
		msg = "not JSON: " + se.Error()
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field, msg = te.Field, "JSON "+te.Value+" where "+te.Type.String()+" was expected"
		if field == "" {
			field = FieldLine
		}
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		field, msg = fe.field, fe.msg
	}
	return line, field, msg
}

// emitChanges emits, in order of Service and address, each target that
// went in or out of rotation between the last snapshot and cur: added or
// removed at the snapshot's time, with node as the load balancer.
func (p *targetHealthParser) emitChanges(cur map[targetKey]string, node string, atLine int) error {
	rec := &p.rec
	for _, k := range targetKeys(p.prev, cur) {
		was, is := healthyState(p.prev[k]), healthyState(cur[k])
		if was == is {
			continue
		}
		rec.reset(atLine)
		rec.Failed = true
		rec.Time = p.at
		rec.Kind = event.DataplaneEndpointRemoved
		if is {
			rec.Kind = event.DataplaneEndpointAdded
		}
		rec.Node = node
		rec.Remote = k.addr
		ns, name, ok := strings.Cut(k.svc, "/")
		if ok && ns != "" && name != "" {
			rec.Namespace, rec.Service = ns, name
		} else {
			rec.Service = k.svc
		}
		rec.attr(event.AttrProxy, p.proxy)
		state := cur[k]
		if state == "" {
			state = "gone"
		}
		rec.attr(AttrTargetState, state)
		if err := p.emit(rec); err != nil {
			return err
		}
	}
	return nil
}

// targetKeys lists the targets of either snapshot, sorted by Service and
// address.
func targetKeys(prev, cur map[targetKey]string) []targetKey {
	keys := make([]targetKey, 0, len(cur)+len(prev))
	for k := range cur {
		keys = append(keys, k)
	}
	for k := range prev {
		if _, ok := cur[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].svc != keys[j].svc {
			return keys[i].svc < keys[j].svc
		}
		return keys[i].addr.Compare(keys[j].addr) < 0
	})
	return keys
}

// healthyState reports whether a target in state s takes new connections.
func healthyState(s string) bool { return s == "healthy" || s == "HEALTHY" }

type target struct {
	addr  netip.AddrPort
	state string
}

type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// decodeTargetHealth reads one snapshot: AWS's describe-target-health
// output, or GCP's get-health (a list of backends, or one's status).
func decodeTargetHealth(b []byte) ([]target, string, error) {
	var aws struct {
		TargetHealthDescriptions *[]struct {
			Target struct {
				ID   string `json:"Id"`
				Port int    `json:"Port"`
			} `json:"Target"`
			TargetHealth struct {
				State string `json:"State"`
			} `json:"TargetHealth"`
		} `json:"TargetHealthDescriptions"`
	}
	type gcpStatus struct {
		HealthStatus []struct {
			HealthState string `json:"healthState"`
			IPAddress   string `json:"ipAddress"`
			Port        int    `json:"port"`
		} `json:"healthStatus"`
	}
	trimmed := bytes.TrimSpace(b)
	var out []target
	add := func(field, ip string, port int, state string) error {
		if err := checkJSONString(ip); err != nil {
			return &fieldError{field, err.Error()}
		}
		if err := checkJSONString(state); err != nil {
			return &fieldError{field, err.Error()}
		}
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil // an instance target (i-…): no pod
		}
		if port <= 0 || port > 65535 {
			return &fieldError{field, "port out of range"}
		}
		out = append(out, target{netip.AddrPortFrom(a.Unmap(), uint16(port)), state})
		return nil
	}
	if len(trimmed) > 0 && trimmed[0] == '{' {
		if err := json.Unmarshal(trimmed, &aws); err != nil {
			return nil, "", err
		}
		if aws.TargetHealthDescriptions != nil {
			for _, d := range *aws.TargetHealthDescriptions {
				if err := add("Target.Id", d.Target.ID, d.Target.Port, d.TargetHealth.State); err != nil {
					return nil, "", err
				}
			}
			return out, ProxyALB, nil
		}
		var g gcpStatus
		if err := json.Unmarshal(trimmed, &g); err != nil {
			return nil, "", err
		}
		if g.HealthStatus == nil {
			return nil, "", &fieldError{FieldLine, "neither TargetHealthDescriptions (aws elbv2 describe-target-health) nor healthStatus (gcloud compute backend-services get-health)"}
		}
		for _, h := range g.HealthStatus {
			if err := add("healthStatus.ipAddress", h.IPAddress, h.Port, h.HealthState); err != nil {
				return nil, "", err
			}
		}
		return out, ProxyGCPLB, nil
	}
	var list []struct {
		Status gcpStatus `json:"status"`
	}
	if err := json.Unmarshal(trimmed, &list); err != nil {
		return nil, "", err
	}
	for _, be := range list {
		for _, h := range be.Status.HealthStatus {
			if err := add("status.healthStatus.ipAddress", h.IPAddress, h.Port, h.HealthState); err != nil {
				return nil, "", err
			}
		}
	}
	return out, ProxyGCPLB, nil
}
