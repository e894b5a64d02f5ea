package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/load"
	"github.com/drainscope/drainscope/lab/sampleapp"
)

// Config is what Execute runs.
type Config struct {
	Profile  Profile
	Runs     []Run
	Progress io.Writer
	Log      *slog.Logger
	// OnService is called as each run's Service is created, before its
	// Deployment: a client of one's own can start loading the ClusterIP
	// (RunResult.ClusterIP) from the Service's first moment. Optional.
	OnService func(RunResult)
	// OnTeardown is called when a run is over, before its Service and
	// Deployment are deleted; the deletion waits for it. Optional.
	OnTeardown func(RunResult)
	// Ingress, when set (IngressHAProxy), puts that proxy in front of each
	// run's Service and sends the load through it: the clients know only
	// the ingress's address. Its access log is imported at the run's end
	// and its own backend list is recorded as its dataplane events.
	Ingress string
	// IngressSync is how often the ingress applies the EndpointSlice
	// changes it saw since the last time, as ingress controllers batch
	// them (DefaultIngressSync); 0 applies each change as it comes.
	IngressSync time.Duration
}

// PodRecord names one pod of a run.
type PodRecord struct {
	Name string
	UID  string
	IP   netip.Addr
	// Containers maps a container's name to the ID its runtime gave it
	// (status.containerStatuses' and initContainerStatuses' containerID
	// without the runtime:// prefix).
	Containers map[string]string
}

// RunResult is what one run did and what its clients saw.
type RunResult struct {
	Run        Run
	Deployment string // name, in Namespace
	Service    string // namespace/name
	ClusterIP  netip.AddrPort
	Start, End time.Time // the load's window
	// RolloutStart is when the pod template changed, RolloutEnd when the
	// last replaced pod was gone; zero for the control run.
	RolloutStart, RolloutEnd time.Time
	Replaced                 []PodRecord
	New                      []PodRecord
	Load                     load.Result
	Note                     string
	// Ingress is what the ingress in front of the Service logged, when
	// the run had one (Config.Ingress).
	Ingress *IngressResult
}

// ServiceName is the run's Service as a client names it: name.ns.svc. (The
// lab runs no DNS: a client of one's own dials the ClusterIP and may log
// this name, or the ClusterIP, as its target.)
func (r RunResult) ServiceName() string {
	ns, name, _ := strings.Cut(r.Service, "/")
	return name + "." + ns + ".svc"
}

// Window is the run's time range for queries: from the start of the load
// to the later of its end and the rollout's.
func (r RunResult) Window() event.Window {
	end := r.End
	if r.RolloutEnd.After(end) {
		end = r.RolloutEnd
	}
	return event.Window{From: r.Start.UnixNano(), To: end.Add(time.Second).UnixNano()}
}

// Execute runs the experiment on c, one run after the other.
func Execute(ctx context.Context, c *Cluster, cfg Config) ([]RunResult, error) {
	if err := cfg.Profile.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	for _, r := range cfg.Runs {
		if err := checkSidecar(c, r); err != nil {
			return nil, err
		}
	}
	var out []RunResult
	for i, r := range cfg.Runs {
		c.opts.progress("run %d/%d: %s (%s)", i+1, len(cfg.Runs), r.Name, r.What)
		res, err := runOne(ctx, c, cfg, r)
		if ctx.Err() != nil {
			if res.Load.Requests > 0 {
				res.Note = "interrupted: the run is incomplete"
				out = append(out, res)
			}
			return out, ctx.Err()
		}
		if err != nil {
			return out, fmt.Errorf("run %s: %w", r.Name, err)
		}
		c.opts.progress("  %s", res.Summary())
		if rs, ok := c.RelayStats(); ok {
			c.opts.progress("  agent events through the relay so far: %s", rs)
		}
		out = append(out, res)
	}
	return out, nil
}

// Summary is one line about a run.
func (r RunResult) Summary() string {
	s := fmt.Sprintf("requests=%d ok=%d failed=%d", r.Load.Requests, r.Load.OK, r.Load.FailedTotal())
	if n := r.Load.FailedTotal(); n > 0 {
		s += " (" + classCounts(r.Load.Failed) + ")"
	}
	if !r.RolloutStart.IsZero() {
		s += fmt.Sprintf("; rollout at +%.1fs", r.RolloutStart.Sub(r.Start).Seconds())
		if !r.RolloutEnd.IsZero() {
			s += fmt.Sprintf(", last old pod gone at +%.1fs", r.RolloutEnd.Sub(r.Start).Seconds())
		}
		s += fmt.Sprintf(", %d pods replaced", len(r.Replaced))
	}
	if r.Note != "" {
		s += "; " + r.Note
	}
	return s
}

