package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/controlplane"
)

// The agents' service account, as deploy/ names it.
const (
	AgentNamespace      = "drainscope"
	AgentServiceAccount = "drainscope-agent"
)

// Cluster is a real etcd and kube-apiserver holding Nodes, each with an
// agent pod bound to it (no kubelet: a pod object with spec.nodeName is
// what a pod-bound token needs), and each agent pod's token in a file.
type Cluster struct {
	cp         *controlplane.ControlPlane
	cs         kubernetes.Interface
	TokenFiles []string // agent i's token, bound to its pod on nodeName(i)
}

// StartCluster starts the control plane and registers nodes nodes, their
// agent pods and tokens, 32 requests at a time.
func StartCluster(ctx context.Context, nodes int, dir string, progress io.Writer) (*Cluster, error) {
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver"); err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllerManager: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	c := &Cluster{cp: cp, cs: cp.Client(), TokenFiles: make([]string, nodes)}
	fail := func(err error) (*Cluster, error) { cp.Stop(); return nil, err }
	if err := cp.EnsureNamespace(ctx, AgentNamespace); err != nil {
		return fail(err)
	}
	if _, err := c.cs.CoreV1().ServiceAccounts(AgentNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: AgentServiceAccount}}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating the agents' service account: %w", err))
	}
	t0 := time.Now()
	var done atomic.Int64
	var firstErr error
	var mu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := c.register(ctx, i, dir); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				if n := done.Add(1); n%1000 == 0 {
					fmt.Fprintf(progress, "  cluster: %d of %d nodes with an agent pod and its token (%v)\n", n, nodes, time.Since(t0).Round(time.Second))
				}
			}
		}()
	}
	for i := range nodes {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return fail(firstErr)
	}
	fmt.Fprintf(progress, "  cluster: %d nodes, %d agent pods, %d pod-bound tokens in %v\n", nodes, nodes, nodes, time.Since(t0).Round(time.Second))
	return c, nil
}

// register creates node i, its agent pod and the pod's token.
func (c *Cluster) register(ctx context.Context, i int, dir string) error {
	name := nodeName(i)
	if _, err := controlplane.RegisterNode(ctx, c.cs, controlplane.NodeOptions{Name: name}); err != nil {
		return err
	}
	p, err := c.cs.CoreV1().Pods(AgentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-" + name, Labels: map[string]string{"app": "drainscope-agent"}},
		Spec: corev1.PodSpec{NodeName: name, ServiceAccountName: AgentServiceAccount, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "agent", Image: "drainscope.invalid/agent:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s's agent pod: %w", name, err)
	}
	tr, err := c.cs.CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, AgentServiceAccount, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(6 * 3600)),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for node %s's agent pod: %w", name, err)
	}
	f := filepath.Join(dir, "token-"+name)
	if err := os.WriteFile(f, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	c.TokenFiles[i] = f
	return nil
}

// Kubeconfig is the admin kubeconfig the server reviews tokens with.
func (c *Cluster) Kubeconfig() string { return c.cp.Kubeconfig() }

// Stop stops the control plane.
func (c *Cluster) Stop() { c.cp.Stop() }

// apiPIDs are etcd's and kube-apiserver's processes.
func (c *Cluster) apiPIDs() []int {
	return append(pidsOf("kube-apiserver", c.cp.Dir()), pidsOf("etcd", c.cp.Dir())...)
}

// tokenReviews is the API server's count of TokenReviews created.
func (c *Cluster) tokenReviews(ctx context.Context) (float64, error) {
	raw, err := c.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	var n float64
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "apiserver_request_total{") && strings.Contains(l, `resource="tokenreviews"`) && strings.Contains(l, `verb="POST"`) {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				n += v
			}
		}
	}
	return n, nil
}
