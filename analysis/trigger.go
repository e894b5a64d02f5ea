package analysis

// Trigger names what began a disruption: what someone did to the
// workload (a rollout, a scale-down, its deletion) or what the pods
// themselves show ended them (an eviction, an OOM kill, a restart). The
// string is what the JSON, the stores' digests and the export sinks carry.
type Trigger string

// The triggers, one row each in Triggers.
const (
	TriggerRollout      Trigger = "template"      // the pod template changed: a rollout (paused, resumed or rolled back, it stays one)
	TriggerScale        Trigger = "scale"         // spec.replicas lowered: a scale-down, by hand or by an autoscaler
	TriggerDeleted      Trigger = "deleted"       // the workload was deleted
	TriggerEviction     Trigger = "eviction"      // the Eviction API: a node drain, kubectl evict
	TriggerPreemption   Trigger = "preemption"    // the scheduler made room for another pod
	TriggerTaint        Trigger = "taint"         // the taint manager: a NoExecute taint
	TriggerNodePressure Trigger = "node-pressure" // the kubelet evicted the pod for the node's memory, disk or PIDs
	TriggerNodeShutdown Trigger = "node-shutdown" // the kubelet's graceful node shutdown
	TriggerPodDeleted   Trigger = "pod-deleted"   // deleted with no reason given and no workload change: kubectl delete, or a controller whose change was not recorded
	TriggerOOM          Trigger = "oom"           // a container killed for memory, the pod kept
	TriggerRestart      Trigger = "restart"       // a container ended and restarted in place: a failed liveness probe, a crash
)

// TriggerInfo is one row of the trigger table: how the records show it,
// its words and what to do about it.
type TriggerInfo struct {
	Trigger Trigger `json:"trigger"`
	// Change is the workload change (Reason of workload_changed) that is
	// this trigger; "" for a trigger the pods show.
	Change string `json:"change,omitempty"`
	// Disruption lists the reasons of the pod's DisruptionTarget condition
	// (pod_deletion's or pod_finished's Attrs[disruption]) and Finished the
	// pod_finished reasons that are this trigger.
	Disruption []string `json:"disruption_reasons,omitempty"`
	Finished   []string `json:"finished_reasons,omitempty"`
	// Noun names the disruption in a sentence ("the rollout of
	// Deployment/web"), Heading heads a report of it, BegunBy says what
	// began it ("a pod template change").
	Noun    string `json:"noun"`
	Heading string `json:"heading"`
	BegunBy string `json:"begun_by"`
	// Advice is what to do about the trigger itself, where it was not
	// what someone meant to do; "" for a change made on purpose.
	Advice string `json:"advice,omitempty"`
	// Replaced: the pods it ends get replacements, the disruption's new
	// pods (a rollout's, an eviction's); not a scale-down's, a deletion's
	// or a container's restart in its own pod.
	Replaced bool `json:"replaced"`
}

