package analysis

import (
	"net/netip"

	"github.com/drainscope/drainscope/event"
)

// Cause names why a failure happened.
type Cause string

const (
	CauseSIGKILL Cause = "sigkill"
	// CauseKilled is a container killed with no SIGTERM and no deletion
	// before it: the kernel's OOM killer, not a grace period.
	CauseKilled          Cause = "killed"
	CauseInFlight        Cause = "inflight_cut"
	CauseKeepAliveAtExit Cause = "keepalive_at_exit"
	CauseEndpointRace    Cause = "endpoint_race"
	// CauseEndpointRaceLikely is the endpoint race where no record names
	// the pod the connection reached: the Service's pods that had exited
	// while still in rotation are its candidates.
	CauseEndpointRaceLikely Cause = "endpoint_race_likely"
	// CauseDied is a new connection refused or never answered after the
	// pod's app died with no SIGTERM and no deletion before (an OOM kill
	// or a crash) while its endpoint was still in rotation: no preStop
	// runs for a container that dies, the readiness probe takes it out.
	CauseDied Cause = "died_in_rotation"
	// CauseDiedLikely is CauseDied where no record names the pod the
	// connection reached: the candidates are the Service's pods that died.
	CauseDiedLikely       Cause = "died_in_rotation_likely"
	CauseNoReadyEndpoints Cause = "no_ready_endpoints"
	CauseUnexplained      Cause = "unexplained"
	// CauseSidecarExit is a connection cut or refused by a proxy beside
	// the app (a mesh's sidecar) that exited before the app: its exit, not
	// the app's drain, ended what it carried.
	CauseSidecarExit Cause = "sidecar_exit"
	// CausePreStopFailed is the endpoint race where the kubelet reported
	// the app's preStop hook failed (FailedPreStopHook: an exec of a
	// command the image lacks, as sleep in a distroless image): the delay
	// it was to give never ran, and SIGTERM came at once.
	CausePreStopFailed Cause = "prestop_failed"
)

// Rule is one row of the cause table: the cause it names, the evidence it
// requires (every requirement must find at least one piece), how to explain
// one failure and a group of them, and the fix. Rules are tried in order;
// the first whose requirements all hold decides. A rule with no
// requirements always holds, so the table ends with "unexplained".
//
// Explain is a text/template over ExplainData, Summary and Fix over
// SummaryData.
type Rule struct {
	Cause    Cause         `json:"cause"`
	Title    string        `json:"title"`
	Requires []Requirement `json:"requires"`
	Explain  string        `json:"explain"`
	Summary  string        `json:"summary"`
	Fix      string        `json:"fix"`
	// Likely: the rule names a cause no record ties to one pod (its
	// evidence lists the candidates); the report says "likely".
	Likely bool `json:"likely,omitempty"`
	// Color is the cause's colour on the timeline, the histograms and the
	// chips: "#RRGGBB", told apart from every other rule's.
	Color string `json:"color"`
}

// Requirement is one piece of evidence a rule needs. Find appends the events
// that show it to dst; it holds when it appended any.
type Requirement struct {
	Name string `json:"name"`
	Find Finder `json:"-"`
}

// Finder looks for evidence in the facts about one failure.
type Finder func(f *Facts, dst []Piece) []Piece

// Piece is one event that supports a requirement, with the role it plays.
type Piece struct {
	Role  string
	Event *event.Event
}

// evictionFix opens a fix for a pod the kubelet evicted for node pressure
// (Evicted): its own grace period was not what ran out. The rule's own
// fix follows in an {{else}} branch.
const evictionFix = `{{if .Evicted}}the kubelet evicted the pod when the node crossed an eviction threshold: a hard one (evictionHard) kills at once and a soft one (evictionSoft) gives at most evictionMaxPodGracePeriod, whatever terminationGracePeriodSeconds says; requests that cover the pod's use keep it off the eviction list, and an evictionMaxPodGracePeriod above preStop + drain lets it drain`

// sidecarFix says how to keep a proxy sidecar up until its app has
// drained, for the mesh the pod shows (SummaryData.Mesh) and whether the
// proxy already is a native sidecar.
const sidecarFix = `{{if eq .Mesh "istio"}}let istio-proxy drain until the app has: terminationDrainDuration longer than the app's preStop and drain, or EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true with a MINIMUM_DRAIN_DURATION above the app's preStop (proxy.istio.io/config), or run it as a native sidecar (ENABLE_NATIVE_SIDECARS, Istio's default from 1.27 on Kubernetes 1.33+), which the kubelet stops after the app` +
	`{{else if eq .Mesh "linkerd"}}keep linkerd-proxy up until the app has drained: config.alpha.linkerd.io/proxy-wait-before-exit-seconds longer than the app's preStop and drain, or config.beta.linkerd.io/proxy-enable-native-sidecar: "true" (Kubernetes 1.29+), which the kubelet stops after the app` +
	`{{else if .NativeSidecar}}the proxy is a native sidecar, which the kubelet stops only after the app: it began its own shutdown at SIGTERM anyway; have it keep serving on SIGTERM until its connections end (a preStop on it longer than the app's preStop and drain)` +
	`{{else}}make the proxy a native sidecar (an initContainer with restartPolicy: Always, Kubernetes 1.29+ on the API server and the nodes), which the kubelet stops after the app; or have it keep serving on SIGTERM until the app has exited (a preStop on the proxy longer than the app's preStop and drain){{end}}`