func classCounts(m map[string]int) string {
	s := ""
	for _, c := range load.Classes {
		if m[c] > 0 {
			if s != "" {
				s += " "
			}
			s += fmt.Sprintf("%s=%d", c, m[c])
		}
	}
	return s
}

func runOne(ctx context.Context, c *Cluster, cfg Config, r Run) (res RunResult, err error) {
	p := cfg.Profile
	name := "sample-" + r.Name
	res = RunResult{Run: r, Deployment: name, Service: Namespace + "/" + name}
	cs := c.Client
	svc, err := cs.CoreV1().Services(Namespace).Create(ctx, service(name, r), metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("creating the Service: %w", err)
	}
	defer func() {
		if cfg.OnTeardown != nil {
			cfg.OnTeardown(res)
		}
		if derr := teardownRun(context.WithoutCancel(ctx), c, name, r); derr != nil && err == nil {
			err = derr
		}
	}()
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return res, fmt.Errorf("service %s has no ClusterIP: %w", name, err)
	}
	res.ClusterIP = netip.AddrPortFrom(ip, 80)
	c.opts.progress("  Service %s: %s (%s)", res.Service, res.ClusterIP, res.ServiceName())
	if cfg.OnService != nil {
		cfg.OnService(res)
	}
	var ing *ingressRun
	if cfg.Ingress != "" {
		// Slots for every ready pod a rollout with maxSurge 1 can have,
		// and as many again.
		if ing, err = startIngress(ctx, c, cfg.Ingress, name, 2*int(p.Replicas)+2, cfg.IngressSync); err != nil {
			return res, fmt.Errorf("starting the ingress: %w", err)
		}
		defer ing.stop()
		c.opts.progress("  ingress %s at %s (backend %s), its slots set from the EndpointSlices %s", cfg.Ingress, ing.h.Listen, ing.h.Backend, syncDesc(cfg.IngressSync))
	}
	if _, err := cs.AppsV1().Deployments(Namespace).Create(ctx, deployment(name, r, p), metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("creating the Deployment: %w", err)
	}
	if err := waitRunReady(ctx, c, name, p, res.ClusterIP, ing); err != nil {
		return res, err
	}
	if r.PatchCommand != "" {
		if err := applyPatchCommand(ctx, c, name, r.PatchCommand); err != nil {
			return res, err
		}
		if err := waitRunReady(ctx, c, name, p, res.ClusterIP, ing); err != nil {
			return res, fmt.Errorf("after the patch: %w", err)
		}
	}
	old, err := runPods(ctx, c, r)
	if err != nil {
		return res, err
	}

	dur := p.Duration
	if !r.Rollout {
		dur = p.ControlDuration()
	}
	lctx, lcancel := context.WithTimeout(ctx, dur)
	defer lcancel()
	loadDone := make(chan load.Result, 1)
	res.Start = time.Now()
	lc, url := runLoadConfig(c, p, res, ing)
	go func() {
		lr, _ := load.Run(lctx, lc)
		loadDone <- lr
	}()

	rolled := make(chan error, 1)
	if r.Rollout {
		select {
		case <-time.After(p.RolloutAt):
		case <-lctx.Done():
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if err := startRollout(ctx, c, name, p, dur, old, &res, rolled); err != nil {
			lcancel()
			<-loadDone
			return res, err
		}
	}
	res.Load = <-loadDone
	res.End = time.Now()
	if r.Rollout {
		if err := finishRollout(ctx, c, r, old, &res, rolled); err != nil {
			return res, err
		}
	}
	if ing != nil {
		if err := finishIngress(ctx, c, ing, url, &res); err != nil {
			return res, err
		}
	}
	return res, nil // the deferred teardownRun syncs the recorder first
}

