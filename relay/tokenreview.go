package relay

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// The keys kube-apiserver puts in a TokenReview's status.user.extra for a
// token bound to a pod (k8s.io/apiserver/pkg/authentication/serviceaccount:
// PodNameKey, NodeNameKey; the node's since Kubernetes 1.30, feature
// ServiceAccountTokenPodNodeInfo, GA and locked on since 1.32).
const (
	ExtraPodName  = "authentication.kubernetes.io/pod-name"
	ExtraPodUID   = "authentication.kubernetes.io/pod-uid"
	ExtraNodeName = "authentication.kubernetes.io/node-name"
)

// Agent is who wrote a batch: the node its token is bound to and the pod
// the token was issued for.
type Agent struct {
	Node         string
	PodNamespace string
	Pod          string
}

// AuthError is a refused token: Status is 401 (not a valid token) or 403
// (a valid token, but not an agent's).
type AuthError struct {
	Status int
	Msg    string
}

func (e *AuthError) Error() string { return e.Msg }

// Authenticator says which agent a bearer token belongs to. It returns an
// *AuthError for a token it refuses; any other error is its own failure
// (the API server unreachable), answered 503.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Agent, error)
}

// DefaultReviewTTL is how long a TokenReview's answer is reused for the
// same token, and DefaultDenyTTL the same for a refusal.
const (
	DefaultReviewTTL = time.Minute
	DefaultDenyTTL   = 10 * time.Second
)

// TokenReviewer authenticates agents with the TokenReview API: the token
// must be valid for the API server (or Audiences), belong to the service
// account Namespace/ServiceAccount and be bound to a pod that is bound to a
// node: the projected token kubelet mounts in every agent pod. The node is
// the token's, signed by the API server, so an agent cannot claim another.
//
// Answers are kept for TTL to 1.5 TTL (refusals for DenyTTL), keyed by the
// token's SHA-256, and never past the token's own expiry, so a batch costs
// a review only once a minute or so per agent, and a revoked token (its
// pod deleted, its service account removed) is refused within 1.5 TTL:
// 90 s by default. With Audiences set, the review must confirm one of
// them (status.audiences). The spread, drawn from the
// token's hash, keeps the reviews of agents that began together (every
// agent, after the server restarts) from falling due together again
// (docs/scale.md).
type TokenReviewer struct {
	Client         authnclient.TokenReviewsGetter
	Namespace      string
	ServiceAccount string
	Audiences      []string      // empty: the API server's own
	TTL            time.Duration // 0: DefaultReviewTTL
	DenyTTL        time.Duration // 0: DefaultDenyTTL
	MaxCached      int           // 0: 10,000 tokens
	Now            func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]cached
	// Reviews counts the TokenReviews sent, for tests and metrics.
	reviews int64
}

type cached struct {
	agent   Agent
	err     *AuthError
	expires time.Time
}

// Reviews reports how many TokenReviews were sent.
func (r *TokenReviewer) Reviews() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reviews
}

