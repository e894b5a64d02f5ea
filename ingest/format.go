package ingest

import (
	"fmt"
	"io"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// Format is one input format the importer and the HTTP handler accept.
type Format struct {
	Name    string
	Summary string
	parse   func(io.Reader, Options, Emit) error
}

var formats = []Format{
	{"vegeta-json", "vegeta encode --to json output", ParseVegetaJSON},
	{"vegeta-csv", "vegeta encode --to csv output", ParseVegetaCSV},
	{"nginx", "nginx access log: combined + $upstream_addr $upstream_status $request_time, or --nginx-format", ParseNginx},
	{"envoy", "envoy access log, default text format (or Istio's)", ParseEnvoy},
	{"envoy-json", "envoy access log, json_format with Istio's keys", ParseEnvoyJSON},
	{"envoy-clusters", "timestamped snapshots of envoy's admin /clusters: endpoint membership changes", ParseEnvoyClusters},
	{"jsonl", "generic JSON lines: time, target, error, status …", ParseJSONLines},
	{"csv", "generic CSV with a header: time, target, error, status …", ParseCSV},
}

// Formats lists the formats, in a stable order.
func Formats() []Format { return append([]Format(nil), formats...) }

// FormatNames lists the formats' names.
func FormatNames() []string {
	out := make([]string, len(formats))
	for i, f := range formats {
		out[i] = f.Name
	}
	return out
}

// LookupFormat returns the format called name.
func LookupFormat(name string) (Format, error) {
	for _, f := range formats {
		if f.Name == name {
			return f, nil
		}
	}
	return Format{}, fmt.Errorf("unknown format %q (want one of %s)", name, strings.Join(FormatNames(), ", "))
}

// Parser binds the format to opts, checking them first (a log_format that
// does not compile, a log_format given to a format that has none).
func (f Format) Parser(opts Options) (Parser, error) {
	if opts.LogFormat != "" {
		if f.Name != "nginx" {
			return nil, fmt.Errorf("a log format applies to the nginx format only, not %s", f.Name)
		}
		nf, err := CompileNginx(opts.LogFormat)
		if err != nil {
			return nil, err
		}
		return withClientTimeout(func(r io.Reader, emit Emit) error { return nf.Parse(r, opts, emit) }, opts), nil
	}
	return withClientTimeout(func(r io.Reader, emit Emit) error { return f.parse(r, opts, emit) }, opts), nil
}

// withClientTimeout gives a timeout logged with no duration the client's
// timeout as its duration: the line's own (timeout_ms), else
// opts.ClientTimeout. A timeout is logged at its end; with its duration
// the analysis aligns it at its start, when the request went out.
func withClientTimeout(p Parser, opts Options) Parser {
	return func(r io.Reader, emit Emit) error {
		return p(r, func(rec *Record) error {
			if rec.Err == nil && rec.Failed && rec.Kind == "" && rec.Reason == event.FailTimeout && rec.Duration == 0 {
				d := rec.Timeout
				if d == 0 {
					d = opts.ClientTimeout
				}
				if d > 0 {
					rec.Duration = d
					rec.attr(AttrDurationFrom, DurationFromClientTimeout)
				}
			}
			return emit(rec)
		})
	}
}