// Rules is the cause table, in the order the rules are tried. The order
// matters where evidence overlaps: a connection cut when SIGKILL ended the
// process is the grace period's fault before it is the keep-alive pool's;
// a reset with unread data is a request cut in flight before it is an idle
// connection's race.
var Rules = []Rule{
	{
		Cause: CauseSIGKILL,
		Title: "SIGKILL",
		Requires: []Requirement{
			{"the connection was cut (EOF, reset or gateway error), not refused", ConnectionCut},
			{"the pod's process was killed by SIGKILL when the failure happened", KilledNear},
		},
		// A deletion with --grace-period=0 (Forced) gave no grace period
		// to raise: the fix is not to force-delete serving pods.
		Explain: `{{.Class}} on {{.Pod}} at SIGKILL{{if .FromKill}} {{.FromKill}}{{end}}` +
			`{{if .Forced}}; the pod was deleted with --grace-period=0 (forced): no grace period{{if .KillAfterDeletion}}, the kill came {{.KillAfterDeletion}} after deletion{{end}}` +
			`{{else if .KillAfterDeletion}}; the kill came {{.KillAfterDeletion}} after deletion{{if .Grace}} with a grace period of {{.Grace}}{{end}}{{end}}` +
			`{{if .Evicted}}; the kubelet evicted the pod for node pressure{{end}}`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} happened because {{.PodsPhrase}} {{plural .PodCount "was" "were"}} killed by SIGKILL` +
			`{{if and .Forced (not .Grace)}} after {{plural .PodCount "a deletion" "deletions"}} with --grace-period=0 (forced): no grace period was given{{if .KillAfterDeletion}}, the kill came {{.KillAfterDeletion}} after it{{end}}` +
			`{{else}}{{if .KillAfterDeletion}} {{.KillAfterDeletion}} after deletion{{if .Grace}}, when the grace period of {{.Grace}} ran out{{end}}{{end}}` +
			`{{if .Forced}}; {{.Forced}} of the pods {{plural .Forced "was" "were"}} deleted with --grace-period=0 (forced), with no grace period{{end}}{{end}}` +
			`{{if .Evicted}}; the kubelet evicted {{.Evicted}} of them for node pressure{{end}}`,
		Fix: evictionFix + `{{else if and .Forced (not .Grace)}}the forced deletion (--grace-period=0) overrode the grace period, so raising it changes nothing: do not force-delete serving pods; delete them normally, or drain the node with the Eviction API` +
			`{{else}}raise terminationGracePeriodSeconds above preStop + drain + a margin{{if .Grace}} (now {{.Grace}}){{end}}, or shorten preStop and the drain` +
			`{{if .Forced}}; and do not force-delete serving pods: --grace-period=0 overrode the grace period of {{.Forced}} of them{{end}}{{end}}`,
		Color: "#7B1E1E",
	},
	{
		Cause: CauseKilled,
		Title: "container killed without warning (OOM kill)",
		Requires: []Requirement{
			{"the connection was cut (EOF, reset or gateway error), not refused", ConnectionCut},
			{"the pod's process was killed by SIGKILL with no SIGTERM or deletion before it", KilledUnannounced},
		},
		Explain: `{{.Class}} on {{.Pod}} at SIGKILL{{if .FromKill}} {{.FromKill}}{{end}}: ` +
			`{{if .Evicted}}the kubelet evicted the pod for node pressure and killed it with no SIGTERM (a hard eviction threshold){{else}}the container was killed with no SIGTERM before it (the kernel's OOM killer){{end}}, cutting its connections`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} happened because {{.PodsPhrase}} {{plural .PodCount "was" "were"}} killed with no SIGTERM before ` +
			`{{if .Evicted}}({{.Evicted}} by the kubelet's hard eviction for node pressure){{else}}(the kernel's OOM killer){{end}}: nothing drains a container killed so`,
		Fix:   evictionFix + `{{else}}raise the container's memory limit or find what outgrows it; the kubelet's report names OOMKilled{{end}}`,
		Color: "#56B4E9",
	},
	{
		Cause: CauseSidecarExit,
		Title: "proxy sidecar exited before its app",
		Requires: []Requirement{
			{"the connection was cut (EOF, reset or gateway error) or refused", AnyOf(ConnectionCut, Refused)},
			{"a container of the pod other than the app, holding the client's connection (a proxy on the data path), exited while the app still ran", ProxyExitedFirst},
		},
		Explain: `{{.Class}} on {{.Pod}}: the client's connection went through the container {{.Proxy}}, which exited{{if .ProxyExitAfterSigterm}} {{.ProxyExitAfterSigterm}} after its SIGTERM{{end}}{{if .AppExitAfterProxy}} while the app ran {{.AppExitAfterProxy}} longer{{else}} while the app still ran{{end}}`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} happened because the proxy beside the app ({{.Proxies}}) exited{{if .ProxyExitAfterSigterm}} {{.ProxyExitAfterSigterm}} after SIGTERM{{end}}{{if .AppExitAfterProxy}}, {{.AppExitAfterProxy}} before the app did{{else}} before the app{{end}} ({{.PodsPhrase}}): whatever the app does to drain, the connections went through the proxy`,
		Fix:     sidecarFix,
		Color:   "#8C510A",
	},
	{
		Cause: CauseInFlight,
		Title: "in-flight request cut",
		Requires: []Requirement{
			{"the connection was cut (EOF, reset or gateway error), not refused", ConnectionCut},
			{"a request was in progress when the connection closed: a reset with unread data, or a request that started before the exit", AnyOf(UnreadDataReset, InProgressAtExit)},
		},
		Explain: `{{.Class}} on {{.Pod}}: a request{{if .Duration}} of {{.Duration}}{{end}} was in progress when the connection was cut{{if .FromExit}} (exit {{.FromExit}}{{if .ExitAfterSigterm}}, which came {{.ExitAfterSigterm}} after SIGTERM{{end}}){{end}}`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} were requests still in progress when {{.PodsPhrase}} {{if .ExitAfterSigterm}}exited {{.ExitAfterSigterm}} after SIGTERM{{else}}closed their connections{{end}}: the shutdown ended before the requests did`,
		Fix:     "make the shutdown timeout longer than the longest request (and the grace period longer than preStop plus that timeout)",
		Color:   "#CC79A7",
	},
	{
		Cause: CauseKeepAliveAtExit,
		Title: "keep-alive connection cut at exit",
		Requires: []Requirement{
			{"the connection was cut (EOF, reset or gateway error), not refused", ConnectionCut},
			{"the server closed the client's connection at its exit, or the failure came as the process exited", AnyOf(ClosedAtExit, ExitNear)},
		},
		Explain: `{{.Class}} on {{.Pod}}{{if .FromExit}} at exit {{.FromExit}}{{if .ExitAfterSigterm}} (the exit came {{.ExitAfterSigterm}} after SIGTERM){{end}}{{end}}: the client used a keep-alive connection the exit closed`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} happened because the process exited{{if .ExitAfterSigterm}} {{.ExitAfterSigterm}} after SIGTERM{{end}}{{if .ConnsAtExit}} with {{.ConnsAtExit}} keep-alive {{plural .ConnsAtExit "connection" "connections"}} still open{{end}} ({{.PodsPhrase}}){{if .OffsetFromExit}}; the failures came {{.OffsetFromExit}} the exit (median){{end}}`,
		Fix:     "while draining, answer with `Connection: close` (HTTP/1.1) or send GOAWAY (HTTP/2), and exit only after the connection pool has drained; closing the listener and preStop do nothing for established connections",
		Color:   "#D55E00",
	},
	proxyLagRule, // ingress.go
	{
		Cause: CauseDied,
		Title: "container died while in rotation (OOM kill or crash)",
		Requires: []Requirement{
			{"the connection was refused, or made after the pod's process had exited and never answered", AnyOf(Refused, Unanswered)},
			{"the pod's app had died with no SIGTERM or deletion before, and its endpoint was still in rotation", DiedInRotation},
		},
		Explain: `{{.Class}} on a new connection to {{.Pod}}: {{.Terminating}} with no SIGTERM or deletion before (an OOM kill or a crash), while {{.Rotation}}`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} were new connections sent to {{.PodsPhrase}} after {{plural .PodCount "its container" "their containers"}} died with no SIGTERM or deletion (an OOM kill or a crash), while the endpoint stayed in rotation until the readiness probe failed{{if .RotationLag}} (up to {{.RotationLag}}){{end}}`,
		Fix:     diedFix,
		Color:   "#009E73",
	},
	{
		Cause: CausePreStopFailed,
		Title: "preStop hook failed",
		Requires: []Requirement{
			{"the connection was refused, or made after the pod's process had exited and never answered", AnyOf(Refused, Unanswered)},
			{"the pod was terminating: deleted, signalled, listener closed or exited", PodTerminating},
			{"the pod's endpoint was still in rotation on some node", InRotation},
			{"the kubelet reported the app's preStop hook failed (FailedPreStopHook)", PreStopHookFailed},
		},
		Explain: `{{.Class}} on a new connection to {{.Pod}}: the kubelet reported its preStop hook failed, so the delay it was to give never ran: {{.Terminating}}, while {{.Rotation}}`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} were new connections sent to {{.PodsPhrase}} after {{plural .PodCount "its" "their"}} preStop hook failed (the kubelet's FailedPreStopHook){{if .SigtermAfterRotation}}: SIGTERM came {{.SigtermAfterRotation}} the endpoint left rotation on the last node{{end}}{{if .RotationLag}}, while it was still in rotation for up to {{.RotationLag}}{{end}}`,
		Fix:     `make the preStop hook run: an exec of a command the image lacks (sleep in a distroless image) fails and SIGTERM comes at once; with Kubernetes 1.30+ on the API server and every node use the sleep action (lifecycle.preStop.sleep), which the kubelet runs itself, with nothing needed in the image; before 1.30 put the command in the image; the wait must exceed the observed propagation{{if .Propagation}} ({{.Propagation}} from deletion to the last node){{end}}`,
		Color:   "#5E3C99",
	},
	{
		Cause: CauseEndpointRace,
		Title: "endpoint removal race",
		Requires: []Requirement{
			{"the connection was refused, or made after the pod's process had exited and never answered", AnyOf(Refused, Unanswered)},
			{"the pod was terminating: deleted, signalled, listener closed or exited", PodTerminating},
			{"the pod's endpoint was still in rotation on some node", InRotation},
		},
		Explain: `{{.Class}} on a new connection to {{.Pod}}: {{.Terminating}}, while {{.Rotation}}`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} were new connections sent to {{.PodsPhrase}} after {{plural .PodCount "it" "they"}} stopped accepting (refused, or never answered once the process had exited){{if .RotationLag}} while the endpoint was still in rotation for up to {{.RotationLag}}{{end}}{{if .SigtermAfterRotation}}; SIGTERM came {{.SigtermAfterRotation}} the endpoint left rotation on the last node{{end}}`,
		Fix:     `make the preStop delay longer than the observed propagation{{if .Propagation}} ({{.Propagation}} from deletion to the last node){{end}}{{if .DataplaneLag}} and than the measured lag from the endpoint change to each node's proxy rules ({{.DataplaneLag}}): the sleep must exceed that p99{{end}}, and keep the listener open until the endpoint is removed everywhere`,
		Color:   "#E69F00",
	},
	{
		Cause: CauseEndpointRaceLikely,
		Title: "endpoint removal race (likely)",
		Requires: []Requirement{
			{"a new connection was refused or never answered, and no record names the pod it reached", NotTakenNoPod},
			{"a pod of the Service had exited while some node's proxy still sent new connections to it", DeadPodInRotation},
		},
		Likely:  true,
		Explain: `{{.Class}} on a new connection to the Service while {{.Candidates}} had exited and {{plural .CandidateCount "its endpoint was" "their endpoints were"}} still in rotation: likely sent to {{plural .CandidateCount "it" "one of them"}} (no record names the pod)`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} were new connections the proxies likely still sent to pods that had exited (no record names the pod; the candidates are listed){{if .RotationLag}}, in rotation for up to {{.RotationLag}}{{end}}`,
		Fix:     `make the preStop delay longer than the observed propagation{{if .Propagation}} ({{.Propagation}} from deletion to the last node){{end}}{{if .DataplaneLag}} and than the measured lag from the endpoint change to each node's proxy rules ({{.DataplaneLag}}){{end}}, so that no proxy sends to a pod after its process exits`,
		Color:   "#F0E442",
	},
	{
		Cause: CauseDiedLikely,
		Title: "container died while in rotation (likely)",
		Requires: []Requirement{
			{"a new connection was refused or never answered, and no record names the pod it reached", NotTakenNoPod},
			{"a pod of the Service had died with no SIGTERM or deletion while some node's proxy still sent new connections to it", DiedCandidateInRotation},
		},
		Likely:  true,
		Explain: `{{.Class}} on a new connection to the Service while the container of {{.Candidates}} had died with no SIGTERM or deletion (an OOM kill or a crash) and {{plural .CandidateCount "its endpoint was" "their endpoints were"}} still in rotation: likely sent to {{plural .CandidateCount "it" "one of them"}} (no record names the pod)`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} were new connections the proxies likely still sent to pods whose containers had died (an OOM kill or a crash; no record names the pod, the candidates are listed){{if .RotationLag}}, in rotation for up to {{.RotationLag}}{{end}}`,
		Fix:     diedFix,
		Color:   "#7FCEB9",
	},
	{
		Cause: CauseNoReadyEndpoints,
		Title: "no ready endpoints",
		Requires: []Requirement{
			{"no endpoint could take the connection: refused, a timeout, or a proxy's 502/503 with no upstream answering", NotTaken},
			{"no ready pod served the failed request", NoReadyPodServed},
			{"the Service had no ready endpoint on any node that watched it", NoReadyEndpoints},
		},
		Explain: `{{.Class}}{{if .Service}}: {{.Service}} had no ready endpoint{{else}}: the Service had no ready endpoint{{end}}`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} happened while the Service had no ready endpoint`,
		Fix:     "keep ready endpoints through the rollout: readiness probes that pass only when serving, maxUnavailable 0 with maxSurge ≥ 1",
		Color:   "#0072B2",
	},
	{
		Cause:   CauseUnexplained,
		Title:   "unexplained",
		Explain: `{{.Class}}{{if .Pod}} on {{.Pod}}{{end}}{{if .FromSigterm}} at SIGTERM {{.FromSigterm}}{{end}}: {{if .Unjudged}}{{.Unjudged}}{{else}}no rule's evidence is complete{{end}}{{if .Nearest}}; nearest events: {{.Nearest}}{{end}}`,
		Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} match no rule; each lists its nearest events and what evidence was missing`,
		Color:   "#7F7F7F",
	},
}

// Facts is what a Finder sees about one failure. Kernel holds the pod-side
// events on the client's connection (same client address and port) in the
// kernel window, oldest first.
type Facts struct {
	Failure *event.Event
	// Start is when the failed request began: the failure's time less its
	// duration. A connection is routed when it is made, so rotation and
	// termination are judged at Start.
	Start    int64
	Inferred bool
	Proof    string // inferred failures: the kernel evidence that proved it
	Class    string
	Client   netip.AddrPort
	Via      string
	Kernel   []*event.Event

	opts *Options
	a    *Aligner
	pod  *podState
	svcs []string
}

func piece(role string, e *event.Event) Piece { return Piece{Role: role, Event: e} }

// AnyOf holds when any of fs does, with the evidence of all that do.
func AnyOf(fs ...Finder) Finder {
	return func(f *Facts, dst []Piece) []Piece {
		for _, x := range fs {
			dst = x(f, dst)
		}
		return dst
	}
}

// ConnectionCut holds when the client saw its connection end under a
// request: EOF, a reset, or a proxy's 502/504 for its upstream when the
// pod side recorded the cut. A proxy's gateway error by itself says only
// that its upstream failed, not how: a connect the pod refused is a 502
// too (nginx's access log without its error log). Where the proxy gave
// its own account (HAProxy's termination state, nginx's error log, envoy's
// response flags) the importer made it the failure's class — eof or reset
// for a cut, refused for a refused connect — and that decides; a bare
// 502/504 is a cut only with a server-side close or reset of its
// connection in the pod's kernel record.
func ConnectionCut(f *Facts, dst []Piece) []Piece {
	switch {
	case f.Class == event.FailEOF || f.Class == event.FailReset:
	case f.Class == event.FailStatus && (f.Failure.Code == 502 || f.Failure.Code == 504):
		if !serverCut(f) {
			return dst
		}
	default:
		return dst
	}
	var role string
	switch {
	case f.Inferred && f.Proof == ProofInUseAtExit:
		role = "pod side: a connection in use closed by the exit"
	case f.Inferred:
		role = "pod side proved a reset"
	case f.Class == event.FailEOF:
		role = "client saw eof"
	case f.Class == event.FailReset:
		role = "client saw reset"
	default:
		role = "client saw status"
	}
	return append(dst, piece(role, f.Failure))
}

// serverCut reports whether the pod's kernel closed (not after the
// peer's close) or reset the failure's connection.
func serverCut(f *Facts) bool {
	for _, k := range f.Kernel {
		if k.Kind == event.RSTSent || k.Kind == event.ConnClosed && k.Reason != "peer" {
			return true
		}
	}
	return false
}

// Refused holds when the client saw a refusal or the pod's kernel answered
// the client's SYN with a reset.
func Refused(f *Facts, dst []Piece) []Piece {
	out := dst
	if f.Class == event.FailRefused && !f.Inferred {
		out = append(out, piece("client saw refused", f.Failure))
	}
	for _, k := range f.Kernel {
		if k.Kind == event.ConnRefused && k.Time >= f.Failure.Time-int64(f.opts.ExitAfter) {
			out = append(out, piece("pod refused the client's SYN", k))
		}
	}
	return out
}

// Unanswered holds when the client timed out on a connection it began
// after the pod's main process had exited: kube-proxy still sent it to a
// pod whose network was going or gone, and no one answered the SYN.
func Unanswered(f *Facts, dst []Piece) []Piece {
	if f.pod == nil || f.Inferred || f.Class != event.FailTimeout {
		return dst
	}
	x := f.pod.mainExit(f.Start)
	if x == nil || x.Time > f.Start {
		return dst
	}
	return append(dst, piece("client's connection never answered", f.Failure), piece("process had exited", x))
}

// PodTerminating holds when the pod was being deleted or its process was
// stopping when the request began.
func PodTerminating(f *Facts, dst []Piece) []Piece {
	p := f.pod
	if p == nil {
		return dst
	}
	t := f.Start
	e := p.terminatingAt(t)
	if e == nil {
		return dst
	}
	out := append(dst, piece("pod was terminating", e))
	if p.lifeEvents().listener.Time != 0 && p.lifeEvents().listener.Time <= t && e != p.lifeEvents().listener {
		out = append(out, piece("listener closed", p.lifeEvents().listener))
	}
	if x := p.lastMainExit(); x != nil && x.Time <= t {
		out = append(out, piece("process exited", x))
	}
	return out
}

// PreStopHookFailed holds when the kubelet reported, in this life of the
// pod, that its app's preStop hook failed.
func PreStopHookFailed(f *Facts, dst []Piece) []Piece {
	if f.pod == nil {
		return dst
	}
	c := f.pod.appContainer()
	if c == nil || c.hookFailed == nil || c.hookFailed.Time < f.pod.since {
		return dst
	}
	return append(dst, piece("the kubelet reported the preStop hook failed", c.hookFailed))
}

// InRotation holds when some node still routed to the pod's endpoint when
// the request began, or the last node took it out less than
// Options.ProxyLag before.
func InRotation(f *Facts, dst []Piece) []Piece {
	if f.pod == nil {
		return dst
	}
	t := f.Start
	r := f.pod.rotationAt(t, f.svcs)
	switch {
	case !r.seen:
		return dst
	case r.in && r.leftAfter != nil:
		return append(dst, piece("endpoint left rotation on the last node after the failure", r.leftAfter.ev))
	case r.in:
		if e := f.pod.lastReady(t, f.svcs); e != nil {
			return append(dst, piece("endpoint still ready", e))
		}
		return dst
	case r.lastLeave != nil && t-r.lastLeave.t <= r.lag:
		if r.lastLeave.ev.Kind.IsDataplane() {
			return append(dst, piece("the node's proxy stopped sending to the endpoint just before the failure", r.lastLeave.ev))
		}
		return append(dst, piece("endpoint left rotation within the proxy lag before the failure", r.lastLeave.ev))
	}
	return dst
}

// lastReady is the latest transition to ready at or before t.
func (p *podState) lastReady(t int64, svcs []string) *event.Event {
	var best *event.Event
	for _, v := range p.ep {
		if len(svcs) > 0 && !containsService(svcs, v.svc) {
			continue
		}
		s := v.trans
		for i := range s {
			if s[i].ready && s[i].t <= t && (best == nil || s[i].t > best.Time) {
				best = s[i].ev
			}
		}
	}
	return best
}

// exitNear is the main process's exit when the failure lies within
// [exit-ExitBefore, exit+ExitAfter].
func (f *Facts) exitNear() *event.Event {
	if f.pod == nil {
		return nil
	}
	t := f.Failure.Time
	x := f.pod.mainExit(t)
	if x == nil || t < x.Time-int64(f.opts.ExitBefore) || t > x.Time+int64(f.opts.ExitAfter) {
		return nil
	}
	return x
}

// ExitNear holds when the failure came as the pod's main process exited.
func ExitNear(f *Facts, dst []Piece) []Piece {
	x := f.exitNear()
	if x == nil {
		return dst
	}
	out := append(dst, piece("process exited", x))
	if f.pod.lifeEvents().sigterm.Time != 0 && f.pod.lifeEvents().sigterm.Time <= x.Time {
		out = append(out, piece("SIGTERM", f.pod.lifeEvents().sigterm))
	}
	return out
}

// ClosedAtExit holds when the pod's kernel closed the client's connection
// in the exit path (or the process closed it just before exiting).
func ClosedAtExit(f *Facts, dst []Piece) []Piece {
	t := f.Failure.Time
	out := dst
	for i, k := range f.Kernel {
		if k.Kind != event.ConnClosed || k.Reason == "peer" || k.Time > t+int64(f.opts.ExitBefore) {
			continue
		}
		if f.pod != nil && f.pod.otherContainer(f.pod.container(k, false)) {
			continue // closed by another container's exit: not the app's (ProxyExitedFirst)
		}
		// The exit path closes sockets just after the exit event; a runtime
		// tearing down closes them just before it (within ExitSlack).
		var x *event.Event
		if f.pod != nil {
			if x = f.pod.mainExit(k.Time); x != nil && abs(x.Time-k.Time) > int64(f.opts.ExitSlack) {
				x = nil
			}
		}
		if !k.Flags.Has(event.FlagAtExit) && (x == nil || k.Time > x.Time) {
			continue
		}
		out = append(out, piece("server closed the connection at exit", k))
		for _, r := range f.Kernel[i+1:] {
			if r.Kind == event.RSTSent && r.Local == k.Local {
				out = append(out, piece("reset answering the client's data on the closed connection", r))
				break
			}
		}
		if x != nil {
			out = append(out, piece("process exited", x))
		}
	}
	return out
}

// ProxyExitedFirst holds when a container of the pod other than the app
// held the client's connection (a proxy on the data path: the pod-side
// record of the connection is its socket; for a refusal, which no process
// holds, the pod's container that held its inbound connections) and that
// container exited at or before the failure, while the app still ran.
func ProxyExitedFirst(f *Facts, dst []Piece) []Piece {
	p := f.pod
	if p == nil || p.app == nil {
		return dst
	}
	t := f.Failure.Time
	var c *ctrLife
	var held *event.Event
	for _, k := range f.Kernel {
		if kc := p.container(k, false); kc != nil && kc != p.app {
			c, held = kc, k
		}
	}
	if c == nil && f.Class == event.FailRefused {
		c = p.inboundProxy()
	}
	if c == nil || c.exit == nil || c.exit.Time > t+int64(f.opts.ExitBefore) {
		return dst
	}
	app := p.lastMainExit()
	if app != nil && app.Time <= c.exit.Time+int64(f.opts.ExitSlack) {
		return dst // the app ended with it or before: the app's own end
	}
	out := append(dst, piece(roleProxyExit, c.exit))
	if held != nil {
		out = append(out, piece("the proxy container held the client's connection", held))
	}
	if app != nil {
		out = append(out, piece(roleAppExitLater, app))
	}
	return out
}

// UnreadDataReset holds when the pod reset the client's connection while
// received data was unread: a request it had not finished reading.
func UnreadDataReset(f *Facts, dst []Piece) []Piece {
	out := dst
	for _, k := range f.Kernel {
		if k.Kind == event.RSTSent && k.Time <= f.Failure.Time+int64(f.opts.ExitBefore) &&
			(k.Flags.Has(event.FlagUnreadData) || normReason(k.Reason) == "TCP_ABORT_ON_CLOSE") {
			out = append(out, piece("reset with unread data", k))
		}
	}
	return out
}

// InProgressAtExit holds when the client's request started at least
// Options.InFlightMin before the exit it failed at.
func InProgressAtExit(f *Facts, dst []Piece) []Piece {
	d := f.Failure.Duration
	x := f.exitNear()
	// It must have started well before the exit and ended no earlier than
	// the teardown that precedes the exit event.
	if d <= 0 || x == nil || f.Failure.Time-d > x.Time-int64(f.opts.InFlightMin) ||
		f.Failure.Time < x.Time-int64(f.opts.ExitSlack) {
		return dst
	}
	return append(dst, piece("request started before the exit", f.Failure), piece("process exited", x))
}

// KilledNear holds when the failure came as SIGKILL ended the pod's
// process after a SIGTERM or deletion: the grace period ran out.
func KilledNear(f *Facts, dst []Piece) []Piece {
	p := f.pod
	if p == nil || (p.lifeEvents().sigterm.Time == 0 && p.lifeEvents().deletion.Time == 0) {
		return dst
	}
	return killedNear(f, dst)
}

// KilledUnannounced holds when the failure came as SIGKILL ended the
// pod's process with no SIGTERM or deletion before it (an OOM kill).
func KilledUnannounced(f *Facts, dst []Piece) []Piece {
	p := f.pod
	if p == nil || p.lifeEvents().sigterm.Time != 0 || p.lifeEvents().deletion.Time != 0 {
		return dst
	}
	return killedNear(f, dst)
}

func killedNear(f *Facts, dst []Piece) []Piece {
	p := f.pod
	t := f.Failure.Time
	near := func(x int64) bool {
		return x != 0 && t >= x-int64(f.opts.ExitBefore) && t <= x+int64(f.opts.ExitAfter)
	}
	out := dst
	if near(p.lifeEvents().kill.Time) {
		out = append(out, piece("SIGKILL", p.lifeEvents().kill))
	}
	for _, x := range p.exits {
		if x.Signal == event.SIGKILL && near(x.Time) && !p.sandboxEvent(x) {
			out = append(out, piece("process killed", x))
		}
	}
	if len(out) == len(dst) && p.lifeEvents().kill.Time != 0 {
		// A connection closed at exit, long before the client noticed:
		// killed if the exit that closed it was SIGKILL's.
		for _, c := range ClosedAtExit(f, nil) {
			if c.Event.Kind == event.ConnClosed &&
				abs(c.Event.Time-p.lifeEvents().kill.Time) <= int64(f.opts.ExitSlack) {
				out = append(out, piece("SIGKILL", p.lifeEvents().kill), c)
				break
			}
		}
	}
	if len(out) > len(dst) && p.lifeEvents().deletion.Time != 0 {
		out = append(out, piece("deletion (the grace period starts here)", p.lifeEvents().deletion))
	}
	return out
}

// NotTaken holds when the failure is one that no endpoint taking the
// connection explains: refused, a timeout, or a proxy's 502/503 that no
// pod is known to have answered ("no healthy upstream", "no live
// upstreams"). An application's answer (500, 404, 429, or a 503 a pod
// sent) is not: a server took the request.
func NotTaken(f *Facts, dst []Piece) []Piece {
	switch {
	case f.Class == event.FailRefused:
		return append(dst, piece("connection refused", f.Failure))
	case f.Class == event.FailTimeout:
		return append(dst, piece("connection timed out", f.Failure))
	case f.Class == event.FailStatus && (f.Failure.Code == 502 || f.Failure.Code == 503) && f.pod == nil:
		return append(dst, piece("a proxy answered with no upstream", f.Failure))
	}
	return dst
}

// NotTakenNoPod is NotTaken for a refusal or timeout that no record (the
// client's, a proxy's or the pod side's) ties to a pod.
func NotTakenNoPod(f *Facts, dst []Piece) []Piece {
	if f.pod != nil || f.Inferred || (f.Class != event.FailRefused && f.Class != event.FailTimeout) {
		return dst
	}
	return NotTaken(f, dst)
}

// DeadPodInRotation holds when, as the request began, a pod of the
// failure's Service had exited (its main process, or a kill) while its
// endpoint was still in rotation on some node, or had left it within that
// node's lag: a proxy could send the new connection there and nothing
// answered it. Each such pod is a candidate; with none, or without the
// Service, it does not hold.
func DeadPodInRotation(f *Facts, dst []Piece) []Piece { return deadCandidates(f, dst, false) }

// deadCandidates appends, as candidates, the Service's pods whose app had
// ended at the request's start while some node could still route to them:
// those nothing ended (died: an OOM kill, a crash) or those a shutdown
// ended (!died), each rule naming its own fix.
func deadCandidates(f *Facts, dst []Piece, died bool) []Piece {
	if len(f.svcs) == 0 {
		return dst
	}
	t := f.Start
	out := dst
	for _, p := range f.a.servicePods(f.svcs, t) {
		life := p.at(t)
		x := life.diedAt(t)
		if died != (x != nil) {
			continue
		}
		if x == nil {
			if x = life.lastMainExit(); x == nil || x.Time > t {
				if life.lifeEvents().kill.Time == 0 || life.lifeEvents().kill.Time > t {
					continue
				}
				x = life.lifeEvents().kill
			}
		}
		if p.routedAt(t, f.svcs) {
			out = append(out, piece(candidateRole, x))
		}
	}
	return out
}

// DiedInRotation holds when the pod's app died (its main process exited
// or was killed) with no SIGTERM and no deletion before, and its endpoint
// was still in rotation on some node when the request began.
func DiedInRotation(f *Facts, dst []Piece) []Piece {
	if f.pod == nil {
		return dst
	}
	x := f.pod.diedAt(f.Start)
	if x == nil {
		return dst
	}
	rot := InRotation(f, nil)
	if len(rot) == 0 {
		return dst
	}
	return append(append(dst, piece("app died with no SIGTERM or deletion before", x)), rot...)
}

// DiedCandidateInRotation is DeadPodInRotation for the pods whose app
// died with no SIGTERM and no deletion before.
func DiedCandidateInRotation(f *Facts, dst []Piece) []Piece { return deadCandidates(f, dst, true) }

// routedAt reports whether some node's proxy could still send new
// connections of svcs to the pod at t: its endpoint in rotation, or out
// for less than the proxy lag.
func (p *podState) routedAt(t int64, svcs []string) bool {
	r := p.rotationAt(t, svcs)
	return r.seen && (r.in || (r.lastLeave != nil && t-r.lastLeave.t <= r.lag))
}

// diedFix is the fix for a container that died in rotation, known or
// likely.
const diedFix = "find why the container died: the pod's lastState names OOMKilled or the exit code. No preStop or drain runs for a container that dies; until its readiness probe fails the endpoint stays in rotation, so a shorter periodSeconds × failureThreshold shortens these refusals"

// candidateRole marks the evidence of a candidate pod (Rule.Likely).
const candidateRole = "candidate: exited while still in rotation"

// NoReadyPodServed holds when neither the client nor any pod's kernel tied
// the failure to a pod (what a proxy rejecting for want of endpoints looks
// like), or tied it only to a pod that had not yet been ready and was not
// ending: a connection that reached a pod before its first readiness (a
// stale connection-tracking entry for a reused address) failed for want
// of a ready endpoint too.
func NoReadyPodServed(f *Facts, dst []Piece) []Piece {
	if p := f.pod; p != nil {
		if p.ready != 0 && p.ready <= f.Start || p.lifeEvents().deletion.Time != 0 {
			return dst
		}
		return append(dst, piece("only a pod not ready yet answered it", f.Failure))
	}
	return append(dst, piece("no pod served it", f.Failure))
}

// NoReadyEndpoints holds when every node watching the failure's Service
// saw it without a ready endpoint when the request began.
func NoReadyEndpoints(f *Facts, dst []Piece) []Piece {
	if len(f.svcs) == 0 {
		return dst
	}
	out := dst
	for _, k := range f.svcs {
		s := f.a.svcs[k]
		if s == nil {
			return dst
		}
		ok, why := s.noReadyAt(f.Start, int64(f.opts.Lookahead)) // when the request was routed
		var first *event.Event
		if !ok && f.opts.ProxyLag > 0 {
			// The first ready endpoint came within the proxy lag: the
			// proxies may not have had it yet, and still rejected.
			lagged := f.Start - int64(f.opts.ProxyLag)
			if ok, why = s.noReadyAt(lagged, 0); ok {
				if first = s.firstReadyIn(lagged, f.Start); first == nil {
					ok = false
				}
			}
		}
		if !ok {
			return dst
		}
		// What the Service had instead, when the request was routed.
		had := " (endpoints then: " + s.endpointsAt(f.Start) + ")"
		for _, e := range why {
			role := "last ready endpoint left" + had
			if e.Kind == event.ServiceChanged {
				role = "Service created, no endpoint since" + had
			}
			out = append(out, piece(role, e))
		}
		if first != nil {
			out = append(out, piece("first ready endpoint, within the proxy lag", first))
		}
	}
	return out
}
