// Package kubectl is drainscope's kubectl plugin, kubectl-drainscope:
// `kubectl drainscope report deploy/NAME`, `kubectl drainscope
// rollouts` and `kubectl drainscope check [deploy/NAME]`. It finds the drainscope server in the cluster by the Service
// the Helm chart labels, reaches it through the API server as kubectl
// port-forward does, and prints what the server's JSON API answers; or it
// serves that API in process over a store named with --dsn.
//
// plugin.go runs a command; flags.go reads the command line, discovery.go
// finds the server in the cluster and port-forwards to it, client.go asks
// its API (decoding web's own answer types), and output.go prints them.
package kubectl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/duration"
	"github.com/drainscope/drainscope/store"
)

// Name is the name kubectl finds the plugin by: `kubectl drainscope`
// runs the first kubectl-drainscope on PATH, which may be drainscope's
// own binary under that name.
const Name = "kubectl-drainscope"

// IsPlugin reports whether a binary run as argv0 runs as kubectl's
// plugin: under the name kubectl looks for.
func IsPlugin(argv0 string) bool {
	return strings.TrimSuffix(filepath.Base(argv0), ".exe") == Name
}

// errUsage marks an error in the command line; Main exits 2 for it.
var errUsage = errors.New("usage")

// Main runs the plugin with args (without the program name) and returns
// the exit code: 2 for a bad command line, 1 for any other failure.
func Main(args []string, stdout, stderr io.Writer) int {
	stderr = event.NewDisplayWriter(stderr, event.MaxDisplayLine) // errors quote the server's answers
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fs := newPluginFlags(&pluginFlags{})
		fs.SetOutput(stderr)
		fs.Usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub := args[0]
	if sub != "report" && sub != "rollouts" && sub != "check" {
		fmt.Fprintf(stderr, "kubectl drainscope: unknown command %q: want report, rollouts or check (kubectl drainscope -h)\n", sub)
		return 2
	}
	pf := &pluginFlags{}
	fs := newPluginFlags(pf)
	fs.SetOutput(stderr)
	// client-go logs through klog; its port-forward chatter is no news.
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "kubectl drainscope %s: %s (kubectl drainscope -h)\n", sub, err)
		return 2
	}
	err := pf.run(ctx, sub, fs.Args(), stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "kubectl drainscope %s: %s\n", sub, store.Redact(err.Error()))
		return 2
	default:
		fmt.Fprintf(stderr, "kubectl drainscope %s: %s\n", sub, store.Redact(err.Error()))
		return 1
	}
}

func (pf *pluginFlags) run(ctx context.Context, sub string, args []string, stdout io.Writer) error {
	if pf.format != "text" && pf.format != "json" {
		return fmt.Errorf("%w: --format %q: want text or json", errUsage, pf.format)
	}
	now := time.Now()
	from, err := duration.Before(pf.since, now)
	if err != nil {
		return fmt.Errorf("%w: --since: %v", errUsage, err)
	}
	var ref workloadRef
	switch sub {
	case "report":
		if len(args) != 1 {
			return fmt.Errorf("%w: report takes one workload, TYPE/NAME (e.g. deploy/web); got %d arguments", errUsage, len(args))
		}
		if ref, err = parseWorkloadRef(args[0]); err != nil {
			return err
		}
		if pf.allNamespaces {
			return fmt.Errorf("%w: report reads one workload: -A is for rollouts", errUsage)
		}
	case "rollouts":
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q", errUsage, args[0])
		}
	case "check":
		switch len(args) {
		case 0:
		case 1:
			if ref, err = parseWorkloadRef(args[0]); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: check takes at most one workload, TYPE/NAME; got %d arguments", errUsage, len(args))
		}
	}
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(pf.loading, pf.overrides)
	ns, _, err := cfg.Namespace()
	if err != nil {
		if pf.dsn == "" {
			return fmt.Errorf("reading the kubeconfig: %w", err)
		}
		ns = ""
	}
	if ns == "" {
		ns = "default"
	}

	api, cs, closeAPI, err := pf.connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeAPI()

	// Every name and error in the answer came from the cluster or a
	// client's log: shown escaped, and text lines bounded. JSON escapes
	// its own C0 controls; the writer's \u escapes of C1 controls and
	// bidirectional overrides are JSON's own.
	maxLine := event.MaxDisplayLine
	if pf.format == "json" {
		maxLine = 0
	}
	stdout = event.NewDisplayWriter(stdout, maxLine)
	switch sub {
	case "rollouts":
		if pf.allNamespaces {
			ns = ""
		}
		return pluginRollouts(ctx, api, ns, from, now, pf.format, stdout)
	case "check":
		if pf.allNamespaces && ref.Name == "" {
			ns = ""
		}
		return pluginCheck(ctx, api, ns, ref, from, now, pf.format, stdout)
	}
	exists := "unknown" // with --dsn no cluster is asked
	if cs != nil {
		if exists, err = workloadExists(ctx, cs, ns, ref); err != nil {
			return err
		}
	}
	return pluginReport(ctx, api, ns, ref, exists, from, now, pf.format, stdout)
}
