package event

import "fmt"

// Kind names what an event records. The string is what the stores keep.
//
// Fields each kind uses, beyond Time, Node, Source, Pod and Workload:
//
//	kind                   fields
//	pod_created            Attrs[creation_timestamp]
//	pod_deletion           Duration (grace period), Attrs[deletion_timestamp, disruption]
//	pod_finished           Reason (status.reason: Evicted, Shutdown, Terminated, NodeAffinity …; else the phase),
//	                       Attrs[phase, message, disruption]: the pod's phase turned Failed or Succeeded with no deletion
//	                       requested: a kubelet's node-pressure eviction, a node's shutdown, a pod run to completion
//	proxy_state            Pod (namespace, name; Container: the proxy's), Reason (draining, connections, terminating,
//	                       exited), Attrs[connections]: a mesh proxy's own account of its shutdown, from its log
//	pod_ready              Local (pod IP, port 0)
//	pod_not_ready          Local
//	container_started      Pod.Container, Attrs[container_id, started_at, restart_count, role, ports, prestop, prestop_sleep,
//	                       grace_period]: the kubelet's status shows a new container instance running (a start or a
//	                       restart), an init container's too, with what its spec gives it to stop; Flags(Observed) at a
//	                       list or re-observation
//	kubelet_event          Pod (Container from the Event's fieldPath), Reason (FailedPreStopHook, FailedKillPod),
//	                       Attrs[message, count, last_timestamp]: the kubelet's own account of stopping a container, from
//	                       its Events; recorded by the agent of the pod's node, Flags(Observed) when found at the list
//	node_info              Node, Reason (observed), Attrs[apiserver_version, kubelet_version, kube_proxy_version,
//	                       container_runtime]: the versions the node runs, from its Node and the API server's /version;
//	                       recorded by the node's agent when it starts and every 10 minutes
//	container_terminated   Code (exit code), Signal, Reason (Completed, Error, OOMKilled …),
//	                       Attrs[container_id, started_at, finished_at, restart_count, message, role]
//	endpoint_added         Local (endpoint address), Service, Slice, Attrs[conditions, last_change_trigger_time]
//	endpoint_ready         as endpoint_added
//	endpoint_not_ready     as endpoint_added
//	endpoint_serving       as endpoint_added
//	endpoint_not_serving   as endpoint_added
//	endpoint_terminating   as endpoint_added
//	endpoint_removed       as endpoint_added
//	signal                 PID/Comm (target), PeerPID/PeerComm (sender), Signal, Flags(Main: the target)
//	process_exit           PID/Comm, Code (exit code) or Signal (terminating signal), Flags(Main)
//	listener_closed        PID/Comm, Local, NetNS, Flags(AtExit, Main)
//	conn_closed            PID/Comm, Local, Remote, NetNS, Reason (initiator: local, peer), Flags(AtExit),
//	                       Duration (idle: time since the peer last acknowledged data from this side; 0 when unknown)
//	rst_sent               PID/Comm, Local, Remote, NetNS, Reason (kernel reset reason), Flags(AtExit, UnreadData)
//	rst_received           PID/Comm, Local, Remote, NetNS
//	conn_refused           Local (closed port), Remote (client), NetNS: a SYN answered by a no-socket RST
//	client_failure         Local (client), Remote (target dialled), Service, Code (HTTP status),
//	                       Duration, Reason (error class), Attrs[backend], Flags(Inferred)
//	kernel_capabilities    Node; Reason (the kernel evidence the node cannot see, comma-separated, "" for none),
//	                       Attrs[kernel_release, kernel_features, proxy_mode, proxy_recorded, proxy_evidence]: recorded by an
//	                       agent when its capture starts, every 10 minutes and when the node's proxy mode changes
//	service_changed        Service, Pod.Namespace only; Reason (created, updated, deleted, observed),
//	                       Attrs[cluster_ips, service_ports, service_type]: what a client dialling the Service reached
//	workload_changed       Workload, Pod.Namespace only; Reason (template, scale, created, deleted, paused, resumed,
//	                       complete), Attrs[generation, replicas_from, replicas_to, workload_uid, rollback,
//	                       rollout_since]: what set pods ending or starting, what held or released a rollout, and
//	                       when one was done
//	dataplane_endpoint_added    Node (whose proxy), Local (endpoint address and port), Service (ns/name), Pod.Namespace,
//	                            Attrs[proxy, service_port, protocol, chain], Flags(Relist): the node's proxy began sending
//	                            the Service's new connections to the endpoint (the proxy's rules, as committed)
//	dataplane_endpoint_removed  as dataplane_endpoint_added: the node's proxy stopped sending them there
//	recorder_coverage      Node, Source agent, Duration (the span covered: Time−Duration to Time), Reason (started,
//	                       running, resumed, stopped), Attrs[session, interval, kernel, slices, dataplane, dropped,
//	                       kernel_lost]: the node's agent ran over the span, ready, with what it captured and what it
//	                       lost; written every --coverage-interval, so that a time no such span covers is a gap in the
//	                       node's record (analysis.Coverage)
//
// Flags(Observed): the watcher records the state it finds at its initial
// list, at a relist and every --observe-interval (10 minutes by default), as
// one event per entity flagged FlagObserved, of the kind naming that state:
// every endpoint (endpoint_ready, endpoint_terminating or
// endpoint_not_ready), every pod (pod_ready or pod_not_ready, pod_finished
// when it has ended without a deletion, and pod_deletion when it is being
// deleted), every running container
// (container_started) and every Service (service_changed, Reason observed).
// Such an event says "was so at Time", not "became so at Time".
//
// Kernel events carry Attrs[container_id] when the task's cgroup path names
// a container, and Flags(Main) when the task is its container's main
// process (see FlagMain).
type Kind string

