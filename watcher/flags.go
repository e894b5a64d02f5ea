package watcher

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ClientFlags are the connection flags with kubectl's names and habits:
// --kubeconfig and --context. With neither, a process running in a pod uses
// its service account (in-cluster config); elsewhere $KUBECONFIG or
// ~/.kube/config, as kubectl does.
type ClientFlags struct {
	Kubeconfig string
	Context    string
}

// Register adds the flags to fs.
func (f *ClientFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "path to a kubeconfig file (default: in-cluster config in a pod, else $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.Context, "context", "", "kubeconfig context to use (default: its current context)")
}

// RESTConfig resolves the flags to a client configuration.
func (f *ClientFlags) RESTConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if f.Kubeconfig == "" && f.Context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if f.Kubeconfig != "" {
			rules.ExplicitPath = f.Kubeconfig
		}
		overrides := &clientcmd.ConfigOverrides{CurrentContext: f.Context}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
		if err != nil {
			if clientcmd.IsEmptyConfig(err) {
				return nil, errors.New("no Kubernetes configuration: not in a pod, and no --kubeconfig, $KUBECONFIG or ~/.kube/config")
			}
			return nil, fmt.Errorf("loading kubeconfig: %w", err)
		}
	}
	cfg.UserAgent = "drainscope-watcher"
	return cfg, nil
}

// Clientset is RESTConfig followed by kubernetes.NewForConfig.
func (f *ClientFlags) Clientset() (kubernetes.Interface, error) {
	cfg, err := f.RESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	return cs, nil
}

// Flags are the watcher's command-line flags, for the agent command:
//
//	var wf watcher.Flags
//	wf.Register(fs)
//	... parse ...
//	cs, err := wf.Client.Clientset()
//	opts, err := wf.Options()  // then set opts.Sink, opts.Logger
//	choice := watcher.ChooseMode(ctx, cs, opts.Mode, wf.LeaderAbove) // resolves auto
type Flags struct {
	Client        ClientFlags
	Node          string
	Namespace     string
	SliceSelector string
	AllPods       bool
	Mode          string
	LeaderAbove   int
	Lease         LeaseOptions
	Observe       time.Duration
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	f.Client.Register(fs)
	node := os.Getenv("NODE_NAME")
	if node == "" {
		node, _ = os.Hostname()
	}
	fs.StringVar(&f.Node, "node", node, "name of this node, recorded in every event and used to select its pods (default $NODE_NAME, else the host name)")
	fs.StringVar(&f.Namespace, "namespace", "", "watch only this namespace (default: all)")
	fs.StringVar(&f.SliceSelector, "endpointslice-selector", "", "label selector for the EndpointSlices to record, e.g. kubernetes.io/service-name=web")
	fs.BoolVar(&f.AllPods, "all-pods", false, "watch the pods of every node, not only this node's")
	fs.StringVar(&f.Mode, "endpoints-mode", string(Auto), "who records EndpointSlice transitions: all-nodes (each node; shows the propagation spread), leader (one node, elected with a Lease), or auto (leader past --leader-above-nodes nodes, counted at start; all-nodes up to it)")
	fs.IntVar(&f.LeaderAbove, "leader-above-nodes", LeaderAboveNodes, "with --endpoints-mode auto: the cluster size (nodes at start) past which one elected agent records the EndpointSlices")
	fs.StringVar(&f.Lease.Namespace, "lease-namespace", "", "namespace of the leader Lease (default $POD_NAMESPACE, else default)")
	fs.StringVar(&f.Lease.Name, "lease-name", "drainscope-endpointslices", "name of the leader Lease")
	fs.DurationVar(&f.Observe, "observe-interval", ObserveEvery, "how often to record again the state of every endpoint, pod, container and Service watched (as at the initial list), so that any window of history holds each one's state, and the versions the node runs")
}

// Options turns the flags into watcher Options (without Sink and Logger).
func (f *Flags) Options() (Options, error) {
	mode, err := ParseMode(f.Mode)
	if err != nil {
		return Options{}, err
	}
	if f.Node == "" {
		return Options{}, errors.New("--node is empty and the host name is unknown")
	}
	o := Options{
		Node:          f.Node,
		Namespace:     f.Namespace,
		SliceSelector: f.SliceSelector,
		Mode:          mode,
		Lease:         f.Lease,
	}
	if f.LeaderAbove < 1 {
		return Options{}, fmt.Errorf("--leader-above-nodes %d: want a positive number of nodes", f.LeaderAbove)
	}
	if f.Observe < 0 {
		return Options{}, fmt.Errorf("--observe-interval %v: want a positive duration", f.Observe)
	}
	o.ObserveInterval = f.Observe
	if !f.AllPods {
		o.PodNode = f.Node
	}
	return o, nil
}