// waitRunReady waits, two minutes at most, for the run's Deployment to have
// every replica ready and for the ClusterIP, and the ingress if any, to
// reach each of them.
func waitRunReady(ctx context.Context, c *Cluster, name string, p Profile, clusterIP netip.AddrPort, ing *ingressRun) error {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitRolledOut(wctx, c, name, p.Replicas, nil); err != nil {
		return fmt.Errorf("waiting for %d ready replicas: %w", p.Replicas, err)
	}
	if err := waitServed(wctx, c, clusterIP, int(p.Replicas)); err != nil {
		return fmt.Errorf("waiting for the ClusterIP %s to reach every replica: %w", clusterIP, err)
	}
	if ing != nil {
		if err := ing.waitRouted(wctx, c, int(p.Replicas)); err != nil {
			return fmt.Errorf("waiting for the ingress %s to reach every replica: %w", ing.h.Listen, err)
		}
	}
	return nil
}

// runLoadConfig is the run's load: on the ClusterIP, or through the
// ingress if any; url is the one its failures are stored with.
func runLoadConfig(c *Cluster, p Profile, res RunResult, ing *ingressRun) (lc load.Config, url string) {
	host := res.ServiceName()
	url = "http://" + host + "/"
	lc = load.Config{
		Target:   res.ClusterIP,
		Host:     host,
		Clients:  p.Clients,
		Interval: p.Interval,
		Timeout:  p.Timeout,
		Source:   c.net.Gateway.Addr(),
		// The backend conntrack names is the lab's own truth, for its
		// table and tests; the stored failure carries only the URL.
		Backend: load.ConntrackBackend,
		OnFailure: func(f load.Failure) {
			c.Record(f.Event(NodeName, url))
		},
	}
	if ing != nil {
		// The client knows the ingress's URL only; its failures are
		// stored at the end, those the proxy did not log (importLog).
		lc.Target = ing.h.Listen
		lc.Backend = nil
		lc.OnFailure = nil
		url = "http://" + ing.h.Listen.String() + "/"
	}
	return lc, url
}

// startRollout rolls the Deployment out and waits for the rollout in the
// background, setting res.RolloutEnd and sending its outcome on rolled.
func startRollout(ctx context.Context, c *Cluster, name string, p Profile, dur time.Duration, old []PodRecord, res *RunResult, rolled chan<- error) error {
	res.RolloutStart = time.Now()
	if err := triggerRollout(ctx, c, name); err != nil {
		return err
	}
	c.opts.progress("  rollout started at +%.1fs", res.RolloutStart.Sub(res.Start).Seconds())
	go func() {
		rctx, cancel := context.WithTimeout(ctx, dur+2*time.Minute)
		defer cancel()
		err := waitRolledOut(rctx, c, name, p.Replicas, old)
		if err == nil {
			res.RolloutEnd = time.Now()
		}
		rolled <- err
	}()
	return nil
}

// finishRollout waits for the rollout, noting when it outlasted the load,
// and records the pods it replaced and those it started.
func finishRollout(ctx context.Context, c *Cluster, r Run, old []PodRecord, res *RunResult, rolled <-chan error) (err error) {
	select {
	case err := <-rolled:
		if err != nil {
			return fmt.Errorf("rollout: %w", err)
		}
	default:
		res.Note = "the rollout outlasted the load"
		if err := <-rolled; err != nil {
			return fmt.Errorf("rollout: %w", err)
		}
	}
	res.Replaced = old
	if res.New, err = runPods(ctx, c, r); err != nil {
		return err
	}
	return nil
}

// finishIngress stops the ingress and imports its access log, recording
// the client's failures the proxy did not log.
func finishIngress(ctx context.Context, c *Cluster, ing *ingressRun, url string, res *RunResult) error {
	// Its removals of the replaced pods are in; stop it before the
	// teardown so the Service's deletion is not recorded as its own.
	ing.stop()
	ir, kept, err := ing.importLog(ctx, c, res.Load.Failures)
	for _, f := range kept {
		c.Record(f.Event(NodeName, url))
	}
	res.Ingress = &ir
	if err != nil {
		return fmt.Errorf("importing the ingress's access log: %w", err)
	}
	c.opts.progress("  %s", ir.Line())
	return nil
}

func labels(r Run) map[string]string {
	return map[string]string{"app": "sample", "run": r.Name}
}

