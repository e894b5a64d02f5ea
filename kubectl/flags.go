package kubectl

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/drainscope/drainscope/event"
)

const pluginUsage = `usage: kubectl drainscope report TYPE/NAME [--since 1h] [--format text|json] [flags]
       kubectl drainscope rollouts [--since 1h] [-A] [--format text|json] [flags]
       kubectl drainscope check [TYPE/NAME] [--since 24h] [-A] [--format text|json] [flags]

report prints what drainscope found in the disruptions of one workload
(deploy/NAME, sts/NAME or ds/NAME in -n NAMESPACE) since --since: each
rollout, scale-down, deletion or eviction with its pods, its client
failures and the failures the pods' kernel events prove, by cause, with the
fix and the patch computed from this cluster. rollouts lists the recent
disruptions of every workload. check judges each workload's termination
budget (its preStop's wait, its grace period) against what the cluster was
measured to need since --since, before its next rollout, and prints the
patch for the risky ones.

The answers come from the drainscope server (drainscope serve) in
--server-namespace, found by the Service the Helm chart labels
app.kubernetes.io/component=server, reached as 'kubectl port-forward' does
(the API server's pods/portforward subresource: this needs 'create
pods/portforward' and 'get pods, services' there). Its token is read from
the Secret the server's pod takes DRAINSCOPE_AUTH_TOKEN from ('get secrets'),
unless --auth-token or DRAINSCOPE_AUTH_TOKEN gives it. With --dsn the store
is read directly instead, and no cluster is needed.

Flags:
`

// pluginFlags are the plugin's flags: kubectl's own for the cluster, and
// drainscope's.
type pluginFlags struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides

	allNamespaces bool
	since         string
	format        string
	serverNS      string
	service       string
	token         string
	dsn           string
}

func newPluginFlags(pf *pluginFlags) *pflag.FlagSet {
	fs := pflag.NewFlagSet(Name, pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), pluginUsage)
		fs.PrintDefaults()
	}
	pf.loading = clientcmd.NewDefaultClientConfigLoadingRules()
	pf.overrides = &clientcmd.ConfigOverrides{}
	fs.StringVar(&pf.loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&pf.overrides.CurrentContext, "context", "", "the kubeconfig context to use")
	fs.StringVarP(&pf.overrides.Context.Namespace, "namespace", "n", "", "the workload's namespace (default: the context's)")
	fs.BoolVarP(&pf.allNamespaces, "all-namespaces", "A", false, "rollouts: list the disruptions of every namespace")
	fs.StringVar(&pf.since, "since", "1h", "start of the window: a duration before now (90m, 2h, 1d) or an RFC 3339 time")
	fs.StringVarP(&pf.format, "format", "o", "text", "output format: text or json")
	fs.StringVar(&pf.serverNS, "server-namespace", envOr("DRAINSCOPE_NAMESPACE", "drainscope"), "namespace of the drainscope server (env DRAINSCOPE_NAMESPACE)")
	fs.StringVar(&pf.service, "service", "", "the server's Service, when the namespace has more than one labelled "+serverSelector)
	fs.StringVar(&pf.token, "auth-token", os.Getenv("DRAINSCOPE_AUTH_TOKEN"), "the server's token (env DRAINSCOPE_AUTH_TOKEN; default: read from the Secret the server's pod takes it from)")
	fs.StringVar(&pf.dsn, "dsn", "", "read this store (postgres://… or a SQLite file) instead of asking the server in the cluster")
	return fs
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// workloadRef is a workload named on the command line.
type workloadRef struct {
	Kind, Name string
	resource   string // the word the user gave (deploy, sts …)
}

// workloadKinds maps kubectl's names for a workload (short, singular,
// plural, with the group) to its kind.
var workloadKinds = map[string]string{
	"deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
	"sts": "StatefulSet", "statefulset": "StatefulSet", "statefulsets": "StatefulSet",
	"ds": "DaemonSet", "daemonset": "DaemonSet", "daemonsets": "DaemonSet",
}

// ParseWorkload reads TYPE/NAME as kubectl does (a short, singular or
// plural name, with the group or without), for drainscope's own commands
// too.
func ParseWorkload(s string) (event.Workload, error) {
	ref, err := parseWorkloadRef(s)
	return event.Workload{Kind: ref.Kind, Name: ref.Name}, err
}

// parseWorkloadRef reads TYPE/NAME as kubectl does.
func parseWorkloadRef(s string) (workloadRef, error) {
	typ, name, ok := strings.Cut(s, "/")
	if !ok || typ == "" || name == "" || strings.Contains(name, "/") {
		return workloadRef{}, fmt.Errorf("%w: %q: want TYPE/NAME, e.g. deploy/web", errUsage, s)
	}
	kind, ok := workloadKinds[strings.TrimSuffix(strings.ToLower(typ), ".apps")]
	if !ok {
		return workloadRef{}, fmt.Errorf("%w: unknown workload kind %q in %q: want deployment (deploy), statefulset (sts) or daemonset (ds)", errUsage, typ, s)
	}
	return workloadRef{Kind: kind, Name: name, resource: typ}, nil
}