const (
	PodCreated          Kind = "pod_created"
	PodDeletion         Kind = "pod_deletion"
	PodReady            Kind = "pod_ready"
	PodNotReady         Kind = "pod_not_ready"
	ContainerTerminated Kind = "container_terminated"
	ContainerStarted    Kind = "container_started"
	PodFinished         Kind = "pod_finished"

	EndpointAdded       Kind = "endpoint_added"
	EndpointReady       Kind = "endpoint_ready"
	EndpointNotReady    Kind = "endpoint_not_ready"
	EndpointServing     Kind = "endpoint_serving"
	EndpointNotServing  Kind = "endpoint_not_serving"
	EndpointTerminating Kind = "endpoint_terminating"
	EndpointRemoved     Kind = "endpoint_removed"

	Signal         Kind = "signal"
	ProcessExit    Kind = "process_exit"
	ListenerClosed Kind = "listener_closed"
	ConnClosed     Kind = "conn_closed"
	RSTSent        Kind = "rst_sent"
	RSTReceived    Kind = "rst_received"
	ConnRefused    Kind = "conn_refused"

	ClientFailure Kind = "client_failure"

	WorkloadChanged Kind = "workload_changed"
	ServiceChanged  Kind = "service_changed"

	KernelCapabilities Kind = "kernel_capabilities"

	DataplaneEndpointAdded   Kind = "dataplane_endpoint_added"
	DataplaneEndpointRemoved Kind = "dataplane_endpoint_removed"

	// ProxyState is a mesh proxy's own account of its shutdown, from its
	// log (istio-agent's, linkerd-proxy's), imported with the pod named.
	ProxyState Kind = "proxy_state"

	// KubeletEvent is a kubelet's Event about stopping a pod's container:
	// a preStop hook that failed (so SIGTERM came at once), a kill that
	// failed.
	KubeletEvent Kind = "kubelet_event"
	// NodeInfo is the versions a node and its API server run.
	NodeInfo Kind = "node_info"
	// RecorderCoverage is a node's agent's account of a span it recorded
	// over: what was captured and what was lost. The spans' complement is
	// where the node's record has gaps.
	RecorderCoverage Kind = "recorder_coverage"
)

