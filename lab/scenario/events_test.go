package scenario_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/export/k8sevents"
	"github.com/drainscope/drainscope/lab/scenario"
)

// describeWithEvent waits for the DroppedRequests Event on the Deployment
// name and returns what the real kubectl describe says of the Deployment.
func describeWithEvent(ctx context.Context, c *scenario.Cluster, name string) (string, error) {
	dep, err := c.Client.AppsV1().Deployments(scenario.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		l, err := c.Client.CoreV1().Events(scenario.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return "", err
		}
		found := false
		for _, e := range l.Items {
			if e.Reason == k8sevents.Reason && e.InvolvedObject.UID == dep.UID {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no %s Event on Deployment %s (uid %s) 90 s into its teardown; its events: %+v", k8sevents.Reason, name, dep.UID, l.Items)
		}
		time.Sleep(500 * time.Millisecond)
	}
	cmd, err := c.CP.Kubectl(ctx, "describe", "deployment", "-n", scenario.Namespace, name)
	if err != nil {
		return "", err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl describe deployment %s: %w\n%s", name, err, out)
	}
	return string(out), nil
}

func checkDescribe(t *testing.T, out string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("the exit run's Event: %v", err)
		return
	}
	t.Logf("kubectl describe deployment sample-exit, before the run's teardown:\n%s", out)
	for _, want := range []string{"Warning  DroppedRequests", "drainscope", "requests failed in the rollout of Deployment/sample-exit (4 pods replaced)", "keep-alive connection cut at exit", "Fix for keep-alive connection cut at exit"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl describe deployment sample-exit lacks %q", want)
		}
	}
	if *labDescribe != "" {
		if err := os.WriteFile(*labDescribe, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}
