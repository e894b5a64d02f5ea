package ingest

import (
	"fmt"
	"strings"
)

// Kubernetes' limits on the names a record carries: a Service or a
// namespace is a DNS label (63 bytes), a node a DNS subdomain (253). A
// record that names more is refused at ingest, naming the field, so that
// a 1 MiB "service" never reaches the store, the analysis or a page.
const (
	MaxServiceName   = 63
	MaxNamespaceName = 63
	MaxNodeName      = 253
	// MaxClusterName bounds an envoy cluster's name kept as the Service
	// where it names no Kubernetes Service (Envoy Gateway's, a static one).
	MaxClusterName = 253
)

// checkNames refuses rec when one of its names is longer than Kubernetes
// allows.
func checkNames(rec *Record) *LineError {
	if rec.Err != nil || !rec.Failed {
		return nil
	}
	svcMax, svcWhat := MaxServiceName, "a Service name"
	if rec.Kind != "" && rec.Namespace == "" {
		svcMax, svcWhat = MaxClusterName, "an envoy cluster name"
	}
	for _, f := range []struct {
		field, value, what string
		max                int
	}{
		{"service", rec.Service, svcWhat, svcMax},
		{"namespace", rec.Namespace, "a namespace", MaxNamespaceName},
		{"node", rec.Node, "a node name", MaxNodeName},
	} {
		if len(f.value) > f.max {
			return &LineError{Line: rec.Line, Field: f.field, Msg: fmt.Sprintf("%d bytes, longer than %s may be (%d)", len(f.value), f.what, f.max)}
		}
	}
	return nil
}

// stripCredentials removes the credentials of every URL in rec's texts
// (target, backend, error and extras) before anything stores them: a
// client logs the URL it asked for, and https://user:token@host/ holds a
// token that would be shown on every page that shows the failure.
func stripCredentials(rec *Record) {
	if rec.Err != nil || !rec.Failed {
		return
	}
	rec.Target = StripURLCredentials(rec.Target)
	rec.Backend = StripURLCredentials(rec.Backend)
	rec.Error = StripURLCredentials(rec.Error)
	for k, v := range rec.Attrs {
		if s := StripURLCredentials(v); s != v {
			rec.Attrs[k] = s
		}
	}
}

// StripURLCredentials returns s with the userinfo ("user:password@",
// "token@") of every "scheme://" URL in it removed. The userinfo ends at
// the authority's last '@' before its first '/', '?', '#', space or quote.
// It allocates only when s holds such a URL.
func StripURLCredentials(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:i+3])
		rest = rest[i+3:]
		end := strings.IndexAny(rest, "/?#\\ \t\r\n\"'`<>")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
			rest = rest[at+1:]
		}
	}
}
