package scenario

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/load"
	"github.com/drainscope/drainscope/lab/sampleapp"
)

// LongLivedRun is the long-lived profile's one Deployment: the sample
// service exiting at SIGTERM, with an exec readiness probe, a recycled
// worker process, an admin port and a log shipper beside it, behind two
// Services.
var LongLivedRun = Run{Name: "longlived", Behaviour: sampleapp.Exit, Rollout: true,
	What: "settle under load, then a rollout, a scale-down, an eviction, an OOM kill or crash, " +
		"a second Service's deletion, a slow rollout, a paused and resumed rollout and, on the real node, the kubelet's eviction"}

// The long-lived pods' extras.
const (
	// WorkerEvery is how often the sample service replaces its worker.
	WorkerEvery = 30 * time.Second
	// LongLivedProbePeriod is the exec readiness probe's period.
	LongLivedProbePeriod = 2 * time.Second
	// AdminPort serves the sample service's admin paths; no Service
	// selects it and the load never asks it.
	AdminPort = 8081
	// MemoryLimit is the app container's memory limit on the real node,
	// which PathOOM's allocation exceeds.
	MemoryLimit = "128Mi"
	// ShipperName is the log shipper's container, beside the app's.
	ShipperName = "log-shipper"
	// StorageLimit is the app container's ephemeral-storage limit on the
	// real node, which FillMiB written into its scratch volume exceeds.
	StorageLimit = "20Mi"
	FillMiB      = 40
	// ScratchDir is where the app's emptyDir volume is mounted, which
	// PathFill writes into.
	ScratchDir = "/scratch"
	// DefaultMinReady is the slow rollout's minReadySeconds when the
	// profile sets none.
	DefaultMinReady = 10 * time.Second
)

// shipperEntrypoint is the log shipper image's program on both nodes (on
// the real node busybox as /bin/sh, on the process node the host's shell),
// and shipperScript what it runs: a loop that touches nothing of the
// app's, woken every second as a shipper polling its files is, and that
// exits 0 at once at SIGTERM. The sleep runs in the background so that
// the trap runs as the signal comes, not when the sleep ends; the pid
// namespace's end takes the last sleep with it.
var (
	shipperEntrypoint = []string{"/bin/sh"}
	shipperScript     = `trap "exit 0" TERM; while :; do sleep 1 & wait $!; done`
)

// Step names, in the order RunLongLived takes them.
const (
	StepRollout   = "rollout"
	StepScaleDown = "scale-down"
	StepEviction  = "eviction"
	StepOOM       = "oom"   // on the real node: the kernel's memory cgroup kills the app
	StepCrash     = "crash" // on the process node, which sets no memory limit: the app exits 3
	// StepServiceDelete deletes the second of the pods' two Services:
	// their endpoints leave it, no pod ends.
	StepServiceDelete = "svc-delete"
	// StepSlowRollout rolls out with minReadySeconds (Profile.MinReady):
	// the old pods end that far apart.
	StepSlowRollout = "slow-rollout"
	// StepPauseResume pauses a rollout once its first old pod ended and
	// resumes it Profile.Gap later.
	StepPauseResume = "pause-resume"
	// StepKubeletEviction, on the real node only: the kubelet's eviction
	// manager evicts a pod past its ephemeral-storage limit; the pod
	// stays, Failed, with reason Evicted.
	StepKubeletEviction = "kubelet-evict"
)

// CanaryService is the second Service of the long-lived Deployment's pods,
// with the same selector, which StepServiceDelete deletes.
func CanaryService(name string) string { return name + "-canary" }

// Step is one disruption of the long-lived sequence.
type Step struct {
	Name       string
	Start, End time.Time // the request to the API (or the pod) until the workload was whole again
	// Pods are the pods it ended, or whose container it ended (oom, crash).
	Pods []PodRecord
	// Ends is when each of the rollouts' Pods (by UID) was first seen
	// terminating or gone.
	Ends map[string]time.Time
	// Paused and Resumed are when the pause-resume step set spec.paused
	// and cleared it.
	Paused, Resumed time.Time
	Note            string
}