func service(name string, r Run) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels(r)},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: labels(r),
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func deployment(name string, r Run, p Profile) *appsv1.Deployment {
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	grace := int64(p.Grace / time.Second)
	drainMax := p.Grace - 5*time.Second
	if drainMax < 5*time.Second {
		drainMax = p.Grace / 2
	}
	ctr := corev1.Container{
		Name:  "app",
		Image: AppImage,
		Args: []string{
			"--listen=:8080",
			"--behaviour=" + string(r.Behaviour),
			"--exit-delay=" + p.ExitDelay.String(),
			// Drain long enough that kube-proxy (which syncs its rules at
			// most once a second, later on a busy machine) has stopped
			// sending new connections.
			"--drain-min=5s",
			"--drain-idle=1s",
			"--drain-max=" + drainMax.String(),
		},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		Env: []corev1.EnvVar{{
			Name:      "POD_NAME",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: sampleapp.PathHealth, Port: intstr.FromString("http"),
			}},
			PeriodSeconds:    int32(max(p.ProbePeriod/time.Second, 1)),
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		}},
	}
	switch {
	case r.PreStop:
		ctr.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Sleep: &corev1.SleepAction{Seconds: int64(p.PreStop / time.Second)},
		}}
	case r.PreStopExec:
		ctr.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"sleep", strconv.Itoa(int(p.PreStop / time.Second))}},
		}}
	}
	spec := corev1.PodSpec{
		Containers:                    []corev1.Container{ctr},
		TerminationGracePeriodSeconds: &grace,
	}
	if r.Sidecar != "" {
		addSidecar(&spec, r, p)
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels(r)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &p.Replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels(r)},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(r)},
				Spec:       spec,
			},
		},
	}
}

