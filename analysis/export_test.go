package analysis

import "io"

// The text and markdown renderers live in analysis/textreport, which
// imports this package, so the tests here cannot import it; the golden and
// report tests call these instead, which textreport_hook_test.go (package
// analysis_test, which may import it) sets to textreport's functions
// before any test runs.
var (
	WriteText     func(io.Writer, *Result) error
	WriteMarkdown func(io.Writer, *Result) error
	LagLine       func([]NodeLag) string
)