// LongLivedResult is what RunLongLived did and what its clients saw.
type LongLivedResult struct {
	RunResult
	Ready     time.Time // every replica ready and answering through the ClusterIP
	SettleEnd time.Time // the first disruption's request
	Steps     []Step
	// Canary is the pods' second Service (namespace/name), deleted by
	// StepServiceDelete.
	Canary string
	// MinReady is the slow rollout's minReadySeconds.
	MinReady time.Duration
}

// ReportWindow is the window the long-lived report covers: from lead
// before the settle's end (but after the pods were ready) to the end of
// the load.
func (r LongLivedResult) ReportWindow(lead time.Duration) event.Window {
	from := r.SettleEnd.Add(-lead)
	if from.Before(r.Ready) {
		from = r.Ready
	}
	return event.Window{From: from.UnixNano(), To: r.End.Add(time.Second).UnixNano()}
}

// ReportLead is how long before the settle's end the report's window
// begins: a minute, or half the settle when that is shorter.
func ReportLead(settle time.Duration) time.Duration {
	return min(time.Minute, settle/2)
}

// RunLongLived deploys LongLivedRun with cfg.Profile's shape behind two
// Services and loads the first from the moment every replica answers;
// lets it settle for Profile.Settle; then rolls it out, scales it down by
// one, evicts a pod through the Eviction API, ends one app container (OOM
// kill on the real node, a crash on the process node), deletes the second
// Service, rolls out with minReadySeconds Profile.MinReady, rolls out
// again paused after the first old pod's end and resumed Gap later, and on
// the real node has the kubelet evict a pod past its ephemeral-storage
// limit, Profile.Gap between one step's end and the next's start; and
// stops the load Gap/2 after the last. Its Service and Deployment stay for
// the caller to analyse before Down.
func RunLongLived(ctx context.Context, c *Cluster, cfg Config) (res LongLivedResult, err error) {
	p := cfg.Profile
	if err := p.Validate(); err != nil {
		return res, err
	}
	if !p.LongLived() {
		return res, fmt.Errorf("profile %s has no settle time", p.Name)
	}
	r := LongLivedRun
	name := "sample-" + r.Name
	res.RunResult = RunResult{Run: r, Deployment: name, Service: Namespace + "/" + name}
	cs := c.Client
	svc, err := cs.CoreV1().Services(Namespace).Create(ctx, service(name, r), metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("creating the Service: %w", err)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return res, fmt.Errorf("service %s has no ClusterIP: %w", name, err)
	}
	res.ClusterIP = netip.AddrPortFrom(ip, 80)
	c.opts.progress("  Service %s: %s (%s)", res.Service, res.ClusterIP, res.ServiceName())
	// The second Service selects the same pods, as a canary's or an
	// internal name does: each pod's endpoint is in both.
	canary, err := cs.CoreV1().Services(Namespace).Create(ctx, service(CanaryService(name), r), metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("creating the second Service: %w", err)
	}
	res.Canary = Namespace + "/" + canary.Name
	canaryIP, err := netip.ParseAddr(canary.Spec.ClusterIP)
	if err != nil {
		return res, fmt.Errorf("service %s has no ClusterIP: %w", canary.Name, err)
	}
	c.opts.progress("  Service %s: %s (the same pods, deleted at the %s step)", res.Canary, canaryIP, StepServiceDelete)
	res.MinReady = p.minReady()
	if _, err := cs.AppsV1().Deployments(Namespace).Create(ctx, c.longLivedDeployment(name, r, p), metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("creating the Deployment: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := waitRolledOut(wctx, c, name, p.Replicas, nil); err != nil {
		return res, fmt.Errorf("waiting for %d ready replicas: %w", p.Replicas, err)
	}
	if err := waitServed(wctx, c, res.ClusterIP, int(p.Replicas)); err != nil {
		return res, fmt.Errorf("waiting for the ClusterIP %s to reach every replica: %w", res.ClusterIP, err)
	}
	if err := waitServed(wctx, c, netip.AddrPortFrom(canaryIP, 80), int(p.Replicas)); err != nil {
		return res, fmt.Errorf("waiting for the second Service's ClusterIP %s to reach every replica: %w", canaryIP, err)
	}
	res.Ready = time.Now()
	c.opts.progress("  %d pods ready at %s; settling %v under the load", p.Replicas, stamp(res.Ready), p.Settle)

	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	loadDone := make(chan load.Result, 1)
	res.Start = time.Now()
	host := res.ServiceName()
	url := "http://" + host + "/"
	go func() {
		lr, _ := load.Run(lctx, load.Config{
			Target: res.ClusterIP, Host: host, Clients: p.Clients, Interval: p.Interval, Timeout: p.Timeout,
			Source:  c.net.Gateway.Addr(),
			Backend: load.ConntrackBackend, // the lab's truth, never stored
			OnFailure: func(f load.Failure) {
				c.Record(f.Event(NodeName, url))
			},
		})
		loadDone <- lr
	}()
	stop := func() {
		lcancel()
		res.Load = <-loadDone
		res.End = time.Now()
	}

	if !sleepCtx(ctx, p.Settle) {
		stop()
		return res, ctx.Err()
	}
	res.SettleEnd = time.Now()
	steps := []func(context.Context, *Cluster, string, Profile) (Step, error){
		stepRollout, stepScaleDown, stepEviction, stepContainerEnd,
		stepServiceDelete, stepSlowRollout, stepPauseResume,
	}
	if c.Node.StorageLimits() {
		steps = append(steps, stepKubeletEviction)
	}
	// Four minutes for a step, and more for the slow one's minReadySeconds
	// and the paused one's wait.
	limit := 4*time.Minute + p.Gap + time.Duration(p.Replicas)*p.minReady()
	for i, do := range steps {
		if i > 0 && !sleepCtx(ctx, p.Gap) {
			stop()
			return res, ctx.Err()
		}
		sctx, cancel := context.WithTimeout(ctx, limit)
		st, err := do(sctx, c, name, p)
		cancel()
		if st.Name != "" {
			res.Steps = append(res.Steps, st)
			c.opts.progress("  %s", st.Summary(res.Start))
		}
		if err != nil {
			stop()
			return res, fmt.Errorf("%s: %w", st.Name, err)
		}
		if i == 0 {
			res.RolloutStart, res.RolloutEnd, res.Replaced = st.Start, st.End, st.Pods
		}
	}
	if !sleepCtx(ctx, p.Gap/2) {
		stop()
		return res, ctx.Err()
	}
	stop()
	res.New, err = runPods(ctx, c, r)
	return res, err
}

// Summary is one line about a step, with its times.
func (s Step) Summary(start time.Time) string {
	var pods []string
	for _, p := range s.Pods {
		pods = append(pods, p.Name)
	}
	line := fmt.Sprintf("%-13s %s (+%s) → %s (%.1fs): %s", s.Name, stamp(s.Start), s.Start.Sub(start).Round(time.Second),
		stamp(s.End), s.End.Sub(s.Start).Seconds(), strings.Join(pods, ", "))
	if s.Note != "" {
		line += "; " + s.Note
	}
	return line
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000Z") }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// appCommand is the sample service's command in its container: the image's
// entrypoint on the real node, the lab's own command on the process node.
func (c *Cluster) appCommand() []string { return c.Node.AppCommand() }

// longLivedDeployment is deployment() with what a service that has run for
// days does besides: a worker recycled every WorkerEvery, an exec
// readiness probe (the image's own binary asking the app), an admin port,
// a log shipper beside the app, and on the real node a memory limit.
func (c *Cluster) longLivedDeployment(name string, r Run, p Profile) *appsv1.Deployment {
	d := deployment(name, r, p)
	ctr := &d.Spec.Template.Spec.Containers[0]
	ctr.Args = append(ctr.Args, "--worker-every="+WorkerEvery.String(), fmt.Sprintf("--admin-listen=:%d", AdminPort))
	ctr.Ports = append(ctr.Ports, corev1.ContainerPort{Name: "admin", ContainerPort: AdminPort, Protocol: corev1.ProtocolTCP})
	check := append(slices.Clone(c.appCommand()), "--check=http://127.0.0.1:8080"+sampleapp.PathHealth)
	ctr.ReadinessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: check}},
		PeriodSeconds:    int32(LongLivedProbePeriod / time.Second),
		TimeoutSeconds:   5, // a Go program's start on a machine as busy as a lab's
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
	if c.Node.MemoryLimits() {
		ctr.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(MemoryLimit)}
	}
	if c.Node.StorageLimits() {
		// What PathFill writes into the scratch volume counts against
		// the pod's ephemeral storage, whose limit is the app's.
		if ctr.Resources.Limits == nil {
			ctr.Resources.Limits = corev1.ResourceList{}
		}
		ctr.Resources.Limits[corev1.ResourceEphemeralStorage] = resource.MustParse(StorageLimit)
		ctr.Args = append(ctr.Args, "--fill-dir="+ScratchDir)
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "scratch", MountPath: ScratchDir})
		d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{
			Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	// A second container whose SIGTERM and exit come with the app's at
	// every pod end, and which declares no port: the analysis must take
	// none of them for the app's.
	d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{
		Name:  ShipperName,
		Image: ShipperImage,
		Args:  []string{"-c", shipperScript},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("5m"),
			corev1.ResourceMemory: resource.MustParse("8Mi"),
		}},
	})
	return d
}

