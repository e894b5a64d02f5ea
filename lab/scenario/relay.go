package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/relay"
)

// The lab's agent identity: what the agent DaemonSet's pod on the lab node
// would be. Its namespace is its own, so that the lab's watcher (which
// watches Namespace) and the Helm chart's test (namespace drainscope) never
// see it.
const (
	AgentNamespace      = "drainscope-lab-agent"
	AgentServiceAccount = "drainscope-agent"
	AgentPod            = "drainscope-agent-" + NodeName
)

// agentTokenLife is how long each minted token lives; it is minted again
// at half its life, as the kubelet rotates a projected token.
const agentTokenLife = time.Hour

// labRelay is the server's side of the agents' writes, run by the lab on
// loopback: relay.Handler with a real TokenReviewer and pod index against
// the lab's API server, and the agent's side, a relay.Client with a token
// bound to the agent pod on the lab node.
type labRelay struct {
	handler *relay.Handler
	client  *relay.Client
	url     string
	srv     *http.Server
	dir     string // the token file's
	stop    func()
}

// startRelay creates the agent's ServiceAccount and pod (bound to the lab
// node, which need not be registered yet: the token carries the node's
// name from the pod's spec.nodeName), mints a pod-bound token with
// TokenRequest, and serves the relay on a loopback port.
//
// The pod is in AgentNamespace, which the process node does not manage:
// there it stays a pod object bound to the node, as relay's own test uses.
// The real node's kubelet runs it: the sandbox image (the drainscope
// binary's "lab pause"), never pulled, so it needs nothing from outside.
func (c *Cluster) startRelay(ctx context.Context) (err error) {
	core := c.Client.CoreV1()
	if err := c.CP.EnsureNamespace(ctx, AgentNamespace); err != nil {
		return err
	}
	if _, err := core.ServiceAccounts(AgentNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: AgentServiceAccount}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the agent's ServiceAccount: %w", err)
	}
	pod, err := core.Pods(AgentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: AgentPod, Labels: map[string]string{"app.kubernetes.io/name": "drainscope", "app.kubernetes.io/component": "agent"}},
		Spec: corev1.PodSpec{
			NodeName: NodeName, ServiceAccountName: AgentServiceAccount, AutomountServiceAccountToken: ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers:                    []corev1.Container{{Name: "agent", Image: SandboxImage, ImagePullPolicy: corev1.PullNever}},
		},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		pod, err = core.Pods(AgentNamespace).Get(ctx, AgentPod, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating the agent's pod: %w", err)
	}
	r := &labRelay{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.dir, err = os.MkdirTemp("", "drainscope-lab-agent-"); err != nil {
		return err
	}
	tokenFile := filepath.Join(r.dir, "token")
	mint := func(ctx context.Context) error {
		tr, err := core.ServiceAccounts(AgentNamespace).CreateToken(ctx, AgentServiceAccount, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(agentTokenLife / time.Second)),
			BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("requesting the agent pod's token: %w", err)
		}
		tmp := tokenFile + ".new"
		if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, tokenFile)
	}
	if err := mint(ctx); err != nil {
		return err
	}

	pods := &relay.PodIndex{Client: c.Client}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := pods.Run(bg); err != nil {
			c.log.Warn("relay: pod index", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(agentTokenLife / 2)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				if err := mint(bg); err != nil && bg.Err() == nil {
					c.log.Warn("relay: rotating the agent's token", "err", err)
				}
			}
		}
	}()
	r.stop = func() { cancel(); wg.Wait() }
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := pods.WaitForSync(sctx); err != nil {
		return err
	}

	r.handler = &relay.Handler{Store: c.opts.Store, Log: c.log, Pods: pods,
		Auth: &relay.TokenReviewer{Client: c.Client.AuthenticationV1(), Namespace: AgentNamespace, ServiceAccount: AgentServiceAccount}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening for the agent's events: %w", err)
	}
	r.url = "http://" + ln.Addr().String()
	r.srv = &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Warn("relay: serving", "err", err)
		}
	}()
	if r.client, err = relay.NewClient(r.url, tokenFile, nil); err != nil {
		return err
	}
	c.relay = r
	c.opts.progress("agent events through the server's relay at %s%s: token bound to pod %s/%s on node %s, reviewed by TokenReview",
		r.url, relay.EventsPath, AgentNamespace, AgentPod, NodeName)
	return nil
}

// close stops the server and forgets the token.
func (r *labRelay) close() {
	if r.client != nil {
		r.client.Close()
	}
	if r.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.srv.Shutdown(ctx)
		cancel()
	}
	if r.stop != nil {
		r.stop()
	}
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// RelayStats reports what the lab's relay did with the agent's batches;
// ok is false when the agent's events go straight to the store
// (Options.DirectWrites).
func (c *Cluster) RelayStats() (s relay.Stats, ok bool) {
	if c.relay == nil {
		return s, false
	}
	return c.relay.handler.Stats(), true
}