// applyPatchCommand runs command, a kubectl command line as drainscope
// prints a patch, with the cluster's kubeconfig and the Kubernetes
// binaries' kubectl, and waits for the rollout it begins to end: every
// replica of the patched template ready, none of the pods before it left.
func applyPatchCommand(ctx context.Context, c *Cluster, name, command string) error {
	if !strings.HasPrefix(command, "kubectl ") {
		return fmt.Errorf("patch command %q: want a kubectl command line", command)
	}
	before, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=sample"})
	if err != nil {
		return err
	}
	binDir := c.opts.BinDir
	if binDir == "" {
		binDir = controlplane.BinDir()
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.CP.Kubeconfig(), "PATH="+binDir+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", command, err, strings.TrimSpace(string(out)))
	}
	c.opts.progress("  patched: %s", strings.TrimSpace(string(out)))
	var old []PodRecord
	for _, p := range before.Items {
		old = append(old, PodRecord{Name: p.Name, UID: string(p.UID)})
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	d, err := c.Client.AppsV1().Deployments(Namespace).Get(wctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return waitRolledOut(wctx, c, name, *d.Spec.Replicas, old)
}

// triggerRollout changes the pod template, as kubectl rollout restart does.
func triggerRollout(ctx context.Context, c *Cluster, name string) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"drainscope.dev/restartedAt":%q}}}}}`,
		time.Now().UTC().Format(time.RFC3339Nano))
	_, err := c.Client.AppsV1().Deployments(Namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("changing the pod template: %w", err)
	}
	return nil
}

// waitRolledOut waits until the Deployment has replicas updated, available
// pods and, when old is given, none of those pods exists any more.
func waitRolledOut(ctx context.Context, c *Cluster, name string, replicas int32, old []PodRecord) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := ""
	for {
		d, err := c.Client.AppsV1().Deployments(Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			st := d.Status
			done := st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == replicas &&
				st.Replicas == replicas && st.AvailableReplicas == replicas && st.ReadyReplicas == replicas
			if done && len(old) > 0 {
				pods, perr := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
				if perr != nil {
					err = perr
				}
				for _, p := range pods.Items {
					if slices.ContainsFunc(old, func(o PodRecord) bool { return o.UID == string(p.UID) }) {
						done = false
					}
				}
			}
			if done {
				return nil
			}
			last = fmt.Sprintf("updated %d, ready %d, available %d of %d", st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, replicas)
		}
		select {
		case <-ctx.Done():
			if err != nil {
				last += " (" + err.Error() + ")"
			}
			return fmt.Errorf("%w: %s", ctx.Err(), last)
		case <-t.C:
		}
	}
}

// waitServed asks the ClusterIP on new connections until every replica has
// answered, so kube-proxy's rules are complete before the load starts.
func waitServed(ctx context.Context, c *Cluster, target netip.AddrPort, replicas int) error {
	d := &net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: c.net.Gateway.Addr().AsSlice()}}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext, Proxy: nil}}
	seen := map[string]bool{}
	var lastErr error
	for len(seen) < replicas {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target.String()+"/", nil)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if pod := resp.Header.Get(sampleapp.HeaderPod); pod != "" {
				seen[pod] = true
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %d of %d replicas answered (last error: %v)", ctx.Err(), len(seen), replicas, lastErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// runPods lists the run's pods that are neither terminating nor ended (a
// pod the kubelet evicted stays, Failed).
func runPods(ctx context.Context, c *Cluster, r Run) ([]PodRecord, error) {
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "run=" + r.Name})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var out []PodRecord
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || terminal(&p) {
			continue
		}
		ip, _ := netip.ParseAddr(p.Status.PodIP)
		rec := PodRecord{Name: p.Name, UID: string(p.UID), IP: ip, Containers: map[string]string{}}
		// Init containers too: a native sidecar is one.
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if _, id, ok := strings.Cut(cs.ContainerID, "://"); ok {
				rec.Containers[cs.Name] = id
			}
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b PodRecord) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// teardownRun removes the run's Service, Deployment and pods, quickly. It is
// recorded like everything else, as an agent would record it: the
// Deployment's deletion is a disruption of its own, begun by that trigger,
// apart from the run's rollout. (Pausing the recording here once dropped
// the deletion but not the kernel's later events of the same pods, which
// then joined the rollout as four more pods replaced.)
func teardownRun(ctx context.Context, c *Cluster, name string, r Run) error {
	c.Sync()
	cs := c.Client
	var errs []error
	if err := cs.CoreV1().Services(Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	bg := metav1.DeletePropagationBackground
	if err := cs.AppsV1().Deployments(Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	one := int64(1)
	sel := metav1.ListOptions{LabelSelector: "run=" + r.Name}
	if err := cs.AppsV1().ReplicaSets(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, sel); err != nil {
		errs = append(errs, err)
	}
	if err := cs.CoreV1().Pods(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &one}, sel); err != nil {
		errs = append(errs, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		pods, err := cs.CoreV1().Pods(Namespace).List(ctx, sel)
		if err == nil && len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			n := -1
			if pods != nil {
				n = len(pods.Items)
			}
			errs = append(errs, fmt.Errorf("%d pods of run %s still exist a minute after deletion", n, r.Name))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// EndpointSlices of the Service go with it (garbage collector); wait
	// so the next run's watcher events are about the next run only.
	for time.Now().Before(deadline) {
		sl, err := cs.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil || len(sl.Items) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.Sync()
	return errors.Join(errs...)
}

// Own is the Deployment `drainscope lab --keep` leaves up for a client of
// one's own: the sample service exiting at SIGTERM, to be rolled out at will.
var Own = Run{Name: "own", Behaviour: sampleapp.Exit, Rollout: true, What: "yours to load and roll out"}

// Deploy creates r's Service and Deployment (sample-NAME) with p's shape,
// waits until every replica is ready and answers through the ClusterIP, and
// returns what it made. Unlike a run's, they stay until the cluster goes.
func Deploy(ctx context.Context, c *Cluster, r Run, p Profile) (RunResult, error) {
	name := "sample-" + r.Name
	res := RunResult{Run: r, Deployment: name, Service: Namespace + "/" + name}
	svc, err := c.Client.CoreV1().Services(Namespace).Create(ctx, service(name, r), metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("creating the Service: %w", err)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return res, fmt.Errorf("service %s has no ClusterIP: %w", name, err)
	}
	res.ClusterIP = netip.AddrPortFrom(ip, 80)
	if _, err := c.Client.AppsV1().Deployments(Namespace).Create(ctx, deployment(name, r, p), metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("creating the Deployment: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitRolledOut(wctx, c, name, p.Replicas, nil); err != nil {
		return res, fmt.Errorf("waiting for %d ready replicas: %w", p.Replicas, err)
	}
	if err := waitServed(wctx, c, res.ClusterIP, int(p.Replicas)); err != nil {
		return res, fmt.Errorf("waiting for the ClusterIP %s to reach every replica: %w", res.ClusterIP, err)
	}
	return res, nil
}

// ClientSource is the address a client on this machine reaches the lab's
// Services from: the bridge's, which the route to the Service network
// uses. The pods see it as the client's address, as the kernel capture
// records it.
func (c *Cluster) ClientSource() netip.Addr { return c.net.Gateway.Addr() }

// ServiceCIDR is the lab's Service network.
func (c *Cluster) ServiceCIDR() netip.Prefix { return c.net.ServiceCIDR }
