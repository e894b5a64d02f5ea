package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/drainscope/drainscope/relay"
)

// TestReviewMustConfirmTheAudience: a reviewer asked for the audience
// "drainscope" takes a token only when the review's status.audiences
// names it. A review that authenticates the token but names no audience
// (a reviewer that is not audience aware, which the API reference warns
// of) or another one is refused, 401.
func TestReviewMustConfirmTheAudience(t *testing.T) {
	for _, tc := range []struct {
		name      string
		audiences []string // status.audiences the review answers
		ok        bool
	}{
		{"confirmed", []string{"drainscope"}, true},
		{"among others", []string{"vault", "drainscope"}, true},
		{"none named", nil, false},
		{"another", []string{"https://kubernetes.default.svc"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
				tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: tc.audiences, User: authnv1.UserInfo{
					Username: "system:serviceaccount:drainscope:drainscope-agent",
					Extra: map[string]authnv1.ExtraValue{
						relay.ExtraPodName: {"agent-x"}, relay.ExtraNodeName: {"node-a"},
					},
				}}
				return true, tr, nil
			})
			r := &relay.TokenReviewer{Client: cs.AuthenticationV1(), Namespace: "drainscope", ServiceAccount: "drainscope-agent",
				Audiences: []string{"drainscope"}}
			a, err := r.Authenticate(context.Background(), "a-token")
			if tc.ok {
				if err != nil || a.Node != "node-a" {
					t.Fatalf("confirmed audience: %+v, %v; want node-a", a, err)
				}
				return
			}
			var ae *relay.AuthError
			if !errors.As(err, &ae) || ae.Status != 401 || !strings.Contains(ae.Msg, "did not confirm an audience") {
				t.Fatalf("status.audiences %q: %+v, %v; want 401 naming the audience", tc.audiences, a, err)
			}
		})
	}
}

// TestKnownToken: the reviewer knows a token it accepted, until its
// answer expires, and never one it refused; asking costs no review.
func TestKnownToken(t *testing.T) {
	now := time.Unix(1e9, 0)
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		if tr.Spec.Token == "good" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{
				Username: "system:serviceaccount:drainscope:drainscope-agent",
				Extra:    map[string]authnv1.ExtraValue{relay.ExtraPodName: {"agent-x"}, relay.ExtraNodeName: {"node-a"}},
			}}
		}
		return true, tr, nil
	})
	r := &relay.TokenReviewer{Client: cs.AuthenticationV1(), Namespace: "drainscope", ServiceAccount: "drainscope-agent",
		Now: func() time.Time { return now }}
	h := &relay.Handler{Auth: r}
	if h.KnownToken("good") {
		t.Fatal("a token never reviewed is known")
	}
	r.Authenticate(context.Background(), "good")
	r.Authenticate(context.Background(), "bad")
	reviews := r.Reviews()
	if !h.KnownToken("good") || h.KnownToken("bad") || h.KnownToken("") {
		t.Errorf("known: good %v, bad %v, empty %v; want only the accepted one", h.KnownToken("good"), h.KnownToken("bad"), h.KnownToken(""))
	}
	if r.Reviews() != reviews {
		t.Errorf("asking sent %d reviews", r.Reviews()-reviews)
	}
	now = now.Add(relay.DefaultReviewTTL*3/2 + time.Second)
	if h.KnownToken("good") {
		t.Error("known past its answer's life")
	}
}
