package deploy_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

type serviceMonitor struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Interval    string `json:"interval"`
			HonorLabels bool   `json:"honorLabels"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// monitoring is a rendering's Services, ServiceMonitors and PodMonitors.
func monitoring(t *testing.T, b []byte) (services []corev1.Service, sms []serviceMonitor, podMonitors int) {
	t.Helper()
	for _, d := range docs(b) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(d, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Service":
			var s corev1.Service
			if err := yaml.UnmarshalStrict(d, &s); err != nil {
				t.Fatal(err)
			}
			services = append(services, s)
		case "ServiceMonitor":
			var sm serviceMonitor
			if err := yaml.Unmarshal(d, &sm); err != nil {
				t.Fatal(err)
			}
			sms = append(sms, sm)
		case "PodMonitor":
			podMonitors++
		}
	}
	return services, sms, podMonitors
}

// TestChartServiceMonitor: metrics.serviceMonitor.enabled renders, for the
// agents and for the server, a ServiceMonitor whose selector finds a
// Service of this release whose endpoints are those pods' metrics ports;
// the server's keeps the signals' namespace label. Off by default, and
// refused together with the PodMonitors, which would scrape every pod twice.
func TestChartServiceMonitor(t *testing.T) {
	helm := tool(t, "helm")
	if _, sms, _ := monitoring(t, render(t, helm, variant{})); len(sms) != 0 {
		t.Errorf("defaults render %d ServiceMonitors", len(sms))
	}
	out := render(t, helm, variant{set: []string{"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=15s",
		"metrics.serviceMonitor.labels.release=kube-prometheus-stack"}})
	services, sms, pms := monitoring(t, out)
	pods := parseManifest(t, out).pods
	if pms != 0 || len(sms) != 2 {
		t.Fatalf("%d ServiceMonitors and %d PodMonitors, want 2 and 0", len(sms), pms)
	}
	for _, want := range []struct{ component, workload string }{
		{"agent", "DaemonSet/drainscope-agent"},
		{"server", "Deployment/drainscope-server"},
	} {
		pod, ok := pods[want.workload]
		if !ok {
			t.Fatalf("no %s", want.workload)
		}
		var sm *serviceMonitor
		for i := range sms {
			if sms[i].Metadata.Name == "drainscope-"+want.component {
				sm = &sms[i]
			}
		}
		if sm == nil {
			t.Errorf("no ServiceMonitor for the %s", want.component)
			continue
		}
		if sm.Metadata.Labels["release"] != "kube-prometheus-stack" {
			t.Errorf("%s: labels %v lack metrics.serviceMonitor.labels", sm.Metadata.Name, sm.Metadata.Labels)
		}
		if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{"drainscope"}) {
			t.Errorf("%s: namespaces %v", sm.Metadata.Name, sm.Spec.NamespaceSelector.MatchNames)
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" ||
			sm.Spec.Endpoints[0].Interval != "15s" || sm.Spec.Endpoints[0].HonorLabels != (want.component == "server") {
			t.Errorf("%s: endpoints %+v", sm.Metadata.Name, sm.Spec.Endpoints)
		}
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, svc := range services {
			if !sel.Matches(labels.Set(svc.Labels)) {
				continue
			}
			found = append(found, svc.Name)
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				t.Errorf("%s selects Service %s, which does not select the %s pods", sm.Metadata.Name, svc.Name, want.component)
			}
			var port *corev1.ServicePort
			for i := range svc.Spec.Ports {
				if svc.Spec.Ports[i].Name == "metrics" {
					port = &svc.Spec.Ports[i]
				}
			}
			if port == nil || port.TargetPort.String() != "metrics" {
				t.Errorf("Service %s has no metrics port to the pods' (%+v)", svc.Name, svc.Spec.Ports)
				continue
			}
			named := false
			for _, c := range pod.Spec.Containers {
				for _, p := range c.Ports {
					named = named || p.Name == "metrics"
				}
			}
			if !named {
				t.Errorf("the %s pods have no port named metrics", want.component)
			}
		}
		if len(found) != 1 {
			t.Errorf("%s selects Services %v, want one", sm.Metadata.Name, found)
		}
	}
	_, err := run(t, helm, "template", "drainscope", chart, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true")
	if err == nil || !strings.Contains(err.Error(), "enable one") {
		t.Errorf("both monitors: %v", err)
	}
}

// TestChartLogFormat: logFormat reaches every drainscope container.
func TestChartLogFormat(t *testing.T) {
	helm := tool(t, "helm")
	for _, format := range []string{"text", "json"} {
		m := parseManifest(t, render(t, helm, variant{set: []string{"logFormat=" + format}}))
		n := 0
		for name, p := range m.pods {
			for _, c := range p.Spec.Containers {
				if !strings.Contains(c.Image, "drainscope") {
					continue // Postgres
				}
				n++
				if !slices.Contains(c.Args, "--log-format="+format) {
					t.Errorf("logFormat=%s: %s runs %v", format, name, c.Args)
				}
			}
		}
		if n != 3 {
			t.Errorf("logFormat=%s: %d drainscope containers, want 3 (agent, server, migrate)", format, n)
		}
	}
}
