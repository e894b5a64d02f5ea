// Package textreport renders an analysis.Result for people: WriteText for a
// terminal, WriteMarkdown for a pull request or an issue, and the lines the
// report and the lab share (LagLine, KernelLines, ProxyLines,
// InferenceLines). Every name that came from the cluster or a client log is
// made safe for display first. analysis.WriteJSON is the machine form.
package textreport
