// Package textreport renders an analysis.Result for people. WriteText writes
// it for a terminal, WriteMarkdown for a pull request or an issue; LagLine,
// KernelLines, ProxyLines and InferenceLines are the lines the report and the
// lab share. Every name that came from the cluster or a client log is made
// safe for display first. analysis.WriteJSON is the machine form.
package textreport
