package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/relay"
)

// Once PodIndex says it has synced, it holds every pod the list gave: a
// shared informer's handlers get the listed pods after the informer has
// synced, and a server that checked against a half-filled index would take
// a forged event about another node's pod as one about a pod not known yet.
func TestPodIndexSyncedHoldsTheList(t *testing.T) {
	const n = 20000
	objs := make([]runtime.Object, n)
	for i := range objs {
		objs[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("web-%05d", i), UID: types.UID(fmt.Sprintf("uid-%05d", i))},
			Spec:       corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%100)},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := &relay.PodIndex{Client: fake.NewClientset(objs...)}
	if err := x.Ready(); err == nil || !strings.Contains(err.Error(), "pod index") {
		t.Fatalf("ready before the list: %v, want the reason", err)
	}
	go x.Run(ctx)
	if err := x.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := x.Ready(); err != nil {
		t.Fatalf("not ready once synced: %v", err)
	}
	if live, _ := x.Len(); live != n {
		t.Fatalf("synced holding %d of the %d pods listed", live, n)
	}
	p, ok, err := x.Place(event.PodRef{UID: fmt.Sprintf("uid-%05d", n-1)})
	if err != nil || !ok || p.Node != fmt.Sprintf("node-%d", (n-1)%100) {
		t.Fatalf("the last pod listed: %+v, %v, %v", p, ok, err)
	}
}