func stepRollout(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepRollout}
	old, err := runPods(ctx, c, LongLivedRun)
	if err != nil {
		return st, err
	}
	st.Start, st.Pods = time.Now(), old
	if err := triggerRollout(ctx, c, name); err != nil {
		return st, err
	}
	if err := waitRolledOut(ctx, c, name, p.Replicas, old); err != nil {
		return st, err
	}
	st.End = time.Now()
	st.Note = fmt.Sprintf("%d pods replaced", len(old))
	return st, nil
}

func stepScaleDown(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepScaleDown}
	before, err := runPods(ctx, c, LongLivedRun)
	if err != nil {
		return st, err
	}
	n := int32(len(before)) - 1
	st.Start = time.Now()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	if _, err := c.Client.AppsV1().Deployments(Namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return st, fmt.Errorf("scaling to %d: %w", n, err)
	}
	if err := waitRolledOut(ctx, c, name, n, nil); err != nil {
		return st, err
	}
	after, err := runPods(ctx, c, LongLivedRun)
	if err != nil {
		return st, err
	}
	for _, b := range before {
		if !slices.ContainsFunc(after, func(a PodRecord) bool { return a.UID == b.UID }) {
			st.Pods = append(st.Pods, b)
		}
	}
	if err := waitGone(ctx, c, st.Pods); err != nil {
		return st, err
	}
	st.End = time.Now()
	st.Note = fmt.Sprintf("replicas %d → %d", len(before), n)
	return st, nil
}

