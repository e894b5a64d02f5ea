package scenario

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The long-lived sequence's later steps: what else a cluster that has run
// for days sees besides rollouts, scale-downs and evictions.

// stepServiceDelete deletes the pods' second Service and waits until its
// EndpointSlices are gone and the first Service still reaches every pod:
// the pods leave one Service and keep serving in the other.
func stepServiceDelete(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepServiceDelete}
	pods, err := runPods(ctx, c, LongLivedRun)
	if err != nil {
		return st, err
	}
	svc, err := c.Client.CoreV1().Services(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return st, fmt.Errorf("reading the Service %s: %w", name, err)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return st, fmt.Errorf("service %s has no ClusterIP: %w", name, err)
	}
	canary := CanaryService(name)
	st.Start = time.Now()
	if err := c.Client.CoreV1().Services(Namespace).Delete(ctx, canary, metav1.DeleteOptions{}); err != nil {
		return st, fmt.Errorf("deleting the Service %s: %w", canary, err)
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		sl, err := c.Client.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + canary})
		if err == nil && len(sl.Items) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the EndpointSlices of %s to go: %w", canary, ctx.Err())
		case <-t.C:
		}
	}
	if err := waitServed(ctx, c, netip.AddrPortFrom(ip, 80), len(pods)); err != nil {
		return st, fmt.Errorf("the Service %s after %s's deletion: %w", name, canary, err)
	}
	st.End = time.Now()
	st.Note = fmt.Sprintf("Service %s deleted, its EndpointSlices gone; %s still reaches all %d pods", canary, name, len(pods))
	return st, nil
}
