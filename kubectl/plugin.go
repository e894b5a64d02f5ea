// Package kubectl is drainscope's kubectl plugin, kubectl-drainscope:
// `kubectl drainscope report deploy/NAME` and `kubectl drainscope
// rollouts`. It finds the drainscope server in the cluster by the Service
// the Helm chart labels, reaches it through the API server as kubectl
// port-forward does, and prints what the server's JSON API answers; or it
// serves that API in process over a store named with --dsn.
package kubectl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/duration"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/web"
)

// Name is the name kubectl finds the plugin by: `kubectl drainscope`
// runs the first kubectl-drainscope on PATH, which may be drainscope's
// own binary under that name.
const Name = "kubectl-drainscope"

// errUsage marks an error in the command line; Main exits 2 for it.
var errUsage = errors.New("usage")

// serverSelector is what the chart labels the server's Service with.
const serverSelector = "app.kubernetes.io/part-of=drainscope,app.kubernetes.io/component=server"

const pluginUsage = `usage: kubectl drainscope report TYPE/NAME [--since 1h] [--format text|json] [flags]
       kubectl drainscope rollouts [--since 1h] [-A] [--format text|json] [flags]

report prints what drainscope found in the disruptions of one workload
(deploy/NAME, sts/NAME or ds/NAME in -n NAMESPACE) since --since: each
rollout, scale-down, deletion or eviction with its pods, its client
failures and the failures the pods' kernel events prove, by cause, with the
fix. rollouts lists the recent disruptions of every workload.

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
	if sub != "report" && sub != "rollouts" {
		fmt.Fprintf(stderr, "kubectl drainscope: unknown command %q: want report or rollouts (kubectl drainscope -h)\n", sub)
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

	var api *apiClient
	var cs kubernetes.Interface
	if pf.dsn != "" {
		// A reader's typo must not leave an empty store behind, which
		// opening a SQLite path would make.
		if backend, target, err := store.Backend(pf.dsn); err == nil && backend == store.BackendSQLite {
			file, _, _ := strings.Cut(target, "?")
			if _, err := os.Stat(file); err != nil {
				return fmt.Errorf("%w: --dsn: no store at %s: %v", errUsage, file, err)
			}
		}
		st, err := store.Open(ctx, pf.dsn)
		if err != nil {
			return err
		}
		defer st.Close()
		h := web.New(web.Options{Store: st, Log: slog.New(slog.DiscardHandler), Context: ctx})
		defer h.Close()
		api = &apiClient{base: "http://drainscope", client: &http.Client{Transport: handlerTransport{h}}, where: "the store " + st.Describe()}
	} else {
		rc, err := cfg.ClientConfig()
		if err != nil {
			return fmt.Errorf("reading the kubeconfig: %w", err)
		}
		if cs, err = kubernetes.NewForConfig(rc); err != nil {
			return fmt.Errorf("making the Kubernetes client: %w", err)
		}
		srv, err := findServer(ctx, cs, pf.serverNS, pf.service)
		if err != nil {
			return err
		}
		token := pf.token
		if token == "" {
			if token, err = serverToken(ctx, cs, srv.pod); err != nil {
				return err
			}
		}
		fwd, err := forward(ctx, rc, srv)
		if err != nil {
			return err
		}
		defer fwd.Close()
		api = &apiClient{base: fwd.url, token: token, client: &http.Client{Timeout: 3 * time.Minute}, where: srv.String()}
	}

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
	}
	exists := "unknown" // with --dsn no cluster is asked
	if cs != nil {
		if exists, err = workloadExists(ctx, cs, ns, ref); err != nil {
			return err
		}
	}
	return pluginReport(ctx, api, ns, ref, exists, from, now, pf.format, stdout)
}

// workloadExists asks the API server for the workload: "yes" or "no".
func workloadExists(ctx context.Context, cs kubernetes.Interface, ns string, ref workloadRef) (string, error) {
	var err error
	switch ref.Kind {
	case "Deployment":
		_, err = cs.AppsV1().Deployments(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	case "StatefulSet":
		_, err = cs.AppsV1().StatefulSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	case "DaemonSet":
		_, err = cs.AppsV1().DaemonSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	}
	switch {
	case err == nil:
		return "yes", nil
	case apierrors.IsNotFound(err):
		return "no", nil
	}
	return "", fmt.Errorf("looking up %s %s/%s: %w", strings.ToLower(ref.Kind), ns, ref.Name, err)
}

// server is the drainscope server found in the cluster: its Service and
// the ready pod behind it that the plugin forwards to.
type server struct {
	svc  *corev1.Service
	pod  *corev1.Pod
	port int32 // the pod's port behind the Service's http port
}

func (s server) String() string {
	return fmt.Sprintf("the drainscope server %s/%s (pod %s)", s.svc.Namespace, s.svc.Name, s.pod.Name)
}

// findServer finds the server's Service in ns by the chart's labels (or
// by name), a ready pod behind it and the pod's port for the Service's
// http port.
func findServer(ctx context.Context, cs kubernetes.Interface, ns, name string) (server, error) {
	var svc *corev1.Service
	if name != "" {
		got, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return server{}, fmt.Errorf("no Service %q in namespace %s (--service)", name, ns)
		}
		if err != nil {
			return server{}, fmt.Errorf("looking up the drainscope server's Service %s/%s: %w", ns, name, err)
		}
		svc = got
	} else {
		list, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: serverSelector})
		if err != nil {
			return server{}, fmt.Errorf("looking for the drainscope server in namespace %s: %w", ns, err)
		}
		switch len(list.Items) {
		case 0:
			return server{}, fmt.Errorf("no drainscope server found in namespace %s: no Service there is labelled %s (install the chart there, pass --server-namespace NS, or read a store with --dsn)", ns, serverSelector)
		case 1:
			svc = &list.Items[0]
		default:
			var names []string
			for _, s := range list.Items {
				names = append(names, s.Name)
			}
			return server{}, fmt.Errorf("more than one drainscope server in namespace %s (%s): pass --service NAME", ns, strings.Join(names, ", "))
		}
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if p := &svc.Spec.Ports[i]; p.Name == "http" || len(svc.Spec.Ports) == 1 {
			sp = p
			break
		}
	}
	if sp == nil {
		return server{}, fmt.Errorf("Service %s/%s has no port named http", svc.Namespace, svc.Name)
	}
	if len(svc.Spec.Selector) == 0 {
		return server{}, fmt.Errorf("Service %s/%s selects no pods (no spec.selector)", svc.Namespace, svc.Name)
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector).String()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return server{}, fmt.Errorf("listing the pods of Service %s/%s: %w", ns, svc.Name, err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; podReady(p) {
			pod = p
			break
		}
	}
	if pod == nil {
		return server{}, fmt.Errorf("the drainscope server's Service %s/%s has no ready pod (%d pods match %s; kubectl -n %s get pods -l %s)", ns, svc.Name, len(pods.Items), sel, ns, sel)
	}
	port, err := podPort(pod, sp.TargetPort, sp.Port)
	if err != nil {
		return server{}, fmt.Errorf("Service %s/%s port %s: %w", ns, svc.Name, sp.Name, err)
	}
	return server{svc: svc, pod: pod, port: port}, nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podPort is the container port a Service's targetPort names.
func podPort(p *corev1.Pod, target intstr.IntOrString, port int32) (int32, error) {
	switch {
	case target.Type == intstr.Int && target.IntVal != 0:
		return target.IntVal, nil
	case target.Type == intstr.Int:
		return port, nil // no targetPort: the Service's port
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == target.StrVal {
				return cp.ContainerPort, nil
			}
		}
	}
	return 0, fmt.Errorf("pod %s has no container port named %q", p.Name, target.StrVal)
}

// serverToken reads the token the server's pod is given, as the chart
// gives it: DRAINSCOPE_AUTH_TOKEN from a Secret (or as a value). A server
// without one needs none.
func serverToken(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (string, error) {
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name != "DRAINSCOPE_AUTH_TOKEN" {
				continue
			}
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				return e.Value, nil
			}
			ref := e.ValueFrom.SecretKeyRef
			sec, err := cs.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return "", fmt.Errorf("reading the server's token from Secret %s/%s: %w (or pass --auth-token, env DRAINSCOPE_AUTH_TOKEN)", pod.Namespace, ref.Name, err)
			}
			v, ok := sec.Data[ref.Key]
			if !ok {
				return "", fmt.Errorf("Secret %s/%s has no key %q, which the server's pod takes DRAINSCOPE_AUTH_TOKEN from", pod.Namespace, ref.Name, ref.Key)
			}
			return string(v), nil
		}
	}
	return "", nil
}

// forwarded is a port-forward to the server's pod on a loopback port.
type forwarded struct {
	url  string
	stop chan struct{}
	done chan error
}

func (f *forwarded) Close() {
	close(f.stop)
	<-f.done
}

// forward opens a port-forward to the server's pod through the API
// server's pods/portforward subresource, as kubectl port-forward does
// (WebSocket first, SPDY when the API server or a proxy refuses it), on a
// free port of 127.0.0.1.
//
// Port-forward rather than the Service proxy subresource: the API server
// deletes the Authorization header of a proxied request once it has
// authenticated the caller, so the server's bearer token cannot pass
// through it; and the proxy connects from the API server's own address,
// which the chart's NetworkPolicy (networkPolicy.serverFrom) may not
// admit, where a port-forward arrives inside the pod's network namespace.
func forward(ctx context.Context, rc *rest.Config, s server) (*forwarded, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(s.pod.Namespace).Name(s.pod.Name).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, rc); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	f := &forwarded{stop: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", s.port)}, f.stop, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", s.pod.Namespace, s.pod.Name, err)
	}
	go func() { f.done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-f.done:
		return nil, fmt.Errorf("port-forward to pod %s/%s port %d through the API server: %w", s.pod.Namespace, s.pod.Name, s.port, err)
	case <-ctx.Done():
		close(f.stop)
		<-f.done
		return nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		f.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s: no local port: %v", s.pod.Namespace, s.pod.Name, err)
	}
	f.url = fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local)
	return f, nil
}

// handlerTransport serves requests with an in-process handler: with --dsn
// the plugin asks the same API, served over the store it opened.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// apiClient asks the server's JSON API.
type apiClient struct {
	base   string
	token  string
	client *http.Client
	where  string // for errors: what answered
}

func (c *apiClient) get(ctx context.Context, path string, q url.Values, into any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("asking %s for %s: %w", c.where, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("reading %s's answer for %s: %w", c.where, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if resp.StatusCode == http.StatusUnauthorized {
			msg += " (check --auth-token, env DRAINSCOPE_AUTH_TOKEN)"
		}
		return fmt.Errorf("%s answered %s for %s: %s", c.where, resp.Status, path, msg)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("%s's answer for %s is not what this plugin reads (a different drainscope version?): %w", c.where, path, err)
	}
	return nil
}

// listAnswer is the part of GET /api/v1/rollouts the plugin reads.
type listAnswer struct {
	Rollouts []web.RolloutSummary `json:"rollouts"`
	Total    int                  `json:"total"`
	Pending  int                  `json:"pending"`
}

// rolloutList asks for the disruptions of the window, waiting a while for
// those whose analysis the server is still reading.
func (c *apiClient) rolloutList(ctx context.Context, q url.Values) (listAnswer, json.RawMessage, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var raw json.RawMessage
		if err := c.get(ctx, "/api/v1/rollouts", q, &raw); err != nil {
			return listAnswer{}, nil, err
		}
		var l listAnswer
		if err := json.Unmarshal(raw, &l); err != nil {
			return l, nil, fmt.Errorf("%s's rollouts list: %w", c.where, err)
		}
		if l.Pending == 0 || time.Now().After(deadline) {
			return l, raw, nil
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return l, nil, ctx.Err()
		}
	}
}

func windowQuery(from, to time.Time) url.Values {
	return url.Values{"from": {strconv.FormatInt(from.UnixNano(), 10)}, "to": {strconv.FormatInt(to.UnixNano(), 10)}}
}

// alignmentAnswer is the part of GET …/alignment the report prints.
type alignmentAnswer struct {
	Rollout        web.RolloutSummary `json:"rollout"`
	Causes         []causeAnswer      `json:"causes"`
	InferredCauses []causeAnswer      `json:"inferred_causes"`
	Legend         []causeAnswer      `json:"legend"` // every cause's title and fix
}

type causeAnswer struct {
	Cause       string `json:"cause"`
	Title       string `json:"title"`
	Count       int    `json:"count"`
	Explanation string `json:"explanation"`
	Fix         string `json:"fix"`
	Pods        []struct {
		Pod   string `json:"pod"`
		Count int    `json:"count"`
	} `json:"pods"`
}

func pluginReport(ctx context.Context, api *apiClient, ns string, ref workloadRef, exists string, from, to time.Time, format string, w io.Writer) error {
	q := windowQuery(from, to)
	q.Set("namespace", ns)
	q.Set("workload", ref.Kind+"/"+ref.Name)
	list, _, err := api.rolloutList(ctx, q)
	if err != nil {
		return err
	}
	if len(list.Rollouts) == 0 && exists == "no" {
		return fmt.Errorf("no %s %q in namespace %s, and drainscope recorded no disruption of one since %s", strings.ToLower(ref.Kind), ref.Name, ns, from.UTC().Format(time.RFC3339))
	}
	var raws []json.RawMessage
	var als []alignmentAnswer
	for _, r := range list.Rollouts {
		var raw json.RawMessage
		if err := api.get(ctx, r.Links.API+"/alignment", nil, &raw); err != nil {
			return err
		}
		var a alignmentAnswer
		if err := json.Unmarshal(raw, &a); err != nil {
			return fmt.Errorf("%s's alignment of %s: %w", api.where, r.ID, err)
		}
		if format != "json" {
			event.DisplayFields(&a) // every name came from the cluster or a client's log
		}
		raws, als = append(raws, raw), append(als, a)
	}
	if format == "json" {
		out := struct {
			Namespace   string            `json:"namespace"`
			Kind        string            `json:"workload_kind"`
			Name        string            `json:"workload_name"`
			Exists      string            `json:"exists"` // yes, no, or unknown (--dsn)
			From        time.Time         `json:"from"`
			To          time.Time         `json:"to"`
			Total       int               `json:"total"`
			Disruptions []json.RawMessage `json:"disruptions"`
		}{ns, ref.Kind, ref.Name, exists, from.UTC(), to.UTC(), list.Total, raws}
		if out.Disruptions == nil {
			out.Disruptions = []json.RawMessage{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "%s %s/%s: %s since %s (from %s)\n", ref.Kind, ns, ref.Name, plural(len(als), "disruption"), from.UTC().Format("2006-01-02 15:04:05 MST"), api.where)
	if exists == "no" {
		fmt.Fprintf(w, "(the %s no longer exists; these are drainscope's records of it)\n", strings.ToLower(ref.Kind))
	}
	if list.Total > len(als) {
		fmt.Fprintf(w, "(the newest %d of %d are shown: narrow --since)\n", len(als), list.Total)
	}
	for _, a := range als {
		writeDisruption(w, a)
	}
	return nil
}

// triggers says what began a disruption, in words.
var triggers = map[string]string{
	"template": "rollout (new pod template)", "scale": "scale-down (change of replicas)", "deleted": "deletion of the workload",
	"eviction": "eviction", "preemption": "preemption", "taint": "taint eviction", "node-pressure": "node-pressure eviction",
	"pod-deleted": "pod deletion", "oom": "OOM kill", "restart": "container restart",
}

func writeDisruption(w io.Writer, a alignmentAnswer) {
	s := a.Rollout
	trig := triggers[s.Trigger]
	if trig == "" {
		trig = "disruption"
		if s.Trigger != "" {
			trig = s.Trigger
		}
	}
	start := time.Unix(0, s.From).UTC()
	fmt.Fprintf(w, "\n%s at %s", trig, start.Format("2006-01-02 15:04:05.000 MST"))
	if s.To > s.From {
		fmt.Fprintf(w, ", over %s", seconds(s.To-s.From))
	}
	fmt.Fprintf(w, ": %s replaced, %s ready", plural(s.PodsReplaced, "pod"), plural(s.NewPods, "new pod"))
	if s.Live {
		fmt.Fprint(w, " (still going on)")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %s reported by clients, %d proven or made likely by the pods' kernel events", plural(s.Failures, "failure"), s.Inferred)
	if s.Unattributed > 0 {
		fmt.Fprintf(w, ", %d not tied to a pod", s.Unattributed)
	}
	fmt.Fprintln(w)
	if s.WorstGap != nil {
		g := *s.WorstGap
		if g < 0 {
			fmt.Fprintf(w, "  worst gap: SIGTERM came %s before the last node stopped routing to the pod (the endpoint race window)\n", seconds(-g))
		} else {
			fmt.Fprintf(w, "  worst gap: SIGTERM came %s after the last node stopped routing to the pod\n", seconds(g))
		}
	}
	if s.LongestExitWait != nil {
		fmt.Fprintf(w, "  longest exit after SIGTERM: %s\n", seconds(*s.LongestExitWait))
	}
	writeCauses(w, "causes of the client failures", s.ByCause, a.Causes, a.Legend)
	writeCauses(w, "causes of the failures the kernel evidence shows", s.InferredByCause, a.InferredCauses, a.Legend)
	if s.Failures+s.Inferred == 0 {
		fmt.Fprintln(w, "  no failures")
	}
	fmt.Fprintf(w, "  timeline: %s in drainscope's web UI\n", s.Links.Timeline)
}

// writeCauses prints the disruption's failures by cause. The counts are
// the disruption's own (its summary's); the alignment's causes cover the
// whole window the server analysed, which may hold a neighbouring
// disruption of the same workload, so their explanation (which names
// pods and offsets) is printed only where its count is the disruption's.
func writeCauses[K ~string](w io.Writer, title string, counts map[K]int, causes []causeAnswer, legend []causeAnswer) {
	type row struct {
		cause string
		n     int
	}
	var rows []row
	for c, n := range counts {
		if n > 0 {
			rows = append(rows, row{string(c), n})
		}
	}
	if len(rows) == 0 {
		return
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].n > rows[j].n || rows[i].n == rows[j].n && rows[i].cause < rows[j].cause
	})
	find := func(cs []causeAnswer, cause string) *causeAnswer {
		for i := range cs {
			if cs[i].Cause == cause {
				return &cs[i]
			}
		}
		return nil
	}
	fmt.Fprintf(w, "  %s:\n", title)
	for _, r := range rows {
		c := find(causes, r.cause)
		if c == nil || c.Count != r.n {
			c = find(legend, r.cause)
			if c != nil {
				c = &causeAnswer{Cause: c.Cause, Title: c.Title, Fix: c.Fix}
			}
		}
		if c == nil {
			c = &causeAnswer{Cause: r.cause, Title: r.cause}
		}
		fmt.Fprintf(w, "    %5d  %s", r.n, c.Title)
		if len(c.Pods) > 0 {
			var ps []string
			for i, p := range c.Pods {
				if i == 3 {
					ps = append(ps, fmt.Sprintf("%d more", len(c.Pods)-i))
					break
				}
				ps = append(ps, fmt.Sprintf("%s %d", p.Pod, p.Count))
			}
			fmt.Fprintf(w, " (%s)", strings.Join(ps, ", "))
		}
		fmt.Fprintln(w)
		if c.Explanation != "" {
			fmt.Fprintf(w, "           %s\n", c.Explanation)
		}
		if c.Fix != "" {
			fmt.Fprintf(w, "           fix: %s\n", c.Fix)
		}
	}
}

func pluginRollouts(ctx context.Context, api *apiClient, ns string, from, to time.Time, format string, w io.Writer) error {
	q := windowQuery(from, to)
	if ns != "" {
		q.Set("namespace", ns)
	}
	list, raw, err := api.rolloutList(ctx, q)
	if err != nil {
		return err
	}
	if format == "json" {
		_, err := w.Write(append(raw, '\n'))
		return err
	}
	event.DisplayFields(&list) // every name came from the cluster or a client's log
	where := "namespace " + ns
	if ns == "" {
		where = "all namespaces"
	}
	if len(list.Rollouts) == 0 {
		fmt.Fprintf(w, "no disruptions in %s since %s (from %s)\n", where, from.UTC().Format("2006-01-02 15:04:05 MST"), api.where)
		return nil
	}
	fmt.Fprintf(w, "%-16s %-36s %-12s %-20s %5s %8s %8s  %s\n", "NAMESPACE", "WORKLOAD", "TRIGGER", "STARTED (UTC)", "PODS", "FAILURES", "INFERRED", "TOP CAUSE")
	for _, r := range list.Rollouts {
		trig := r.Trigger
		if trig == "" {
			trig = "-"
		}
		top := topCause(r.ByCause)
		if top == "" {
			top = topCause(r.InferredByCause)
		}
		if top == "" {
			top = "-"
		}
		fmt.Fprintf(w, "%-16s %-36s %-12s %-20s %5d %8d %8d  %s\n", r.Namespace, r.WorkloadKind+"/"+r.WorkloadName, trig,
			time.Unix(0, r.From).UTC().Format("2006-01-02 15:04:05"), r.PodsReplaced, r.Failures, r.Inferred, top)
	}
	if list.Total > len(list.Rollouts) {
		fmt.Fprintf(w, "(the newest %d of %d are shown: narrow --since)\n", len(list.Rollouts), list.Total)
	}
	return nil
}

func topCause[K ~string](m map[K]int) string {
	var best K
	n := 0
	for k, v := range m {
		if v > n || v == n && k < best {
			best, n = k, v
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s (%d)", best, n)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func seconds(ns int64) string {
	if ns < 1e9 && ns > -1e9 {
		return fmt.Sprintf("%.1f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2f s", float64(ns)/1e9)
}

// IsPlugin reports whether a binary run as argv0 runs as kubectl's
// plugin: under the name kubectl looks for.
func IsPlugin(argv0 string) bool {
	return strings.TrimSuffix(filepath.Base(argv0), ".exe") == Name
}