func (r *TokenReviewer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Authenticate implements Authenticator.
func (r *TokenReviewer) Authenticate(ctx context.Context, token string) (Agent, error) {
	if token == "" {
		return Agent{}, &AuthError{Status: 401, Msg: "no bearer token: send the agent's service account token"}
	}
	key := sha256.Sum256([]byte(token))
	now := r.now()
	if c, ok := r.cached(key, now); ok {
		if c.err != nil {
			return Agent{}, c.err
		}
		return c.agent, nil
	}
	agent, aerr, err := r.review(ctx, token)
	if err != nil {
		return Agent{}, err // not cached: the API server may be back at once
	}
	ttl := r.TTL
	if ttl <= 0 {
		ttl = DefaultReviewTTL
	}
	if aerr != nil {
		ttl = r.DenyTTL
		if ttl <= 0 {
			ttl = DefaultDenyTTL
		}
	}
	if aerr == nil {
		ttl = spreadTTL(key, ttl)
	}
	exp := now.Add(ttl)
	if e, ok := tokenExpiry(token); ok && e.Before(exp) {
		exp = e
	}
	r.store(key, cached{agent: agent, err: aerr, expires: exp}, now)
	if aerr != nil {
		return Agent{}, aerr
	}
	return agent, nil
}

// Known reports whether token's review accepted it and its answer is
// still held: no request is made.
func (r *TokenReviewer) Known(token string) bool {
	if token == "" {
		return false
	}
	c, ok := r.cached(sha256.Sum256([]byte(token)), r.now())
	return ok && c.err == nil
}

// cached returns the answer held for the token hashed to key, if it has
// not expired by now.
func (r *TokenReviewer) cached(key [32]byte, now time.Time) (cached, bool) {
	r.mu.Lock()
	c, ok := r.cache[key]
	r.mu.Unlock()
	return c, ok && now.Before(c.expires)
}

// spreadTTL is ttl lengthened by up to half, by the token hash's first
// bytes: evenly over [ttl, 1.5 ttl) across tokens, the same for one token.
func spreadTTL(key [32]byte, ttl time.Duration) time.Duration {
	u := binary.BigEndian.Uint16(key[:2])
	return ttl + time.Duration(float64(ttl/2)*float64(u)/65536)
}

// store keeps c, first forgetting expired answers when the cache is full;
// when it is still full, c is not kept.
func (r *TokenReviewer) store(key [32]byte, c cached, now time.Time) {
	max := r.MaxCached
	if max <= 0 {
		max = 10000
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil {
		r.cache = map[[32]byte]cached{}
	}
	if len(r.cache) >= max {
		for k, v := range r.cache {
			if !now.Before(v.expires) {
				delete(r.cache, k)
			}
		}
	}
	if len(r.cache) < max {
		r.cache[key] = c
	}
}

// review asks the API server. aerr is its refusal; err a failure to ask.
func (r *TokenReviewer) review(ctx context.Context, token string) (Agent, *AuthError, error) {
	r.mu.Lock()
	r.reviews++
	r.mu.Unlock()
	tr, err := r.Client.TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: r.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Agent{}, nil, fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		msg := "the token is not valid (token review: not authenticated)"
		if st.Error != "" {
			msg = "the token is not valid: " + st.Error
		}
		return Agent{}, &AuthError{Status: 401, Msg: msg}, nil
	}
	if len(r.Audiences) > 0 && !audienceConfirmed(r.Audiences, st.Audiences) {
		// The API reference: a client that sets spec.audiences must check
		// that status.audiences names one of them, or the reviewer is not
		// audience aware and the token may be for any audience.
		return Agent{}, &AuthError{Status: 401, Msg: fmt.Sprintf("the token review did not confirm an audience of %q (it answered %q)",
			r.Audiences, st.Audiences)}, nil
	}
	want := "system:serviceaccount:" + r.Namespace + ":" + r.ServiceAccount
	if st.User.Username != want {
		return Agent{}, &AuthError{Status: 403, Msg: fmt.Sprintf("the token is %s's, not the agent's (%s)", st.User.Username, want)}, nil
	}
	extra := func(k string) string {
		if v := st.User.Extra[k]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	a := Agent{Node: extra(ExtraNodeName), PodNamespace: r.Namespace, Pod: extra(ExtraPodName)}
	switch {
	case a.Pod == "":
		return Agent{}, &AuthError{Status: 403, Msg: "the token is not bound to a pod: use the agent pod's projected service account token"}, nil
	case a.Node == "":
		return Agent{}, &AuthError{Status: 403, Msg: fmt.Sprintf("the token for pod %s/%s names no node (was it issued before the pod was scheduled, or by a Kubernetes before 1.30?)", a.PodNamespace, a.Pod)}, nil
	}
	return a, nil, nil
}

// audienceConfirmed reports whether the review's status.audiences names
// one of the audiences asked for.
func audienceConfirmed(want, got []string) bool {
	for _, a := range got {
		if slices.Contains(want, a) {
			return true
		}
	}
	return false
}

// tokenExpiry reads a JWT's exp claim without checking the signature: only
// to keep a cached answer from outliving the token. The API server has
// checked the token itself.
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(raw, &claims) != nil || claims.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

// asAuthError unwraps err's *AuthError.
func asAuthError(err error) (*AuthError, bool) {
	var ae *AuthError
	ok := errors.As(err, &ae)
	return ae, ok
}