func stepEviction(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepEviction}
	pods, err := runPods(ctx, c, LongLivedRun)
	if err != nil || len(pods) == 0 {
		return st, fmt.Errorf("no pod to evict: %v", err)
	}
	victim := pods[0]
	st.Start, st.Pods = time.Now(), []PodRecord{victim}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: Namespace}}
	if err := c.Client.PolicyV1().Evictions(Namespace).Evict(ctx, ev); err != nil {
		return st, fmt.Errorf("evicting %s: %w", victim.Name, err)
	}
	if err := waitRolledOut(ctx, c, name, int32(len(pods)), st.Pods); err != nil {
		return st, err
	}
	st.End = time.Now()
	st.Note = "policy/v1 Eviction"
	return st, nil
}

// stepContainerEnd ends one pod's app container from inside: on the real
// node it allocates past its memory limit until the kernel kills it, on
// the process node (no memory limits) it exits 3. The kubelet restarts it
// in the same pod.
func stepContainerEnd(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepCrash}
	path := sampleapp.PathCrash
	if c.Node.MemoryLimits() {
		st.Name, path = StepOOM, sampleapp.PathOOM
	}
	pods, err := runPods(ctx, c, LongLivedRun)
	if err != nil || len(pods) == 0 {
		return st, fmt.Errorf("no pod to end: %v", err)
	}
	victim := pods[0]
	st.Pods = []PodRecord{victim}
	pod, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		return st, err
	}
	restarts := appRestarts(pod)
	st.Start = time.Now()
	if err := c.admin(ctx, victim.IP, path); err != nil {
		return st, err
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		pod, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, victim.Name, metav1.GetOptions{})
		if err == nil && appRestarts(pod) > restarts && podReady(pod) {
			st.End = time.Now()
			for _, s := range pod.Status.ContainerStatuses {
				if s.Name == "app" && s.LastTerminationState.Terminated != nil {
					tm := s.LastTerminationState.Terminated
					st.Note = fmt.Sprintf("container app ended: %s, exit code %d; restarted (restart count %d), ready again", tm.Reason, tm.ExitCode, s.RestartCount)
				}
			}
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for %s's app container to restart and be ready: %w", victim.Name, ctx.Err())
		case <-t.C:
		}
	}
}

