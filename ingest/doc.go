// Package ingest turns the logs clients and proxies already write into
// client_failure events. It reads vegeta results, nginx and envoy access logs,
// and generic JSON lines or CSV. Each format has a streaming parser, a pure
// function over an io.Reader that reports every line as a Record, either
// parsed or rejected with the file, line and field at fault. Failed requests
// become events (with the pod that served them resolved from the upstream
// address and the time); successful ones are only counted. An Importer batches
// the events into a store; Handler takes the same formats over HTTP.
//
// # Time
//
// An event's Time is when the client saw the failure: the end of the
// request. Formats that stamp the start (vegeta, envoy's START_TIME) have
// the duration added; nginx writes its line when the request ends. Every
// timestamp must say its zone or unit: RFC 3339 with Z or an offset, nginx
// $time_local (with its offset), $time_iso8601 or $msec, and Unix epochs in
// named units (time_ns, time_ms, time_s). A timestamp without a zone is
// rejected rather than guessed.
//
// # Formats
//
//	vegeta-json  `vegeta encode --to json` (one result per line)
//	vegeta-csv   `vegeta encode --to csv` (timestamp ns, code, latency ns, bytes out,
//	             bytes in, error, body, attack, seq, method, url, headers)
//	nginx        nginx access log; by default the combined format followed by
//	             $upstream_addr $upstream_status $request_time (plain combined
//	             lines are accepted too), or any log_format given as LogFormat
//	envoy        envoy's default text format, and Istio's text format (the
//	             default plus response code details and addresses)
//	envoy-json   envoy json_format lines with Istio's key names
//	envoy-clusters
//	             timestamped snapshots of envoy's admin /clusters, diffed into
//	             dataplane_endpoint_added/removed events of that proxy (not
//	             failures; see ParseEnvoyClusters)
//	jsonl        generic JSON lines, keys as the columns below
//	csv          generic CSV with a header row naming the columns below
//
// Generic columns (jsonl keys, csv header names):
//
//	time         RFC 3339 with zone, when the client saw the outcome; or one of
//	time_ns      Unix nanoseconds
//	time_ms      Unix milliseconds
//	time_s       Unix seconds, fraction allowed
//	target       URL or host the client asked for
//	error        the client's error text; non-empty means failed
//	status       HTTP status; 0 or empty when there was no response
//	client       optional: client address, ip or ip:port
//	remote       optional: address dialled, ip:port
//	backend      optional: upstream/pod address that served it, ip:port
//	duration_ms  optional: request duration in milliseconds
//	timeout_ms   optional: the client's timeout for this request; a timeout
//	             with no duration_ms lasted this long (else --client-timeout)
//	service      optional: Service the client targeted
//	reason       optional: failure class (eof, refused, reset, timeout, status,
//	             other); derived from error and status when absent
//
// A request failed when it has an error, no response (status 0), or a status
// in Options.FailStatus (500–599 by default). Envoy lines also fail on the
// upstream response flags (UF, UC, UR, UT, UH, URX, NR, UO …).
//
// # Hostile input
//
// Every format reads through one line reader: it drops a leading UTF-8
// byte order mark, refuses UTF-16 and binary inputs at line 1 (an input is
// binary when its first line and most lines of its first 4 KiB are not
// text), and rejects alone each line longer than MaxLineBytes or holding a
// NUL byte. A CSV record is one line: a quote left open is that line's
// error. A JSON string holding \u0000 rejects its record; invalid UTF-8 is
// stored as U+FFFD.
package ingest
