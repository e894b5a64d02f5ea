package textreport

import (
	"fmt"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/analysis"
)

// A disruption's lines say what began it, in the trigger's words, and
// how many pods it replaced and how many new ones became ready.
func TestDisruptionLines(t *testing.T) {
	for _, tc := range []struct {
		trigger       analysis.Trigger
		replaced, new int
		want          []string
	}{
		{analysis.TriggerRollout, 4, 4, []string{", begun by a pod template change", "4 pods replaced, 4 new pods ready"}},
		{analysis.TriggerDeleted, 1, 0, []string{", begun by the workload's deletion", "1 pod replaced, 0 new pods ready"}},
		{"", 2, 1, []string{"2 pods replaced, 1 new pod ready"}},
	} {
		d := analysis.Disruption{Namespace: "default", Kind: "Deployment", Name: "web", Trigger: tc.trigger}
		for i := range tc.replaced {
			d.Replaced = append(d.Replaced, analysis.PodView{Namespace: "default", Name: fmt.Sprintf("web-old-%d", i)})
		}
		for i := range tc.new {
			d.NewPods = append(d.NewPods, analysis.NewPod{Pod: analysis.PodView{Namespace: "default", Name: fmt.Sprintf("web-new-%d", i)}})
		}
		var lines []string
		textRollout(func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }, &d, nil)
		text := strings.Join(lines, "\n")
		for _, want := range tc.want {
			if !strings.Contains(text, want) {
				t.Errorf("trigger %q: the lines lack %q:\n%s", tc.trigger, want, text)
			}
		}
		if tc.trigger == "" && strings.Contains(text, "begun by") {
			t.Errorf("no trigger recorded, yet the lines say what began it:\n%s", text)
		}
	}
}
