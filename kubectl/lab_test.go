package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/lab/simnode"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/web"
)

// TestKubectlPluginOnTheLab runs the lab's exit run on the real cluster,
// puts a drainscope server in it as the chart does (scenario.DeployServer:
// a pod behind a Service with the chart's labels, its token from a
// Secret), and runs
// `kubectl drainscope` as a user would: the real kubectl finds the plugin
// on PATH and runs it, the plugin finds the server through the API server
// and reaches it by pods/portforward (which the lab node serves as the
// kubelet would).
func TestKubectlPluginOnTheLab(t *testing.T) {
	testenv.RequireRoot(t)
	bins, err := controlplane.CheckBinaries("")
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if testing.Short() {
		t.Skip("runs the lab's exit run: about a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // the lab lock may be held for a while
	defer cancel()

	// The binaries as shipped: the plugin on PATH, and drainscope for the
	// server's pod and the sample service.
	dir, other := t.TempDir(), t.TempDir()
	bin := filepath.Join(other, "drainscope")
	for pkg, out := range map[string]string{"../cmd/kubectl-drainscope": filepath.Join(dir, Name), "../cmd/drainscope": bin} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	// drainscope's own binary is the plugin too, under the plugin's name.
	if err := os.Symlink(bin, filepath.Join(other, Name)); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.CommandContext(ctx, filepath.Join(other, Name), "-h").CombinedOutput(); !strings.Contains(string(out), "usage: kubectl drainscope report") {
		t.Errorf("drainscope under the plugin's name is not the plugin:\n%s", out)
	}

	dbPath := filepath.Join(other, "events.db")
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := scenario.Up(ctx, scenario.Options{
		AppCommand:  []string{bin, "lab", "sampleapp"},
		Images:      map[string]simnode.Image{scenario.ServerImage: {Entrypoint: []string{bin}}},
		Store:       st,
		WaitForLock: true,
		Log:         log,
		Progress:    testLog{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Down()
	runs, err := scenario.SelectRuns("exit")
	if err != nil {
		t.Fatal(err)
	}
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: scenario.Profiles["ci"], Runs: runs, Progress: testLog{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	exitRun := results[0]
	if exitRun.Load.FailedTotal() == 0 {
		t.Fatalf("the exit run dropped nothing: %s", exitRun.Summary())
	}
	token, err := scenario.DeployServer(ctx, c, dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}

	kubectl := bins["kubectl"]
	env := append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+c.CP.Kubeconfig(),
		"DRAINSCOPE_AUTH_TOKEN=", "DRAINSCOPE_NAMESPACE=")
	run := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env = env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code < 0 {
			t.Fatalf("kubectl %v: %v", args, err)
		}
		return code, o.String(), e.String()
	}
	if code, out, stderr := run("plugin", "list"); code != 0 || !strings.Contains(out, filepath.Join(dir, Name)) {
		t.Fatalf("kubectl plugin list does not find the plugin: exit %d\n%s%s", code, out, stderr)
	}
	ns := scenario.Namespace
	server := []string{"-n", ns, "--server-namespace", ns}

	// The report names the exit run's disruptions and their causes, as
	// the server's API has them.
	workload := "deploy/" + exitRun.Deployment
	code, jsonOut, stderr := run(append([]string{"drainscope", "report", workload, "--since", "30m", "-o", "json"}, server...)...)
	if code != 0 {
		t.Fatalf("report -o json: exit %d: %s", code, stderr)
	}
	var rep struct {
		Exists      string          `json:"exists"`
		Disruptions []web.Alignment `json:"disruptions"`
	}
	if err := json.Unmarshal([]byte(jsonOut), &rep); err != nil {
		t.Fatalf("report -o json: %v\n%s", err, jsonOut)
	}
	code, text, stderr := run(append([]string{"drainscope", "report", workload, "--since", "30m"}, server...)...)
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	t.Logf("kubectl drainscope report %s:\n%s", workload, text)
	if rep.Exists != "no" || !strings.Contains(text, "no longer exists") {
		t.Errorf("the run deleted its Deployment: exists %q, and the text should say so", rep.Exists)
	}
	var rollout *web.Alignment
	for i, d := range rep.Disruptions {
		if d.Rollout.Trigger == "template" {
			rollout = &rep.Disruptions[i]
		}
		// Each disruption's section lists its own failures by cause, and
		// no other: not those of a neighbour the server analysed with it.
		section := ""
		for _, sec := range strings.Split(text, "\n\n") {
			if strings.Contains(sec, d.Rollout.Links.Timeline+" ") {
				section = sec
			}
		}
		titles := map[string]string{}
		for _, c := range d.Legend {
			titles[c.Cause] = c.Title
		}
		rows := 0
		for _, m := range []map[analysis.Cause]int{d.Rollout.ByCause, d.Rollout.InferredByCause} {
			for c, n := range m {
				if n == 0 {
					continue
				}
				rows++
				if want := fmt.Sprintf("%5d  %s", n, titles[string(c)]); !strings.Contains(section, want) {
					t.Errorf("the %s disruption's section lacks the cause %q:\n%s", d.Rollout.Trigger, want, section)
				}
			}
		}
		if got := len(causeRow.FindAllString(section, -1)); got != rows {
			t.Errorf("the %s disruption's section has %d cause rows, its summary %d:\n%s", d.Rollout.Trigger, got, rows, section)
		}
	}
	if rollout == nil {
		t.Fatalf("no rollout (trigger template) of %s in the report: %+v", workload, rep.Disruptions)
	}
	if rollout.Rollout.PodsReplaced != 4 || rollout.Rollout.Failures == 0 {
		t.Errorf("rollout: %d pods replaced, %d client failures; want 4 and some", rollout.Rollout.PodsReplaced, rollout.Rollout.Failures)
	}
	if rollout.Rollout.ByCause[analysis.CauseKeepAliveAtExit] == 0 || !strings.Contains(text, "rollout (new pod template)") || !strings.Contains(text, "fix: ") {
		t.Errorf("the exit run's rollout should show keep-alive connections cut at exit, with the fix: %+v", rollout.Rollout.ByCause)
	}

	// The same through --kubeconfig and a store read directly.
	direct := []string{"drainscope", "report", workload, "--since", "30m", "--kubeconfig", c.CP.Kubeconfig(), "-n", ns}
	env = append(env, "KUBECONFIG=/nonexistent")
	if code, out, stderr := run(append(direct, "--dsn", dbPath)...); code != 0 || sameCauses(out) != sameCauses(text) {
		t.Errorf("--dsn: exit %d, %s; want the same causes as through the server:\n%s", code, stderr, out)
	}

	if code, out, stderr := run(append([]string{"drainscope", "rollouts", "--kubeconfig", c.CP.Kubeconfig()}, server...)...); code != 0 ||
		!strings.Contains(out, "Deployment/"+exitRun.Deployment) || !strings.Contains(out, "template") {
		t.Errorf("rollouts: exit %d, %s:\n%s", code, stderr, out)
	}

	// Errors name what is wrong.
	kc := []string{"--kubeconfig", c.CP.Kubeconfig()}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{append([]string{"drainscope", "report", "deploy/nope"}, server...), 1, `no deployment "nope" in namespace ` + ns + ", and drainscope recorded no disruption"},
		{append([]string{"drainscope", "report", "job/" + exitRun.Deployment}, server...), 2, `unknown workload kind "job"`},
		{[]string{"drainscope", "report", workload, "-n", ns, "--server-namespace", "default"}, 1, "no drainscope server found in namespace default"},
		{append([]string{"drainscope", "report", workload, "--service", "other"}, server...), 1, `no Service "other" in namespace ` + ns},
		{append([]string{"drainscope", "report", workload, "--auth-token", strings.Repeat("x", 40)}, server...), 1, "401 Unauthorized"},
	} {
		code, _, stderr := run(append(tc.args, kc...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("kubectl %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}
	// The right token, given: the same answer as the one read from the Secret.
	if code, out, stderr := run(append(append([]string{"drainscope", "report", workload, "--since", "30m", "--auth-token", token}, server...), kc...)...); code != 0 || sameCauses(out) != sameCauses(text) {
		t.Errorf("--auth-token: exit %d, %s:\n%s", code, stderr, out)
	}
}

var causeRow = regexp.MustCompile(`(?m)^ {4}[ \d]{4}\d  \S`)

// sameCauses is the report's cause lines, which do not depend on where
// the answer came from.
func sameCauses(report string) string {
	var b strings.Builder
	for _, l := range strings.Split(report, "\n") {
		if strings.HasPrefix(l, "    ") && !strings.HasPrefix(strings.TrimSpace(l), "fix:") {
			b.WriteString(strings.TrimSpace(l) + "\n")
		}
	}
	return b.String()
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testLog{}
