// Command drainscope answers "why did this deployment drop requests?".
//
// It records EndpointSlice and Pod transitions (watcher), what the kernel did
// to the pods' processes and sockets (ebpf), and the failures clients saw
// (ingest), in one store, and lines them up (analysis, web).
//
// Each subcommand lives in a file of its own name.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/drainscope/drainscope/kubectl"
	"github.com/drainscope/drainscope/store"
)

// command is one subcommand: its flags are registered on fs, run does the work.
type command struct {
	summary string
	run     func(ctx context.Context, fs *flag.FlagSet, args []string) error
}

var commands = map[string]command{
	"agent":   {"record pod, endpoint and kernel events on this node", runAgent},
	"serve":   {"serve the web timeline and the JSON API", runServe},
	"import":  {"import client failures from load-test or proxy logs", runImport},
	"report":  {"print rollouts, pod timelines, failures by cause and fixes", runReport},
	"check":   {"judge each workload's termination budget before its next rollout", runCheck},
	"migrate": {"apply the store's schema migrations and print its version", runMigrate},
	"version": {"print drainscope's version", runVersion},
}

// errUsage marks an error in the command line; main exits 2 for it.
var errUsage = errors.New("usage")

func main() {
	if kubectl.IsPlugin(os.Args[0]) { // installed as kubectl-drainscope
		os.Exit(kubectl.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name := args[0]
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "drainscope: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("drainscope "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logs := &logFormat{w: stderr}
	logs.Set("text")
	fs.Var(logs, "log-format", "log lines as `text` (logfmt) or json (one object a line: time, level, msg, …)")
	err := cmd.run(ctx, fs, args[1:])
	code := 1
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		code = 2
	}
	msg := fmt.Sprintf("drainscope %s: %s", name, store.Redact(err.Error()))
	if logs.json {
		// A log store parsing JSON lines keeps the reason a command ended.
		slog.Error(msg, "command", name, "exit_code", code)
	} else {
		fmt.Fprintln(stderr, msg)
	}
	return code
}

// logFormat is --log-format, which every command takes: setting it
// installs the default slog logger (and client-go's klog, which logs
// through it) for the rest of the command, so that each line of a
// container's log is in one format.
type logFormat struct {
	w    io.Writer
	json bool
	hint string // added to the error for a bad value
}

func (f *logFormat) String() string {
	if f != nil && f.json {
		return "json"
	}
	return "text"
}

func (f *logFormat) Set(s string) error {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: redactAttr}
	var h slog.Handler
	switch s {
	case "text":
		h = slog.NewTextHandler(f.w, opts)
	case "json":
		h = slog.NewJSONHandler(f.w, opts)
	default:
		return errors.New("want text or json" + f.hint) // the flag package names the flag and the value
	}
	f.json = s == "json"
	slog.SetDefault(slog.New(h))
	klog.SetSlogLogger(slog.Default())
	return nil
}

// redactAttr masks DSN passwords in every logged string and error, from
// any package: a DSN may reach a log line inside an error.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value.Any().(type) {
	case string:
		if r := store.Redact(v); r != v {
			a.Value = slog.StringValue(r)
		}
	case error:
		a.Value = slog.StringValue(store.Redact(v.Error()))
	}
	return a
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: drainscope COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'drainscope COMMAND -h' for a command's flags.")
}

// parseFlags parses args and rejects stray positional arguments unless
// positional is true.
func parseFlags(fs *flag.FlagSet, args []string, positional bool) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		// The flag package has printed the error and the usage.
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if !positional && fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}
