package kubectl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// serverSelector is what the chart labels the server's Service with.
const serverSelector = "app.kubernetes.io/part-of=drainscope,app.kubernetes.io/component=server"

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