// Kinds lists every kind, each new one at the end.
var Kinds = []Kind{
	PodCreated, PodDeletion, PodReady, PodNotReady, ContainerTerminated, ContainerStarted,
	EndpointAdded, EndpointReady, EndpointNotReady, EndpointServing, EndpointNotServing,
	EndpointTerminating, EndpointRemoved,
	Signal, ProcessExit, ListenerClosed, ConnClosed, RSTSent, RSTReceived, ConnRefused,
	ClientFailure, WorkloadChanged, ServiceChanged, KernelCapabilities,
	DataplaneEndpointAdded, DataplaneEndpointRemoved,
	PodFinished, ProxyState, KubeletEvent, NodeInfo, RecorderCoverage,
}

// Attributes of recorder_coverage.
const (
	// AttrSession names one run of an agent's process (random hex): a
	// restart starts a new session.
	AttrSession = "session"
	// AttrInterval is the agent's --coverage-interval (a Go duration):
	// how often it writes a span.
	AttrInterval = "interval"
	// AttrCoverKernel is "on" when the kernel capture was loaded and
	// tracking the pods' cgroups over the span, else "off".
	AttrCoverKernel = "kernel"
	// AttrCoverSlices is "true" when the agent recorded EndpointSlices
	// over the span (every node's agent in all-nodes mode, the lease
	// holder in leader mode).
	AttrCoverSlices = "slices"
	// AttrCoverDataplane is "on" when the node's proxy rules were read.
	AttrCoverDataplane = "dataplane"
	// AttrDropped counts the events the agent's store buffer dropped in
	// the span (full); AttrKernelLost those the kernel's ring buffer lost.
	AttrDropped    = "dropped"
	AttrKernelLost = "kernel_lost"
)

// Reasons of recorder_coverage.
const (
	CoverStarted = "started" // the first span of a session: a point, when the agent became ready
	CoverRunning = "running" // the span since the session's last one
	// CoverResumed: the agent's own clock stalled past twice its
	// interval (the process was stopped, the node froze): the span since
	// the last one is not vouched for, and this one is a point.
	CoverResumed = "resumed"
	CoverStopped = "stopped" // the last span: to when the agent began to shut down
)

