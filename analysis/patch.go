package analysis

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// A fix an SRE can apply is a change to the workload with numbers from
// this cluster: a preStop that waits longer than the endpoints took to
// leave rotation here, a grace period that holds that wait and the drain
// the app was seen to need, in the form this cluster's versions accept.
// planPatch computes it from one workload's facts; the disruption's
// report (Disruption.Patch) and drainscope check (Check) both call it, so
// what check says a rollout needs is what the report of that rollout
// would print.

// Cluster is what the records say of the versions a cluster runs.
type Cluster struct {
	// APIServer is the API server's GitVersion, the latest recorded.
	APIServer string `json:"apiserver_version,omitempty"`
	// Kubelets is each node's kubelet version, the latest recorded.
	Kubelets map[string]string `json:"kubelet_versions,omitempty"`
}

// see takes a node_info event.
func (c *Cluster) see(e *event.Event) {
	if v := e.Attrs[event.AttrAPIServerVersion]; v != "" {
		c.APIServer = v
	}
	if v := e.Attrs[event.AttrKubeletVersion]; v != "" && e.Node != "" {
		if c.Kubelets == nil {
			c.Kubelets = map[string]string{}
		}
		c.Kubelets[e.Node] = v
	}
}

// Version is a Kubernetes minor version.
type Version struct{ Major, Minor int }

