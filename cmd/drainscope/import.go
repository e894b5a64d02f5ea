package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/store"
)

const importUsage = `usage: drainscope import --format FORMAT [--strict] [--nginx-format STR] [--store DSN] FILE… | -

Reads client or proxy logs (gzip or plain; - is standard input) and stores
each failed request as a client_failure event, attributed to the pod that
held the upstream address at that time when the store knows it. Successful
requests are counted, not stored. Importing the same file twice stores
nothing twice.

Formats:
`

func runImport(ctx context.Context, fs *flag.FlagSet, args []string) error {
	format := fs.String("format", "", "input format (required): "+strings.Join(ingest.FormatNames(), ", "))
	strict := fs.Bool("strict", false, "store nothing from a file that has any bad line (default: store the good lines, report the bad)")
	nginxFormat := fs.String("nginx-format", "", "nginx log_format string, bare or as written in nginx.conf (default: combined + $upstream_addr $upstream_status $request_time)")
	failStatus := fs.String("fail-status", "500-599", "HTTP statuses that count as failures, e.g. 500-599,429")
	dsn := fs.String("store", os.Getenv("DRAINSCOPE_STORE"), "store DSN: postgres://… or a SQLite file path (default: "+store.DefaultPath()+"; env DRAINSCOPE_STORE)")
	dryRun := fs.Bool("dry-run", false, "read and count, store nothing")
	pod := fs.String("pod", "", "istio-proxy, linkerd-proxy: the pod (NAMESPACE/NAME) whose proxy's log this is")
	container := fs.String("container", "", "istio-proxy, linkerd-proxy: the proxy's container (default istio-proxy, linkerd-proxy)")
	proxyName := fs.String("proxy-name", "", "envoy-clusters, target-health: the envoy instance or load balancer the snapshots are of, recorded as the node of its endpoint changes (default: the file's base name without extension; envoy, alb or gcp-lb for standard input)")
	baselineAdded := fs.Bool("baseline-added", true, "envoy-clusters: record the first snapshot's healthy hosts as added at its time, so the proxy's view of them starts there (false: the first snapshot is only the baseline)")
	errorLog := fs.String("error-log", "", "nginx, ingress-nginx: the proxy's error log (gzip or plain), read first: each failed access log line an entry of it explains takes its mechanism (connect refused, timed out, reset, prematurely closed)")
	timeZone := fs.String("time-zone", "", "nginx-error, haproxy: the zone of times the log writes without one (IANA name such as Europe/Paris, or UTC; default UTC)")
	service := fs.String("service", "", "target-health: the Kubernetes Service (namespace/name) the target group or backend service serves (default: the one each snapshot's # line names)")
	clientTimeout := fs.Duration("client-timeout", 0, "the clients' request timeout: a timeout logged with no duration (and no timeout_ms) lasted this long, so it is aligned at its start (default: unknown)")
	window := registerWindow(fs)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, importUsage)
		for _, f := range ingest.Formats() {
			fmt.Fprintf(w, "  %-14s %s\n", f.Name, f.Summary)
		}
		fmt.Fprintln(w, "\nExit status: 0 when every file was read (rejected lines are listed in the summary),\n1 when a file could not be read, had no readable line, or (--strict) had a bad line.\n\nFlags:")
		fs.PrintDefaults()
	}
	if lf, ok := fs.Lookup("log-format").Value.(*logFormat); ok {
		lf.hint = " (the nginx log_format is --nginx-format)"
	}
	if err := parseFlags(fs, args, true); err != nil {
		return err
	}
	// Flags may follow the files too: drainscope import access.log --format nginx.
	var files []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		files = append(files, rest[0])
		if err := fs.Parse(rest[1:]); err != nil {
			return err
		}
	}
	if *format == "" {
		return fmt.Errorf("%w: --format is required (one of %s)", errUsage, strings.Join(ingest.FormatNames(), ", "))
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: name the files to import, or - for standard input", errUsage)
	}
	f, err := ingest.LookupFormat(*format)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	codes, err := ingest.ParseCodeSet(*failStatus)
	if err != nil {
		return fmt.Errorf("%w: --fail-status: %v", errUsage, err)
	}
	if *clientTimeout < 0 {
		return fmt.Errorf("%w: --client-timeout %v: want a positive duration", errUsage, *clientTimeout)
	}
	opts := ingest.Options{LogFormat: *nginxFormat, FailStatus: codes, ProxyName: *proxyName, BaselineOnly: !*baselineAdded, Service: *service,
		Pod: *pod, Container: *container,
		ClientTimeout: *clientTimeout}
	if *timeZone != "" {
		loc, err := time.LoadLocation(*timeZone)
		if err != nil {
			return fmt.Errorf("%w: --time-zone: %v", errUsage, err)
		}
		opts.TimeZone = loc
	}
	if *service != "" && strings.Count(*service, "/") != 1 {
		return fmt.Errorf("%w: --service %q: want namespace/name", errUsage, *service)
	}
	if *errorLog != "" {
		if !f.ErrorLog {
			return fmt.Errorf("%w: --error-log joins %s only, not %s", errUsage, ingest.FormatsWith(func(f ingest.Format) bool { return f.ErrorLog }), f.Name)
		}
		fh, err := os.Open(*errorLog)
		if err != nil {
			return err
		}
		el, err := ingest.LoadNginxErrorLog(*errorLog, fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("reading %s: %w", *errorLog, err)
		}
		for i, e := range el.Rejected {
			if i == 5 {
				fmt.Fprintf(os.Stderr, "  … and %d more\n", len(el.Rejected)-5)
				break
			}
			fmt.Fprintf(os.Stderr, "%v\n", e)
		}
		fmt.Fprintf(os.Stdout, "%s: %d upstream failures, %d lines rejected\n", *errorLog, el.Entries, len(el.Rejected))
		opts.ErrorLog = el
		defer func() {
			fmt.Fprintf(os.Stdout, "%s: %d of %d upstream failures explain a failed access log line\n", *errorLog, el.Matched, el.Entries)
		}()
	}
	parse, err := f.Parser(opts)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	parse = ingest.Bounded(parse, window.window())
	var parserFor func(string) ingest.Parser
	if f.ProxyPerFile && *proxyName == "" {
		parserFor = func(name string) ingest.Parser {
			o := opts
			if name != "(stdin)" {
				o.ProxyName = strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
			}
			p, _ := f.Parser(o) // checked above with the same options but the name
			return ingest.Bounded(p, window.window())
		}
	}
	stdin := 0
	for _, name := range files {
		if name == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return fmt.Errorf("%w: - (standard input) can be named once", errUsage)
	}

	im := &ingest.Importer{Parser: parse, ParserFor: parserFor, Strict: *strict, Progress: &ingest.Progress{}}
	if !*dryRun {
		s, err := store.Open(ctx, *dsn)
		if err != nil {
			return err
		}
		defer s.Close()
		im.Store = s
	}
	return importFiles(ctx, im, files, os.Stdin, os.Stdout, os.Stderr)
}

