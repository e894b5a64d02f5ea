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
	lr := newLineReader(r)
	var rec Record
	if lr.notText != nil {
		rec.reset(lr.notText.Line)
		rec.Err = lr.notText
		return emit(&rec)
	}
	type key struct {
		svc  string
		addr netip.AddrPort
	}
	var (
		prev, cur map[key]string // target → state
		first     = true
		have      bool
		at        int64
		svc       string
		buf       []byte
		bufLine   int // the line the snapshot's JSON starts on
		proxy     string
		tooBig    bool
		dropping  bool // after a timestamp line: its snapshot's lines are no stray JSON
	)
	bad := func(line int, field, format string, args ...any) error {
		rec.reset(line)
		rec.Err = lineErr(line, field, format, args...)
		if lr.unterminated {
			rec.Err.Unterminated = true
		}
		return emit(&rec)
	}
	finish := func(atLine int) error {
		if !have || len(bytes.TrimSpace(buf)) == 0 {
			return nil
		}
		if tooBig {
			return bad(bufLine, FieldLine, "the snapshot's JSON is longer than %d bytes", maxSnapshotBytes)
		}
		targets, kind, err := decodeTargetHealth(buf)
		if err != nil {
			line, field, msg := bufLine, FieldLine, err.Error()
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
			return bad(line, field, "%s", msg)
		}
		if proxy == "" {
			proxy = kind
		}
		node := opts.ProxyName
		if node == "" {
			node = proxy
		}
		service := opts.Service
		if service == "" {
			service = svc
		}
		if service == "" {
			service = node
		}
		cur = make(map[key]string, len(targets))
		for _, t := range targets {
			cur[key{service, t.addr}] = t.state
		}
		if first {
			first = false
			if opts.BaselineOnly {
				prev = cur
				return nil
			}
		}
		keys := make([]key, 0, len(cur)+len(prev))
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
		for _, k := range keys {
			was, is := healthyState(prev[k]), healthyState(cur[k])
			if was == is {
				continue
			}
			rec.reset(atLine)
			rec.Failed = true
			rec.Time = at
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
			rec.attr(event.AttrProxy, proxy)
			state := cur[k]
			if state == "" {
				state = "gone"
			}
			rec.attr(AttrTargetState, state)
			if err := emit(&rec); err != nil {
				return err
			}
		}
		prev = cur
		return nil
	}
	for {
		line, tooLong, err := lr.next()
		if err == io.EOF {
			if lr.unterminated {
				return nil
			}
			return finish(lr.n + 1)
		}
		if err != nil {
			return err
		}
		if tooLong || bytes.IndexByte(line, 0) >= 0 {
			// A damaged line spoils its snapshot, which is skipped like a
			// failed poll (and its JSON's own error, which would come after
			// this line's, is never read).
			have, buf, dropping = false, buf[:0], true
		}
		switch {
		case tooLong:
			if err := bad(lr.n, FieldLine, "longer than %d bytes", MaxLineBytes); err != nil {
				return err
			}
			continue
		case bytes.IndexByte(line, 0) >= 0:
			if err := bad(lr.n, FieldLine, "binary data (NUL byte at column %d)", bytes.IndexByte(line, 0)+1); err != nil {
				return err
			}
			continue
		case len(line) > 0 && line[0] == '#':
			// A timestamp line ends the snapshot before it, good or bad;
			// after a bad one its JSON is dropped with it.
			if err := finish(lr.n); err != nil {
				return err
			}
			have, buf, dropping = false, buf[:0], true
			fields := strings.Fields(string(line[1:]))
			if len(fields) == 0 || len(fields) > 2 {
				if err := bad(lr.n, "time", "want '# TIME [namespace/service]'"); err != nil {
					return err
				}
				continue
			}
			t, err := parseSnapshotTime(fields[0])
			if err != nil {
				if err := bad(lr.n, "time", "%v", err); err != nil {
					return err
				}
				continue
			}
			have, at, buf, bufLine, tooBig, svc = true, t, buf[:0], lr.n+1, false, ""
			if len(fields) == 2 {
				if err := checkJSONString(fields[1]); err != nil || strings.Count(fields[1], "/") != 1 {
					if err := bad(lr.n, "service", "%q is not namespace/name", truncate(fields[1], 60)); err != nil {
						return err
					}
					continue
				}
				svc = fields[1]
			}
		default:
			if !have {
				if len(bytes.TrimSpace(line)) == 0 || dropping {
					continue
				}
				if err := bad(lr.n, FieldLine, "JSON before the first timestamp line (# 2026-03-01T09:00:00.123Z): each snapshot must begin with one"); err != nil {
					return err
				}
				continue
			}
			if len(buf)+len(line) > maxSnapshotBytes {
				tooBig = true
				continue
			}
			buf = append(buf, line...)
			buf = append(buf, '\n')
		}
	}
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