// ParseVersion reads "v1.30.2", "1.29", "v1.28.3-eks-1a2b", "v1.31.0+k3s1".
func ParseVersion(s string) (Version, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	major, rest, ok := strings.Cut(s, ".")
	if !ok {
		return Version{}, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil || end == 0 {
		return Version{}, false
	}
	return Version{ma, mi}, true
}

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

func (v Version) String() string { return fmt.Sprintf("1.%d", v.Minor) }

// Effective is the version a pod's spec must suit: the older of the API
// server's and the oldest kubelet's (a field the API server accepts does
// nothing on a kubelet that does not know it). ok is false when the API
// server's version is not recorded; from says what it was taken from.
func (c *Cluster) Effective() (v Version, from string, ok bool) {
	if c == nil {
		return Version{}, "", false
	}
	api, ok := ParseVersion(c.APIServer)
	if !ok {
		return Version{}, "", false
	}
	v, from = api, "the API server's "+c.APIServer
	nodes := make([]string, 0, len(c.Kubelets))
	for n := range c.Kubelets {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	oldest, oldestNode := Version{}, ""
	for _, n := range nodes {
		kv, ok := ParseVersion(c.Kubelets[n])
		if ok && (oldestNode == "" || !kv.AtLeast(oldest.Major, oldest.Minor)) {
			oldest, oldestNode = kv, n
		}
	}
	switch {
	case oldestNode == "":
		from += " (no node's kubelet version recorded)"
	case !oldest.AtLeast(v.Major, v.Minor):
		v, from = oldest, fmt.Sprintf("the kubelet %s on %s, the oldest of %d %s (API server %s)",
			c.Kubelets[oldestNode], NodeName(oldestNode), len(nodes), plural(len(nodes), "node", "nodes"), c.APIServer)
	default:
		from += fmt.Sprintf(" and %s, none older", plural(len(nodes), "its node's kubelet", fmt.Sprintf("%d nodes' kubelets", len(nodes))))
	}
	return v, from, true
}

// Patch is a fix as a change to a workload: the strategic merge patch, the
// kubectl line that applies it, and each value it sets with where the
// value came from. Causes only a change of the app's code prevents are
// named, not patched.
type Patch struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"workload_kind"`
	Name      string `json:"workload_name"`
	Container string `json:"container"`
	// Strategic is the strategic merge patch, JSON; Command applies it.
	// Both are empty when nothing could be patched (Notes say why).
	Strategic string       `json:"strategic_merge_patch,omitempty"`
	Command   string       `json:"kubectl,omitempty"`
	Values    []PatchValue `json:"values,omitempty"`
	// Covers are the causes the patch's settings prevent; NeedsCode those
	// only the app's code prevents (it is not counted against the patch);
	// Notes what could not be patched and why.
	Covers    []Cause `json:"covers,omitempty"`
	NeedsCode []Cause `json:"needs_code,omitempty"`
	// Guards are causes none of the failures had whose door the measured
	// budget shows open (a preStop shorter than the endpoints' lag), which
	// the patch closes as well.
	Guards []Cause  `json:"guards,omitempty"`
	Notes  []string `json:"notes,omitempty"`
}

// PatchValue is one setting of a patch and where its number came from.
type PatchValue struct {
	Field string `json:"field"`
	Value string `json:"value"`
	From  string `json:"from"`
}

// The margins a patch adds to what was measured: the preStop waits the
// measured lag and half of it again, plus lagMargin (a lag measured over
// a few removals is a floor for the next rollout's, not its bound); the
// grace period holds the preStop, the drain seen and half of it again,
// plus graceMargin (the kubelet gives one 2 s extension after it, no more).
const (
	lagFactor   = 1.5
	lagMargin   = 2_000_000_000
	drainFactor = 1.5
	graceMargin = 5_000_000_000
)

// patchable are the workload kinds whose pod template a strategic merge
// patch of spec.template changes.
var patchable = map[string]bool{"Deployment": true, "StatefulSet": true, "DaemonSet": true, "ReplicaSet": true}

// dnsName is what a namespace, a workload's and a container's names are
// (a DNS-1123 subdomain, which holds the label form of namespaces and
// containers): nothing a shell reads as more than a word.
var dnsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// budget is what planPatch reads of one workload.
type budget struct {
	Namespace, Kind, Name string
	// Stop is the app container's spec, from its newest pod.
	Stop *StopSpec
	// Lag is how long endpoints took to leave rotation everywhere after a
	// deletion (-1: not measured), LagFrom says over what.
	Lag     int64
	LagFrom string
	// Drain is the longest exit after SIGTERM of a pod that exited by
	// itself (-1: none did), DrainFrom over what. Killed counts the pods
	// SIGKILL ended before they exited.
	Drain     int64
	DrainFrom string
	Killed    int
	// Causes are the causes to fix (counted on the workload's pods).
	Causes []Cause
	// Mesh and Proxies: the proxy beside the app (sidecar_exit).
	Mesh    string
	Proxies []string
	Cluster *Cluster
	// Cilium: some node routes Services with Cilium's eBPF maps (its
	// kube-proxy replacement); CiliumLag is their measured p99 lag from
	// the watch (-1: not recorded).
	Cilium    bool
	CiliumLag int64
}

// planPatch computes the patch for b.
func planPatch(b *budget) *Patch {
	p := &Patch{Namespace: b.Namespace, Kind: b.Kind, Name: b.Name}
	if b.Stop != nil {
		p.Container = b.Stop.Container
	}
	need := map[Cause]bool{}
	for _, c := range b.Causes {
		need[c] = true
	}
	race := need[CauseEndpointRace] || need[CauseEndpointRaceLikely] || need[CausePreStopFailed] || need[CauseProxyLag]
	for _, c := range []Cause{CauseKeepAliveAtExit, CauseInFlight} {
		if need[c] {
			p.NeedsCode = append(p.NeedsCode, c)
		}
	}
	for _, c := range []Cause{CauseKilled, CauseDied, CauseDiedLikely, CauseNoReadyEndpoints} {
		if need[c] {
			p.Notes = append(p.Notes, fmt.Sprintf("%s is not a matter of the termination settings: its fix stays as written", c))
		}
	}
	if b.Kind == "" || b.Name == "" {
		p.Notes = append(p.Notes, "the pods have no recorded workload: a pod's termination settings are changed in what creates it")
		return p
	}
	if !patchable[b.Kind] {
		p.Notes = append(p.Notes, fmt.Sprintf("a %s's pod template is not patched here: change its termination settings where it is defined", b.Kind))
		return p
	}
	for _, n := range []string{b.Namespace, b.Name, p.Container} {
		if n != "" && !dnsName.MatchString(n) {
			// Recorded names go into a shell command: only names the API
			// server could have made do.
			p.Notes = append(p.Notes, fmt.Sprintf("%q is no Kubernetes name: no command is made from it", n))
			return p
		}
	}
	if p.Container == "" {
		p.Notes = append(p.Notes, "which container is the app was not recorded (no container_started with the Service's port)")
		return p
	}
	if !b.Stop.Recorded {
		p.Notes = append(p.Notes, "the app container's spec (its preStop, the grace period) was not recorded: an agent older than this drainscope recorded its start")
		return p
	}
	container := map[string]any{"name": p.Container}
	podSpec := map[string]any{}
	var annotations map[string]any

	// The preStop wait.
	wait := int64(-1) // the wait the patch leaves the pod, seconds
	cur := b.Stop
	if cur.PreStopSleep != nil && cur.HookFailed == 0 {
		wait = *cur.PreStopSleep
	} else if cur.PreStop == "" || cur.HookFailed != 0 {
		wait = 0
	}
	// The race is open when the preStop waits less than this workload's
	// endpoints were measured to take, whether or not this rollout's
	// load happened to open a connection in that window: the patch guards
	// against it too, and says so.
	open := b.Lag >= 0 && wait >= 0 && wait*1e9 < b.Lag
	if race || open {
		switch {
		case b.Lag < 0:
			p.Notes = append(p.Notes, "no endpoint's propagation after a deletion was measured: the preStop wait has nothing to go by")
		default:
			s := ceilSeconds(float64(b.Lag)*lagFactor + lagMargin)
			if wait >= s && cur.HookFailed == 0 {
				p.Notes = append(p.Notes, fmt.Sprintf("the preStop already waits %d s, above the %d s the measured lag needs", wait, s))
				break
			}
			if form, from, ok := preStopForm(p, b, cur, s); ok {
				container["lifecycle"] = map[string]any{"preStop": form}
				p.Values = append(p.Values, PatchValue{Field: "lifecycle.preStop", Value: preStopWords(form, s),
					From: fmt.Sprintf("the lag %s × %.1f + %s (%s); form: %s", fmtDur(b.Lag), lagFactor, fmtDur(lagMargin), b.LagFrom, from)})
				wait = s
				for _, c := range []Cause{CausePreStopFailed, CauseEndpointRace, CauseEndpointRaceLikely, CauseProxyLag} {
					if need[c] {
						p.Covers = append(p.Covers, c)
					}
				}
				switch {
				case cur.HookFailed != 0 && !need[CausePreStopFailed]:
					p.Guards = append(p.Guards, CausePreStopFailed)
				case !race:
					p.Guards = append(p.Guards, CauseEndpointRace)
				}
			}
		}
	}

	if b.Cilium && race {
		if b.CiliumLag >= 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("Services are routed by Cilium's eBPF maps, not kube-proxy: the wait covers Cilium's own lag, measured in its maps (p99 %s); kube-proxy's fallback to terminating endpoints (ProxyTerminatingEndpoints, 1.28+) is not Cilium's to follow", fmtDur(b.CiliumLag)))
		} else {
			p.Notes = append(p.Notes, "Services are routed by Cilium's eBPF maps, whose own lag after the EndpointSlice was not recorded here: the wait covers the EndpointSlice's propagation only; record Cilium's maps (the agent's --dataplane cilium) to measure what else it needs")
		}
	}

	// The grace period: the wait, the drain seen, margins.
	if wait < 0 {
		wait = 0
	}
	curGrace := int64(30) // the API's default
	graceFrom := "the default 30 s"
	if cur.GracePeriod != nil {
		curGrace, graceFrom = *cur.GracePeriod, fmt.Sprintf("%d s", *cur.GracePeriod)
	}
	switch {
	case b.Drain >= 0:
		g := wait + ceilSeconds(float64(b.Drain)*drainFactor+graceMargin)
		if g <= curGrace {
			p.Notes = append(p.Notes, fmt.Sprintf("terminationGracePeriodSeconds stays %s: it holds the %d s the preStop and the drain need", graceFrom, g))
		} else {
			podSpec["terminationGracePeriodSeconds"] = g
			p.Values = append(p.Values, PatchValue{Field: "terminationGracePeriodSeconds", Value: fmt.Sprintf("%d", g),
				From: fmt.Sprintf("the preStop %d s + the drain %s × %.1f (%s) + %s; now %s", wait, fmtDur(b.Drain), drainFactor, b.DrainFrom, fmtDur(graceMargin), graceFrom)})
		}
		if need[CauseSIGKILL] {
			p.Covers = append(p.Covers, CauseSIGKILL)
		}
	case need[CauseSIGKILL]:
		p.Notes = append(p.Notes, fmt.Sprintf("SIGKILL ended %d %s before %s exited by itself, so its drain time was not seen: give terminationGracePeriodSeconds at least the preStop (%d s) + the app's own shutdown timeout + %s",
			b.Killed, plural(b.Killed, "pod", "pods"), plural(b.Killed, "it", "they"), wait, fmtDur(graceMargin)))
	}

	// A proxy beside the app.
	if need[CauseSidecarExit] {
		keep := wait + max(0, ceilSeconds(float64(max(b.Drain, 0))*drainFactor)) + lagMargin/1e9
		switch b.Mesh {
		case "linkerd":
			annotations = map[string]any{"config.alpha.linkerd.io/proxy-wait-before-exit-seconds": strconv.FormatInt(keep, 10)}
			p.Values = append(p.Values, PatchValue{Field: "metadata.annotations[config.alpha.linkerd.io/proxy-wait-before-exit-seconds]", Value: strconv.FormatInt(keep, 10),
				From: fmt.Sprintf("the app's preStop %d s + its drain × %.1f + %s", wait, drainFactor, fmtDur(lagMargin))})
			p.Covers = append(p.Covers, CauseSidecarExit)
		case "istio":
			p.Notes = append(p.Notes, fmt.Sprintf(`istio-proxy: set terminationDrainDuration: %ds in the proxy.istio.io/config annotation (merged into what it holds: the annotation is one document, which a patch would replace), or run it as a native sidecar`, keep))
		default:
			native := ""
			if v, _, ok := b.Cluster.Effective(); ok && v.AtLeast(1, 29) {
				native = fmt.Sprintf(", or make it a native sidecar (an initContainer with restartPolicy: Always; %s has them), which the kubelet stops after the app", v)
			}
			p.Notes = append(p.Notes, fmt.Sprintf("the proxy %s: keep it serving %d s after its SIGTERM (the app's preStop + drain)%s", joinAnd(b.Proxies), keep, native))
		}
	}

	if len(container) > 1 {
		podSpec["containers"] = []any{container}
	}
	if len(podSpec) == 0 && annotations == nil {
		return p
	}
	tmpl := map[string]any{}
	if len(podSpec) > 0 {
		tmpl["spec"] = podSpec
	}
	if annotations != nil {
		tmpl["metadata"] = map[string]any{"annotations": annotations}
	}
	doc, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	if err != nil {
		p.Notes = append(p.Notes, "the patch did not encode: "+err.Error())
		return p
	}
	p.Strategic = string(doc)
	p.Command = fmt.Sprintf("kubectl -n %s patch %s %s --type strategic -p '%s'", b.Namespace, strings.ToLower(b.Kind), b.Name, p.Strategic)
	return p
}

// preStopForm is the preStop handler that waits s seconds in the form the
// cluster's versions and the image allow, with why; ok false (and a note
// on p) where none can be given.
func preStopForm(p *Patch, b *budget, cur *StopSpec, s int64) (form map[string]any, from string, ok bool) {
	if cur.PreStop == event.PreStopHTTP || cur.PreStop == event.PreStopTCP ||
		cur.PreStop == event.PreStopExec && cur.PreStopSleep == nil && cur.HookFailed == 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("the preStop is a %s hook that does more than wait: make it wait %d s before it returns (a patch would replace it)", cur.PreStop, s))
		return nil, "", false
	}
	v, vfrom, known := b.Cluster.Effective()
	switch {
	case !known:
		p.Notes = append(p.Notes, fmt.Sprintf("the API server's version was not recorded (node_info): the preStop's form cannot be chosen — lifecycle.preStop.sleep.seconds: %d on Kubernetes 1.30+, exec sleep %d before, where the image has a sleep", s, s))
		return nil, "", false
	case v.AtLeast(1, 30):
		form = map[string]any{"sleep": map[string]any{"seconds": s}}
		if cur.PreStop == event.PreStopExec {
			form["exec"] = nil // one handler: the exec goes
		}
		state := "GA"
		if !v.AtLeast(1, 34) {
			state = "beta, on by default (PodLifecycleSleepAction)"
		}
		return form, fmt.Sprintf("the sleep action, which needs nothing in the image (%s on %s: %s)", state, v, vfrom), true
	case cur.HookFailed != 0:
		p.Notes = append(p.Notes, fmt.Sprintf("the kubelet reported the preStop failed (FailedPreStopHook): the image lacks the command; on %s (%s) there is no sleep action (1.30+): put a sleep binary in the image and exec it for %d s, or upgrade to 1.30", v, vfrom, s))
		return nil, "", false
	default:
		return map[string]any{"exec": map[string]any{"command": []string{"sleep", strconv.FormatInt(s, 10)}}},
			fmt.Sprintf("exec sleep, the image's own (no sleep action before 1.30; %s: %s)", v, vfrom), true
	}
}

func preStopWords(form map[string]any, s int64) string {
	if _, ok := form["sleep"]; ok {
		return fmt.Sprintf("sleep: {seconds: %d}", s)
	}
	return fmt.Sprintf(`exec: ["sleep", "%d"]`, s)
}

// ceilSeconds rounds ns up to whole seconds.
func ceilSeconds(ns float64) int64 { return int64(math.Ceil(ns / 1e9)) }

// plan computes d's patch from res: the causes of its failures, the spec
// its replaced pods ran, and what res measured on its workload's pods.
// Nil when none of its failures has a cause.
func (d *Disruption) plan(res *Result) *Patch {
	var causes []Cause
	for _, c := range d.Causes {
		if c.Cause != CauseUnexplained {
			causes = append(causes, c.Cause)
		}
	}
	if len(causes) == 0 {
		return nil
	}
	b := workloadBudget(res, d.Namespace, d.Kind, d.Name, func(tl *PodTimeline) bool { return d.has(tl.Pod) })
	b.Causes = causes
	return planPatch(b)
}

// workloadBudget gathers what res measured on the workload's pods: the
// lag of their endpoints, the drain of those that exited by themselves,
// and the spec of the newest of them that replaced says (all when nil).
func workloadBudget(res *Result, ns, kind, name string, replaced func(*PodTimeline) bool) *budget {
	b := budgetOf(res, func(tl *PodTimeline) bool { return tl.Pod.Namespace == ns && tl.Kind == kind && tl.Name == name }, replaced)
	b.Namespace, b.Kind, b.Name = ns, kind, name
	return b
}

// budgetOf gathers what res measured on the pods match takes, as
// workloadBudget does.
func budgetOf(res *Result, match, replaced func(*PodTimeline) bool) *budget {
	b := &budget{Lag: -1, Drain: -1, Cluster: res.Cluster, CiliumLag: -1}
	for _, np := range res.Proxies {
		b.Cilium = b.Cilium || np.Mode == event.ProxyCilium
	}
	for _, l := range res.DataplaneLag {
		if l.Proxy == event.ProxyCilium {
			b.Cilium, b.CiliumLag = true, max(b.CiliumLag, l.P99)
		}
	}
	var props, first []int64
	var drains []int64
	var stopAt int64 = -1
	var stops []*StopSpec
	for i := range res.Timelines {
		tl := &res.Timelines[i]
		if !match(tl) {
			continue
		}
		if tl.Deletion != 0 && tl.Gaps.Propagation != nil {
			props = append(props, *tl.Gaps.Propagation)
			if w := watchLeave(tl); w != 0 {
				first = append(first, w-tl.Deletion)
			}
		}
		if g := tl.Gaps.ExitAfterSigterm; g != nil && tl.Kill == nil {
			drains = append(drains, *g)
		}
		if replaced != nil && !replaced(tl) {
			continue
		}
		if tl.Kill != nil && tl.Exit == nil || tl.Kill != nil && tl.Exit != nil && tl.Exit.Signal == "SIGKILL" {
			b.Killed++
		}
		if tl.Stop != nil {
			stops = append(stops, tl.Stop)
			if at := max(tl.Deletion, tl.Created, tl.Since); b.Stop == nil || at >= stopAt {
				s := *tl.Stop
				b.Stop, stopAt = &s, at
			}
		}
		for _, cv := range tl.Containers {
			if cv.Inbound && !cv.App {
				if m := meshOf(cv.Name); m != "" {
					b.Mesh = m
				}
				if !slices.Contains(b.Proxies, cv.Name) {
					b.Proxies = append(b.Proxies, cv.Name)
				}
			}
		}
	}
	if b.Stop != nil {
		// A preStop that failed on a pod of the same spec failed for the
		// newest too; a failure under an earlier spec (before a patch)
		// says nothing of this one.
		for _, s := range stops {
			if s.HookFailed != 0 && s.PreStop == b.Stop.PreStop && sameSeconds(s.PreStopSleep, b.Stop.PreStopSleep) {
				b.Stop.HookFailed = max(b.Stop.HookFailed, s.HookFailed)
			}
		}
	}
	if len(props) > 0 {
		p99 := quantileSorting(props, 0.99)
		b.Lag = p99
		b.LagFrom = fmt.Sprintf("p99 of %s deletion → last node out of rotation", podsPossessive(len(props)))
		if dp := maxLagP99(res.DataplaneLag); dp > 0 && len(first) > 0 {
			if w := quantileSorting(first, 0.99) + dp; w > b.Lag {
				b.Lag = w
				b.LagFrom = fmt.Sprintf("p99 of %s deletion → the watch's endpoint change, %s, + the slowest proxy's p99 %s after it", podsPossessive(len(first)), fmtDur(quantileSorting(first, 0.99)), fmtDur(dp))
			}
		}
	}
	if len(drains) > 0 {
		b.Drain = quantileSorting(drains, 1)
		b.DrainFrom = fmt.Sprintf("the longest of %s exit after SIGTERM", podsPossessive(len(drains)))
	}
	return b
}

func sameSeconds(a, b *int64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// watchLeave is when the first node's watch saw the pod's endpoint leave
// rotation (not ready, terminating or removed), 0 when none did.
func watchLeave(tl *PodTimeline) int64 {
	var t int64
	for _, s := range []*Spread{tl.EndpointNotReady, tl.EndpointTerminating, tl.EndpointRemoved} {
		if s != nil && (t == 0 || s.First < t) {
			t = s.First
		}
	}
	return t
}

func podsPossessive(n int) string {
	if n == 1 {
		return "1 pod's"
	}
	return fmt.Sprintf("%d pods'", n)
}

// quantileSorting is the q-quantile of v as the measured lags take theirs
// (quantileOf), v sorted in place.
func quantileSorting(v []int64, q float64) int64 {
	slices.Sort(v)
	return quantileOf(v, q)
}

func maxLagP99(ls []NodeLag) int64 {
	var m int64
	for _, l := range ls {
		m = max(m, l.P99)
	}
	return m
}
