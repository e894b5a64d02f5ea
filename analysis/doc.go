// Package analysis turns recorded events into explanations of dropped
// requests. It builds per-pod termination timelines with the gaps that matter
// (SIGTERM versus endpoint removal, exit versus SIGTERM, grace used), groups
// disruptions per workload by what began them (account.go), with the readiness
// of the new pods, aligns every client failure to the pod that served it and
// to that pod's nearest events, and names a cause for each failure by a table
// of rules (Rules), each stating the evidence it needs, the explanation and
// the fix. Where no client log exists, the failures the pods' kernel events
// prove on their own (refused SYNs, resets answering data on closed
// connections, resets with unread data) are reported as inferred.
//
// Entry points:
//
//   - Analyze(ctx, store, query) reads a window from a store and returns a
//     Result: Disruptions, Timelines, Causes (with fixes, evidence counts and
//     offset histograms), InferredCauses, Inference (what kernel evidence
//     alone recovers), Failures (each an AlignedFailure with its pod, cause,
//     explanation, evidence and nearest events), Totals. All JSON-tagged.
//   - AnalyzeEvents does the same on a slice of events in memory.
//   - FindDisruptions lists the disruptions of a window as the analysis
//     groups them, reading only the lifecycle rows; AnalyzeDisruption
//     fills one in.
//   - NewAligner is the streaming core both use: feed events in time order
//     with Add, get a Decision per failure and a PodTimeline per pod through
//     callbacks, call Flush at the end. It decides each failure once the
//     stream has passed it by Options.Lookahead and keeps only a sliding
//     window (KernelWindow of connection events, Retain after a pod ended),
//     so its memory follows the window, not the history.
//   - WriteJSON writes a Result as JSON; the text and markdown reports
//     are package analysis/textreport (WriteText, WriteMarkdown).
//
// Where things are, by file:
//
//   - aligner.go: the Aligner — its state, NewAligner, Add (feeding
//     events), Flush, the pending queue, pod lookup by UID, name and IP,
//     the sliding kernel window, and sweep/forget (eviction).
//   - kindex.go, addrmap.go: the aligner's lookups by address —
//     kernelIndex (a client address's latest pod-side connection event,
//     an open-addressed table), addrMap and ipIndex (maps keyed by
//     address, IPv4 apart on the runtime's fast path).
//   - served.go: which pod served a failure (servedBy: named, backend,
//     dialled address, kernel records on the client address) and whether
//     kernel evidence also proves a client failure (kernelProof).
//   - coverage.go: the recorders' coverage (Coverage, RecorderGap) from
//     their recorder_coverage spans: a failure whose evidence lies in a
//     gap is unexplained, naming it (ReadCoverage, SetCoverage).
//   - decide.go: Decision and decide, which applies the rules to a
//     failure whose pod servedBy chose, and its nearest events.
//   - rules.go: the cause table (Rules), Facts, and the finders each
//     requirement uses. ingress.go: the ingress proxy-lag rule.
//   - infer.go: failures inferred from pod-side kernel events alone, and
//     their Proof constants.
//   - pod.go: podState, one pod's life as the aligner holds it, and its
//     methods (routing, exits, endpoints, rotation, offsets, eviction).
//   - service.go: Service state (endpoints per node, ClusterIPs over time),
//     resolving a failure's target to Services, and telling a Service of
//     another cluster (one no record holds) from this cluster's.
//   - dataplane.go: measured watch → dataplane lags and per-pod dataplane
//     views.
//   - timeline.go: PodTimeline and building it from a podState.
//   - analyze.go: Analyze, AnalyzeWith, AnalyzeEvents (the entry points).
//   - result.go: Result and the types it carries (Totals, CauseSummary,
//     Inference, ...), and WriteJSON.
//   - aggregate.go: the collector that groups decisions by cause and
//     counts them into a Result.
//   - container.go: which container of a pod is the app (its declared
//     port, its listener), which is a proxy on the data path (its inbound
//     connections), and each container's own signals and exits.
//   - account.go: the account — grouping pod lives' ends into
//     disruptions by the workload changes (a rollout until complete, a
//     scale-down, a deletion) or what the pods show.
//   - trigger.go: Trigger and the trigger table (Triggers): what began a
//     disruption, its words and advice.
//   - find.go: FindDisruptions, the account read from a store's
//     lifecycle rows for a list, without analysing the failures.
//   - rollouts.go: each disruption of a Result, filled in with its
//     failures and new pods.
//   - patch.go: each fix as a patch of the workload (Patch, planPatch),
//     with numbers from the cluster's measured lags and the form its
//     versions accept (Cluster, Version). check.go: Check, each
//     workload's termination budget judged before its next rollout.
//   - histogram.go: offset histograms (hist, Histogram).
//   - disruption.go: Disruption, the one report of a disruption that web,
//     export and the kubectl plugin read, and its key and window.
//   - explain.go: AlignedFailure and the explanation templates' data.
//   - describe.go, view.go: one event in words and as JSON.
//   - options.go: Options and defaults. ring.go: the ring buffer.
package analysis
