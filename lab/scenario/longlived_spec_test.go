package scenario

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/drainscope/drainscope/analysis"
)

// TestLongLivedDeployment checks the long-lived pod spec on both nodes: the
// exec readiness probe runs the node's own sample service command every
// 2 s, the worker is recycled, the admin port is declared, a log shipper
// that declares no port runs beside the app, and only the real node gets
// the memory limit the OOM step exceeds and the storage limit and scratch
// volume the kubelet eviction's write exceeds.
func TestLongLivedDeployment(t *testing.T) {
	p := Profiles["longlived"]
	for _, tc := range []struct {
		node string
		c    *Cluster
		cmd  []string
	}{
		{NodeProcess, &Cluster{Node: &simNode{appCommand: []string{"/usr/bin/drainscope", "lab", "sampleapp"}}}, []string{"/usr/bin/drainscope", "lab", "sampleapp"}},
		{NodeKubelet, &Cluster{Node: &realNode{}}, []string{"/drainscope", "lab", "sampleapp"}},
	} {
		d := tc.c.longLivedDeployment("sample-longlived", LongLivedRun, p)
		ctr := d.Spec.Template.Spec.Containers[0]
		pr := ctr.ReadinessProbe
		if pr == nil || pr.Exec == nil {
			t.Fatalf("%s node: readiness probe %+v, want exec", tc.node, pr)
		}
		want := append(slices.Clone(tc.cmd), "--check=http://127.0.0.1:8080/healthz")
		if !slices.Equal(pr.Exec.Command, want) || pr.PeriodSeconds != 2 {
			t.Errorf("%s node: exec probe %v every %d s, want %v every 2 s", tc.node, pr.Exec.Command, pr.PeriodSeconds, want)
		}
		args := strings.Join(ctr.Args, " ")
		if !strings.Contains(args, "--worker-every="+(30*time.Second).String()) || !strings.Contains(args, "--admin-listen=:8081") {
			t.Errorf("%s node: args %q, want a worker every 30s and the admin port", tc.node, args)
		}
		if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == AdminPort }) {
			t.Errorf("%s node: ports %+v, want the admin port", tc.node, ctr.Ports)
		}
		lim, ok := ctr.Resources.Limits[corev1.ResourceMemory]
		if real := tc.node == NodeKubelet; ok != real || (real && lim.String() != MemoryLimit) {
			t.Errorf("%s node: memory limit %v (set %v), want %s on the real node only", tc.node, lim.String(), ok, MemoryLimit)
		}
		// The kubelet eviction's: a storage limit, and a scratch volume
		// for PathFill to write past it.
		slim, ok := ctr.Resources.Limits[corev1.ResourceEphemeralStorage]
		vols := d.Spec.Template.Spec.Volumes
		scratch := len(vols) == 1 && vols[0].EmptyDir != nil && len(ctr.VolumeMounts) == 1 && ctr.VolumeMounts[0].MountPath == ScratchDir &&
			strings.Contains(args, "--fill-dir="+ScratchDir)
		if real := tc.node == NodeKubelet; ok != real || scratch != real || (real && slim.String() != StorageLimit) {
			t.Errorf("%s node: ephemeral-storage limit %v (set %v), scratch volume %v, want %s and an emptyDir at %s on the real node only",
				tc.node, slim.String(), ok, scratch, StorageLimit, ScratchDir)
		}
		if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http" && p.ContainerPort == 8080 }) {
			t.Errorf("%s node: ports %+v, want 8080 named http", tc.node, ctr.Ports)
		}
		if cs := d.Spec.Template.Spec.Containers; len(cs) != 2 || cs[0].Name != "app" || cs[1].Name != ShipperName {
			t.Errorf("%s node: containers %d, want app and %s", tc.node, len(cs), ShipperName)
		} else if sh := cs[1]; sh.Image != ShipperImage || len(sh.Ports) != 0 || !slices.Equal(sh.Args, []string{"-c", shipperScript}) {
			t.Errorf("%s node: the shipper runs %s %v with ports %v, want %s, the script and no port", tc.node, sh.Image, sh.Args, sh.Ports, ShipperImage)
		}
		if *d.Spec.Replicas != 4 || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
			t.Errorf("%s node: want the short profile's shape: 4 replicas, maxUnavailable 0", tc.node)
		}
	}
}

func TestLongLivedReportWindow(t *testing.T) {
	ready := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	for _, settle := range []time.Duration{30 * time.Second, 20 * time.Minute} {
		r := LongLivedResult{Ready: ready, SettleEnd: ready.Add(settle)}
		r.End = r.SettleEnd.Add(10 * time.Minute)
		w := r.ReportWindow(ReportLead(settle))
		from := time.Unix(0, w.From).UTC()
		if !from.After(ready) || !from.Before(r.SettleEnd) {
			t.Errorf("settle %v: window from %v, want between the pods' readiness %v and the settle's end %v", settle, from, ready, r.SettleEnd)
		}
		if w.To <= r.End.UnixNano() {
			t.Errorf("settle %v: window ends before the load", settle)
		}
	}
	if err := (Profile{Name: "x", Duration: time.Minute, Replicas: 1, Clients: 1, Grace: time.Second, Interval: time.Second, Settle: time.Minute}).Validate(); err == nil {
		t.Error("a settle without a gap: want an error")
	}
	p := Profiles["longlived"]
	if err := p.Validate(); err != nil || p.MinReady <= analysis.RolloutGap {
		t.Errorf("longlived: %v, minReadySeconds %v: want it valid, its slow rollout's pods ending more than %v apart", err, p.MinReady, analysis.RolloutGap)
	}
	p.MinReady = 1500 * time.Millisecond
	if err := p.Validate(); err == nil {
		t.Error("minReadySeconds of 1.5 s: want an error")
	}
}
