// Package analysis turns recorded events into explanations of dropped
// requests: per-pod termination timelines with the gaps that matter
// (SIGTERM versus endpoint removal, exit versus SIGTERM, grace used),
// rollouts grouped per workload with the readiness of the new pods, every
// client failure aligned to the pod that served it and to that pod's nearest
// events, and a cause named for each failure by a table of rules (Rules),
// each stating the evidence it needs, the explanation and the fix. Where no
// client log exists, the failures the pods' kernel events prove on their own
// (refused SYNs, resets answering data on closed connections, resets with
// unread data) are reported as inferred.
//
// Entry points:
//
//   - Analyze(ctx, store, query) reads a window from a store and returns a
//     Result: Rollouts, Timelines, Causes (with fixes, evidence counts and
//     offset histograms), InferredCauses, Inference (what kernel evidence
//     alone recovers), Failures (each an AlignedFailure with its pod, cause,
//     explanation, evidence and nearest events), Totals. All JSON-tagged.
//   - AnalyzeEvents does the same on a slice of events in memory.
//   - NewAligner is the streaming core both use: feed events in time order
//     with Add, get a Decision per failure and a PodTimeline per pod through
//     callbacks, call Flush at the end. It decides each failure once the
//     stream has passed it by Options.Lookahead and keeps only a sliding
//     window (KernelWindow of connection events, Retain after a pod ended),
//     so its memory follows the window, not the history.
//   - WriteText, WriteMarkdown and WriteJSON render a Result.
package analysis
