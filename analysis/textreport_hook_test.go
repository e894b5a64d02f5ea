package analysis_test

import (
	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
)

// See export_test.go: the tests of package analysis render through
// textreport, which they cannot import themselves.
func init() {
	analysis.WriteText = textreport.WriteText
	analysis.WriteMarkdown = textreport.WriteMarkdown
	analysis.LagLine = textreport.LagLine
}
