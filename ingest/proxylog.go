package ingest

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// A mesh proxy's own log says when it began draining, how many
// connections it still held, and when it gave up and exited: what the
// node's capture says of its process, for when the capture missed it. The
// log is one container's (`kubectl logs POD -c istio-proxy`), so it names
// no pod: Options.Pod does. Such records speak for a pod, so only the
// operator's import takes them, never the ingest API (Format.Records: PodLog).

// proxyStates are the lines of istio-agent (pilot-agent) and
// linkerd-proxy that mark its shutdown, by the words in them.
var proxyStates = []struct {
	words string
	state string
}{
	{"Agent draining Proxy", event.ProxyDraining},                  // istio-agent, on SIGTERM
	{"received SIGTERM, starting shutdown", event.ProxyDraining},   // linkerd-proxy
	{"Received shutdown via admin interface", event.ProxyDraining}, // linkerd-proxy, told by linkerd-await
	{"still ", event.ProxyConnections},                             // istio-agent: "There are still N active connections"
	{"terminating remaining proxies", event.ProxyTerminating},      // istio-agent: its drain duration is over
	{"no more active connections. terminating proxy", event.ProxyTerminating},
	{"Aborting proxy", event.ProxyTerminating},
	{"Aborting epoch", event.ProxyTerminating},    // istio-agent before 1.12
	{"Aborted proxy instance", event.ProxyExited}, // istio-agent: envoy is gone
	{"Aborted all epochs", event.ProxyExited},     // istio-agent before 1.12
}

var stillActive = regexp.MustCompile(`still (\d+) active connections`)

// ParseIstioProxy reads an istio-proxy container's log: istio-agent's
// lines (a time, a level, a message, tab-separated; `kubectl logs
// --timestamps` puts a time of its own in front) become the proxy's
// states. Envoy's access log lines among them are skipped: the envoy
// format reads those.
func ParseIstioProxy(r io.Reader, opts Options, emit Emit) error {
	return parseProxyLog(r, opts, "istio-proxy", emit)
}

// ParseLinkerdProxy reads a linkerd-proxy container's log taken with
// `kubectl logs --timestamps` (its own lines count seconds since it
// started, so the time comes from kubectl's): its shutdown's lines become
// the proxy's states.
func ParseLinkerdProxy(r io.Reader, opts Options, emit Emit) error {
	return parseProxyLog(r, opts, "linkerd-proxy", emit)
}

// podOf splits Options.Pod, namespace/name.
func podOf(opts Options) (ns, name string, err error) {
	ns, name, ok := strings.Cut(opts.Pod, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("a proxy's log names no pod: give it as --pod NAMESPACE/NAME (got %q)", opts.Pod)
	}
	return ns, name, nil
}

func parseProxyLog(r io.Reader, opts Options, container string, emit Emit) error {
	ns, name, err := podOf(opts)
	if err != nil {
		return err
	}
	if opts.Container != "" {
		container = opts.Container
	}
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		stamp, rest, ok := leadingToken(line)
		if !ok {
			return skipLine
		}
		msg := string(rest)
		for _, st := range proxyStates {
			if !strings.Contains(msg, st.words) {
				continue
			}
			if st.state == event.ProxyConnections {
				m := stillActive.FindStringSubmatch(msg)
				if m == nil {
					return skipLine
				}
				rec.attr(event.AttrConnections, m[1])
			}
			at, err := parseRFC3339(stamp)
			if err != nil {
				return lineErr(rec.Line, "time", "%v (take the log with kubectl logs --timestamps)", err)
			}
			rec.Failed = true // stored, as a dataplane change is
			rec.Time, rec.Kind, rec.Reason = at, event.ProxyState, st.state
			rec.Namespace, rec.Pod, rec.Container = ns, name, container
			return nil
		}
		return skipLine // envoy's access log, the proxy's other lines
	})
}

// leadingToken splits off the token a line starts with: its time, the
// first of two where kubectl logs --timestamps put its own in front of the
// program's.
func leadingToken(line []byte) (string, []byte, bool) {
	line = bytes.TrimLeft(line, " \t")
	end := bytes.IndexAny(line, " \t")
	if end < 0 {
		return "", nil, false
	}
	return string(line[:end]), line[end+1:], true
}