// importFiles imports each file in turn, printing a summary per file (and a
// total) to out and drawing progress on errOut when it is a terminal.
func importFiles(ctx context.Context, im *ingest.Importer, files []string, stdin io.Reader, out, errOut io.Writer) error {
	showBar := false
	if f, ok := errOut.(*os.File); ok {
		showBar = isatty.IsTerminal(f.Fd())
	}
	total := &ingest.Summary{File: "total"}
	var errs []error
	for _, name := range files {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		var r io.Reader
		var size int64
		if name == "-" {
			r = stdin
			name = "(stdin)"
		} else {
			fh, err := os.Open(name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if st, err := fh.Stat(); err == nil && st.Mode().IsRegular() {
				size = st.Size()
			}
			defer fh.Close() // also closed below; this covers a panic
			r = fh
		}
		im.Progress.SetSize(size)
		stop := func() {}
		if showBar {
			stop = ingest.ShowProgress(errOut, im.Progress, termWidth(), 200*time.Millisecond)
		}
		sum, err := im.Import(ctx, name, r)
		stop()
		if c, ok := r.(io.Closer); ok && r != stdin {
			c.Close()
		}
		sum.WriteTo(out)
		total.Add(sum)
		switch {
		case err != nil:
			errs = append(errs, err)
		case sum.NoGoodLines():
			errs = append(errs, fmt.Errorf("%s: no line could be read (wrong --format, or not a log?)", name))
		}
	}
	if len(files) > 1 {
		fmt.Fprintf(out, "total: %d files, %s\n", len(files), total.Counts())
	}
	return errors.Join(errs...)
}

func termWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 20 {
		return n
	}
	return 100
}