// Triggers is the trigger table. Every Trigger constant has one row
// (TestTriggerTableComplete).
var Triggers = []TriggerInfo{
	{Trigger: TriggerRollout, Replaced: true, Change: "template", Noun: "rollout", Heading: "rollout (new pod template)", BegunBy: "a pod template change"},
	{Trigger: TriggerScale, Change: "scale", Noun: "scale-down", Heading: "scale-down (change of replicas)", BegunBy: "a change of replicas"},
	{Trigger: TriggerDeleted, Change: "deleted", Noun: "deletion", Heading: "deletion of the workload", BegunBy: "the workload's deletion"},
	{Trigger: TriggerEviction, Replaced: true, Disruption: []string{"EvictionByEvictionAPI"}, Noun: "eviction", Heading: "eviction",
		BegunBy: "an eviction (a node drain, or the Eviction API)",
		Advice:  "a PodDisruptionBudget bounds how many pods a drain evicts at once; each evicted pod ends as in a rollout, with the same preStop and grace period"},
	{Trigger: TriggerPreemption, Replaced: true, Disruption: []string{"PreemptionByScheduler"}, Noun: "preemption", Heading: "preemption",
		BegunBy: "the scheduler's preemption",
		Advice:  "a higher priority pod took the node's room: give this workload a PriorityClass as high, or room of its own"},
	{Trigger: TriggerTaint, Replaced: true, Disruption: []string{"DeletionByTaintManager"}, Noun: "taint eviction", Heading: "taint eviction",
		BegunBy: "a NoExecute taint",
		Advice:  "a NoExecute taint on the node evicted the pod: tolerationSeconds for the taint keeps it while the node recovers"},
	{Trigger: TriggerNodePressure, Replaced: true, Disruption: []string{"TerminationByKubelet"}, Finished: []string{"Evicted"}, Noun: "node-pressure eviction", Heading: "node-pressure eviction",
		BegunBy: "the kubelet's node-pressure eviction",
		Advice:  "the kubelet evicted the pod when the node crossed an eviction threshold (evictionHard or evictionSoft): requests that cover the pod's use keep it off the list; a hard threshold kills at once, with no grace period"},
	{Trigger: TriggerNodeShutdown, Replaced: true, Finished: []string{"Shutdown", "Terminated"}, Noun: "node shutdown", Heading: "node shutdown",
		BegunBy: "the node's shutdown",
		Advice:  "the kubelet's graceful node shutdown ended the pod: shutdownGracePeriod and shutdownGracePeriodCriticalPods bound its drain"},
	{Trigger: TriggerPodDeleted, Replaced: true, Noun: "pod deletion", Heading: "pod deletion", BegunBy: "the pods' deletion (kubectl delete, or a controller)"},
	{Trigger: TriggerOOM, Noun: "OOM kill", Heading: "OOM kill", BegunBy: "an OOM kill",
		Advice: "raise the container's memory limit or find what outgrows it"},
	{Trigger: TriggerRestart, Noun: "container restart", Heading: "container restart",
		BegunBy: "a container's end and restart (a failed liveness probe, a crash)",
		Advice:  "find why the container ended: its lastState and the kubelet's events (a failed liveness probe, an exit code)"},
}

// Info is t's row of the trigger table; an unknown trigger is a
// "disruption" headed by its own name.
func (t Trigger) Info() TriggerInfo {
	for _, ti := range Triggers {
		if ti.Trigger == t {
			return ti
		}
	}
	if t == "" {
		return TriggerInfo{Noun: "disruption", Heading: "disruption"}
	}
	return TriggerInfo{Trigger: t, Noun: "disruption", Heading: string(t), BegunBy: "a workload change: " + string(t)}
}

// triggerOfChange is the trigger a workload change (Reason of
// workload_changed) is, "" for one that ends no pod.
func triggerOfChange(reason string) Trigger {
	for _, ti := range Triggers {
		if ti.Change != "" && ti.Change == reason {
			return ti.Trigger
		}
	}
	return ""
}

// triggerOfDisruption is the trigger a DisruptionTarget reason names, ""
// for none.
func triggerOfDisruption(reason string) Trigger {
	if reason == "" {
		return ""
	}
	for _, ti := range Triggers {
		for _, r := range ti.Disruption {
			if r == reason {
				return ti.Trigger
			}
		}
	}
	return ""
}

// triggerOfFinish is the trigger a pod_finished reason names, "" for
// none.
func triggerOfFinish(reason string) Trigger {
	for _, ti := range Triggers {
		for _, r := range ti.Finished {
			if r == reason {
				return ti.Trigger
			}
		}
	}
	return ""
}

// TriggerWords say what began a disruption, for people.
type TriggerWords struct {
	Noun    string `json:"noun"`
	Heading string `json:"heading"`
	BegunBy string `json:"begun_by,omitempty"`
}

// WordsFor is what trigger says in words.
func WordsFor(t Trigger) TriggerWords {
	ti := t.Info()
	return TriggerWords{Noun: ti.Noun, Heading: ti.Heading, BegunBy: ti.BegunBy}
}
