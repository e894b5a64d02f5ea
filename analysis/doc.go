// Package analysis turns recorded events into explanations of dropped
// requests: per-pod termination timelines with the gaps that matter
// (SIGTERM versus endpoint removal, exit versus SIGTERM, grace used),
// rollouts grouped per workload with the readiness of the new pods, every
// client failure aligned to the pod that served it and to that pod's nearest
// events, and a cause named for each failure by a table of rules (Rules),
// each stating the evidence it needs, the explanation and the fix.
//
// The work is done by one streaming Aligner that reads events in time order
// and keeps only a sliding window (Options.Lookahead ahead of each failure,
// Options.KernelWindow and Options.Retain behind it), so a long history costs
// time, not memory. Analyze runs it over a store; AnalyzeEvents over a slice;
// WriteText, WriteMarkdown and WriteJSON render the Result.
package analysis
