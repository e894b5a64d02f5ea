package ingest

import (
	"bytes"
	"io"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
)

// ParseEnvoyClusters reads snapshots of envoy's admin /clusters text
// output, each begun by a timestamp line the polling loop writes:
//
//	while sleep 0.2; do date -u +'# %Y-%m-%dT%H:%M:%S.%NZ'; curl -s localhost:15000/clusters; done >> clusters.log
//
// A timestamp line is "#" then an RFC 3339 time or Unix seconds (a fraction
// allowed). Of envoy's lines only CLUSTER::ADDRESS::health_flags::FLAGS is
// used: a host is in rotation while its flags are "healthy". Successive
// snapshots are diffed per cluster: a host that appears or turns healthy is
// a dataplane_endpoint_added at the snapshot's time, one that goes or turns
// unhealthy a dataplane_endpoint_removed, so the times are as fine as the
// polling interval. The first snapshot's healthy hosts are emitted as
// added at its time (not with Options.BaselineOnly). A snapshot with no
// host lines (the poll failed: curl -s prints nothing) is skipped, not read
// as every host gone; so is a last snapshot the input does not end with a
// newline after (a file copied while the loop was writing it).
func ParseEnvoyClusters(r io.Reader, opts Options, emit Emit) error {
	node := opts.ProxyName
	if node == "" {
		node = event.ProxyEnvoy
	}
	lr := newLineReader(r)
	var rec Record
	if lr.notText != nil {
		rec.reset(lr.notText.Line)
		rec.Err = lr.notText
		return emit(&rec)
	}
	var (
		prev, cur map[envoyHost]bool // host → healthy
		first     = true
		have      bool // a timestamp line began cur
		at        int64
	)
	// finish diffs cur against prev. Its changes carry the line that closed
	// cur (the next timestamp line, or the last line), so that records come
	// in line order after any bad line of the snapshot.
	finish := func(atLine int) error {
		if !have || len(cur) == 0 {
			return nil
		}
		if first {
			first = false
			if opts.BaselineOnly {
				prev = cur
				return nil
			}
		}
		keys := make([]envoyHost, 0, len(cur)+len(prev))
		for k := range cur {
			keys = append(keys, k)
		}
		for k := range prev {
			if _, ok := cur[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].cluster != keys[j].cluster {
				return keys[i].cluster < keys[j].cluster
			}
			return keys[i].addr.Compare(keys[j].addr) < 0
		})
		for _, k := range keys {
			was, is := prev[k], cur[k]
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
			rec.Namespace, rec.Service = envoyClusterService(k.cluster)
			rec.attr(event.AttrProxy, event.ProxyEnvoy)
			rec.attr(event.AttrCluster, k.cluster)
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
				return nil // the last snapshot may be cut short
			}
			return finish(lr.n)
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 && !tooLong {
			continue
		}
		var lerr *LineError
		switch {
		case tooLong:
			lerr = lineErr(lr.n, FieldLine, "longer than %d bytes (the line is skipped; is this envoy's /clusters output?)", MaxLineBytes)
		case bytes.IndexByte(line, 0) >= 0:
			lerr = lineErr(lr.n, FieldLine, "binary data (NUL byte at column %d)", bytes.IndexByte(line, 0)+1)
		case line[0] == '#':
			t, err := parseSnapshotTime(strings.TrimSpace(string(line[1:])))
			if err != nil {
				lerr = lineErr(lr.n, "time", "%v", err)
				break
			}
			if err := finish(lr.n); err != nil {
				return err
			}
			have, at, cur = true, t, map[envoyHost]bool{}
		default:
			var h envoyHost
			var healthy, ok bool
			h, healthy, ok, lerr = parseClustersLine(string(line))
			if lerr == nil && ok {
				if !have {
					lerr = lineErr(lr.n, FieldLine, "a host line before the first timestamp line (# 2026-03-01T09:00:00.123Z): each snapshot must begin with one")
				} else {
					cur[h] = healthy
				}
			}
		}
		if lerr != nil {
			lerr.Line = lr.n
			if lr.unterminated {
				lerr.Unterminated = true
			}
			rec.reset(lr.n)
			rec.Err = lerr
			if err := emit(&rec); err != nil {
				return err
			}
		}
	}
}