func appRestarts(p *corev1.Pod) int32 {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "app" {
			return s.RestartCount
		}
	}
	return 0
}

func podReady(p *corev1.Pod) bool {
	for _, cd := range p.Status.Conditions {
		if cd.Type == corev1.PodReady {
			return cd.Status == corev1.ConditionTrue
		}
	}
	return false
}

// admin POSTs path to a pod's admin port, from the bridge's address. The
// answer may never come: the process it asks to end may end first.
func (c *Cluster) admin(ctx context.Context, pod netip.Addr, path string) error {
	if !c.net.PodCIDR().Contains(pod) {
		return fmt.Errorf("refusing to ask %s: not a lab pod address", pod)
	}
	d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: c.net.Gateway.Addr().AsSlice()}}
	// Long enough for PathFill, which answers once its file is on disk.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext, Proxy: nil}}
	url := "http://" + netip.AddrPortFrom(pod, AdminPort).String() + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// waitGone waits until none of pods exists.
func waitGone(ctx context.Context, c *Cluster, pods []PodRecord) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		list, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
		if err == nil && !slices.ContainsFunc(list.Items, func(p corev1.Pod) bool {
			return slices.ContainsFunc(pods, func(r PodRecord) bool { return r.UID == string(p.UID) })
		}) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d pods to go: %w", len(pods), ctx.Err())
		case <-t.C:
		}
	}
}

// WriteSteps prints the long-lived sequence's times.
func WriteSteps(w io.Writer, r LongLivedResult) {
	fmt.Fprintf(w, "pods ready     %s\n", r.Ready.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "load           %s → %s (%s)\n", r.Start.UTC().Format(time.RFC3339Nano), r.End.UTC().Format(time.RFC3339Nano), r.End.Sub(r.Start).Round(time.Second))
	fmt.Fprintf(w, "settle end     %s\n", r.SettleEnd.UTC().Format(time.RFC3339Nano))
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%-14s %s → %s", s.Name, s.Start.UTC().Format(time.RFC3339Nano), s.End.UTC().Format(time.RFC3339Nano))
		var pods []string
		for _, p := range s.Pods {
			pods = append(pods, p.Name)
		}
		fmt.Fprintf(w, "  %s", strings.Join(pods, ", "))
		if s.Note != "" {
			fmt.Fprintf(w, "; %s", s.Note)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "requests %d, ok %d, failed %d", r.Load.Requests, r.Load.OK, r.Load.FailedTotal())
	if r.Load.FailedTotal() > 0 {
		fmt.Fprintf(w, " (%s)", classCounts(r.Load.Failed))
	}
	fmt.Fprintln(w)
}