// Attributes of kernel_capabilities.
const (
	AttrKernelRelease  = "kernel_release"  // uname -r of the node
	AttrKernelFeatures = "kernel_features" // the probed features the programs use, comma-separated
	// FeatureMainProcess, listed in kernel_features, says the capture marks
	// each container's main process (FlagMain): an unmarked process event
	// on that node is a probe's, kubectl exec's or a worker's.
	FeatureMainProcess = "main_process"
	// The node's proxy mode (dataplane.DetectMode): nftables, iptables,
	// iptables-legacy, ipvs, off, or "" when no kube-proxy rules were found;
	// whether its rule changes are recorded, and how it was told.
	AttrProxyMode     = "proxy_mode"
	AttrProxyRecorded = "proxy_recorded"
	AttrProxyEvidence = "proxy_evidence"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// ParseKind returns the kind named s, or an error naming it.
func ParseKind(s string) (Kind, error) {
	k := Kind(s)
	if !k.Valid() {
		return "", fmt.Errorf("unknown event kind %q", s)
	}
	return k, nil
}

// IsEndpoint reports whether k is an EndpointSlice condition transition.
func (k Kind) IsEndpoint() bool {
	switch k {
	case EndpointAdded, EndpointReady, EndpointNotReady, EndpointServing,
		EndpointNotServing, EndpointTerminating, EndpointRemoved:
		return true
	}
	return false
}

// IsKernel reports whether k is recorded by the eBPF programs.
func (k Kind) IsKernel() bool {
	switch k {
	case Signal, ProcessExit, ListenerClosed, ConnClosed, RSTSent, RSTReceived, ConnRefused:
		return true
	}
	return false
}

// IsDataplane reports whether k is a node proxy's rule change for an
// endpoint.
func (k Kind) IsDataplane() bool {
	return k == DataplaneEndpointAdded || k == DataplaneEndpointRemoved
}

// Attributes of the dataplane kinds.
const (
	AttrProxy       = "proxy"        // the proxy whose rules changed: nftables, iptables, iptables-legacy (kube-proxy's modes), envoy
	AttrServicePort = "service_port" // the Service port's name ("" for an unnamed port)
	AttrProtocol    = "protocol"     // tcp, udp, sctp
	AttrChain       = "chain"        // the proxy's chain that held the endpoint
	AttrCluster     = "cluster"      // envoy: the cluster that held the endpoint
	AttrFrontend    = "frontend"     // cilium: the service map's frontend address:port that held the endpoint
)

// Proxy kinds (Attrs[proxy] of the dataplane kinds).
const (
	ProxyNFTables = "nftables"
	// ProxyIPTables is kube-proxy's iptables mode on the nf_tables backend
	// (iptables-nft), read from the same netlink notifications.
	ProxyIPTables = "iptables"
	// ProxyIPTablesLegacy is kube-proxy's iptables mode on the legacy
	// xtables backend, read by polling after each of its syncs.
	ProxyIPTablesLegacy = "iptables-legacy"
	ProxyEnvoy          = "envoy"  // imported from snapshots of envoy's admin /clusters
	ProxyCilium         = "cilium" // Cilium's eBPF service maps (kube-proxy replacement), package dataplane/cilium
)

// Common attribute keys.
const (
	AttrCreationTimestamp     = "creation_timestamp"
	AttrDeletionTimestamp     = "deletion_timestamp"
	AttrLastChangeTriggerTime = "last_change_trigger_time"
	AttrConditions            = "conditions"
	AttrBackend               = "backend" // client_failure: the pod address that served it, when known
	AttrClockUncertainty      = "clock_uncertainty_ns"
	AttrTarget                = "target"        // client_failure: URL or host the client asked for
	AttrGeneration            = "generation"    // workload_changed: the workload's metadata.generation after the change
	AttrReplicasFrom          = "replicas_from" // workload_changed: spec.replicas before
	AttrReplicasTo            = "replicas_to"   // workload_changed: spec.replicas after
	AttrClusterIPs            = "cluster_ips"   // service_changed: the ClusterIPs, comma-separated
	AttrContainerID           = "container_id"  // container_started, container_terminated, kernel events: the runtime's container ID, without its runtime:// prefix
	AttrDisruption            = "disruption"    // pod_deletion, pod_finished: the reason of the pod's DisruptionTarget condition (EvictionByEvictionAPI, PreemptionByScheduler, TerminationByKubelet …)
	AttrPhase                 = "phase"         // pod_finished: status.phase, Failed or Succeeded
	AttrMessage               = "message"       // pod_finished: status.message; container_terminated: the runtime's message
	AttrContainerRole         = "role"          // container_started, container_terminated: ContainerRoleApp, ContainerRoleSidecar or ContainerRoleInit
	AttrServicePorts          = "service_ports" // service_changed: port/protocol, comma-separated
	AttrServiceType           = "service_type"  // service_changed: ClusterIP, NodePort, LoadBalancer
	AttrWorkloadUID           = "workload_uid"  // workload_changed: the workload's metadata.uid (an Event about it names it)
	// AttrRollback is "true" on a workload_changed of Reason template whose
	// new template is one the watcher saw the workload run before (one of
	// its last 8): kubectl rollout undo, or a manifest reverted.
	AttrRollback = "rollback"
	// AttrRolloutSince is on every workload_changed of a workload whose
	// rollout is in progress: the time (UTC ns, decimal) of the template
	// change that began it, the event's own on the one that does. A
	// template change during a rollout keeps it; complete carries it
	// last. Absent when no rollout is in progress, and when the watcher
	// did not see the rollout begin (it started during one).
	AttrRolloutSince = "rollout_since"
	// AttrContainerPorts is on container_started: the ports the
	// container's spec declares, port/PROTOCOL comma-separated
	// ("8080/TCP,9090/TCP"); absent when it declares none (a declared
	// port is documentation: a container may listen on others). The
	// endpoint kinds use the same key for their slice's ports.
	AttrContainerPorts = "ports"

	// What a container_started's spec gives the container to stop:
	// AttrPreStop its preStop handler (PreStopSleep, PreStopExec,
	// PreStopHTTP, PreStopTCP; absent for none), AttrPreStopSleep the
	// seconds it waits when the handler says (the sleep action, or an exec
	// of "sleep N" alone or through a shell), AttrGracePeriod the pod's
	// terminationGracePeriodSeconds.
	AttrPreStop      = "prestop"
	AttrPreStopSleep = "prestop_sleep"
	AttrGracePeriod  = "grace_period"

	// kubelet_event: the Event's count and lastTimestamp (RFC 3339) as
	// the kubelet last wrote them; the message is AttrMessage.
	AttrCount         = "count"
	AttrLastTimestamp = "last_timestamp"

	// node_info: GitVersion of the API server's /version, and the Node's
	// status.nodeInfo kubeletVersion, kubeProxyVersion (empty on 1.31+
	// nodes, where the field is deprecated) and containerRuntimeVersion.
	AttrAPIServerVersion = "apiserver_version"
	AttrKubeletVersion   = "kubelet_version"
	AttrKubeProxyVersion = "kube_proxy_version"
	AttrContainerRuntime = "container_runtime"
)

// preStop handler types (Attrs[prestop] of container_started).
const (
	PreStopSleep = "sleep" // lifecycle.preStop.sleep (the sleep action, 1.30+)
	PreStopExec  = "exec"
	PreStopHTTP  = "httpGet"
	PreStopTCP   = "tcpSocket"
)

// The kubelet's Event reasons recorded as kubelet_event.
const (
	KubeletFailedPreStopHook = "FailedPreStopHook"
	KubeletFailedKillPod     = "FailedKillPod"
)

// What a container is to its pod (Attrs[role] of the container kinds).
const (
	ContainerRoleApp = "app" // one of spec.containers
	// ContainerRoleSidecar is a native sidecar: an init container with
	// restartPolicy Always, which runs beside the app's containers (a
	// service mesh's proxy) and is stopped after them.
	ContainerRoleSidecar = "sidecar"
	ContainerRoleInit    = "init" // an init container run to completion before the others start
)

// A mesh proxy's states (Reason of proxy_state), as its own log says.
const (
	ProxyDraining    = "draining"    // it began draining: istio-agent's "Agent draining Proxy", linkerd's "received SIGTERM"
	ProxyConnections = "connections" // connections still open while it drains (Attrs[connections])
	ProxyTerminating = "terminating" // its drain is over and it kills the proxy: "terminating remaining proxies", "Aborting proxy"
	ProxyExited      = "exited"      // the proxy exited
	// AttrConnections is proxy_state's count of connections still open.
	AttrConnections = "connections"
)

// What changed a workload (Reason of workload_changed).
const (
	ChangeTemplate = "template" // the pod template changed: a rollout begins
	ChangeScale    = "scale"    // spec.replicas changed
	ChangeCreated  = "created"
	ChangeDeleted  = "deleted"
	// A Deployment's spec.paused turned true: its controller starts no
	// new rollout step, so a pause ends no pod.
	ChangePaused = "paused"
	// spec.paused turned false: a rollout held by the pause (a template
	// changed before or during it) proceeds, so a resume can end pods.
	ChangeResumed = "resumed"
	// The status turned from a rollout in progress to done, as kubectl
	// rollout status decides it: once per rollout, the pods of a new
	// template, of a scale or of a new workload all rolled out. Not for
	// a spec change the controller only had to observe (a pause, a
	// change of the progress deadline), nor for a workload already done
	// when the watch began. It ends no pod.
	ChangeComplete = "complete"
	ChangeUpdated  = "updated"  // service_changed: its addresses or ports changed
	ChangeObserved = "observed" // service_changed: as it was when the watch began, and every 10 minutes
)

// Client failure classes (Reason of client_failure).
const (
	FailEOF     = "eof"     // remote disconnected: connection closed before a response
	FailRefused = "refused" // connection refused
	FailReset   = "reset"   // connection reset by peer
	FailTimeout = "timeout" // no answer: timed out, or no route to the address (its host gone)
	FailStatus  = "status"  // an HTTP error status (Code holds it)
	FailOther   = "other"
)

// The signals the rules tell apart, as Event.Signal holds them (Linux's
// numbers, the same on every architecture Kubernetes runs on).
const (
	SIGKILL int32 = 9
	SIGTERM int32 = 15
)