// envoyHost is one host of one cluster.
type envoyHost struct {
	cluster string
	addr    netip.AddrPort
}

// parseSnapshotTime reads a timestamp line's time: RFC 3339, or Unix seconds.
func parseSnapshotTime(s string) (int64, error) {
	if strings.ContainsAny(s, "-T:") {
		return parseRFC3339(s)
	}
	return parseEpoch(s, time.Second)
}

// parseClustersLine reads one line of envoy's /clusters text, which
// envoy prints as CLUSTER::ADDRESS::STAT::VALUE for hosts and
// CLUSTER::KEY[::KEY]::VALUE for the cluster itself (outlier, circuit
// breakers, added_via_api). ok is set for a host's health_flags line;
// other lines of the format are read and skipped, as are hosts at
// addresses that are no IP and port (a pipe, an internal listener), which
// nothing else recorded can name.
func parseClustersLine(line string) (h envoyHost, healthy, ok bool, lerr *LineError) {
	cluster, rest, found := strings.Cut(line, "::")
	if !found || rest == "" {
		return h, false, false, lineErr(0, FieldLine, "not envoy /clusters output (want CLUSTER::ADDRESS::STAT::VALUE or a # TIME line)")
	}
	if cluster == "" {
		return h, false, false, lineErr(0, "cluster", "empty cluster name")
	}
	var addr string
	if strings.HasPrefix(rest, "[") { // IPv6: [::1]:80, whose colons are no separator
		end := strings.Index(rest, "]:")
		if end < 0 {
			return h, false, false, lineErr(0, "address", "%q: an IPv6 host address without ]:PORT", truncate(rest, 60))
		}
		addr, rest, found = cutAfterBracket(rest, end)
	} else {
		addr, rest, found = strings.Cut(rest, "::")
	}
	if !found || addr == "" || !(addr[0] == '[' || addr[0] >= '0' && addr[0] <= '9') {
		// added_via_api::…, outlier::…, default_priority::…, or a host that is no IP
		return h, false, false, nil
	}
	key, value, found := strings.Cut(rest, "::")
	if !found {
		return h, false, false, lineErr(0, FieldLine, "not envoy /clusters output (want CLUSTER::ADDRESS::STAT::VALUE)")
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return h, false, false, lineErr(0, "address", "%q is not a host IP:PORT", truncate(addr, 60))
	}
	if key != "health_flags" {
		return h, false, false, nil
	}
	if value != "healthy" && !strings.HasPrefix(value, "/") {
		return h, false, false, lineErr(0, "health_flags", "%q: envoy prints healthy or /flag/…", truncate(value, 60))
	}
	return envoyHost{cluster, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, value == "healthy", true, nil
}

// cutAfterBracket splits "[v6]:PORT::REST" at the first "::" after the
// bracket that ends at end.
func cutAfterBracket(s string, end int) (addr, rest string, found bool) {
	i := strings.Index(s[end:], "::")
	if i < 0 {
		return s, "", false
	}
	return s[:end+i], s[end+i+2:], true
}

// envoyClusterService maps a cluster to the Service it serves where its
// name says so: Istio's outbound|PORT|SUBSET|NAME.NAMESPACE.svc.DOMAIN.
// Any other name (Envoy Gateway's, a static cluster) is kept as the
// Service, with no namespace.
func envoyClusterService(cluster string) (ns, svc string) {
	parts := strings.Split(cluster, "|")
	if len(parts) == 4 && parts[0] == "outbound" {
		labels := strings.Split(parts[3], ".")
		if len(labels) >= 3 && labels[2] == "svc" && labels[0] != "" && labels[1] != "" {
			return labels[1], labels[0]
		}
	}
	return "", cluster
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
