package sampleapp_test

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/lab/sampleapp"
)

var adminListening = regexp.MustCompile(`msg="admin listening" .*addr=(\S+)`)

// startWithAdmin runs the service with an admin listener and returns it
// with its service and admin addresses.
func startWithAdmin(t *testing.T, args ...string) (cmd *exec.Cmd, addr, admin string) {
	t.Helper()
	cmd = exec.Command(os.Args[0], append([]string{"-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "SAMPLEAPP_CHILD=1", "POD_NAME=test-pod")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addrs := make(chan [2]string, 1)
	go func() {
		var a [2]string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log("app:", sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				a[0] = m[1]
			}
			if m := adminListening.FindStringSubmatch(sc.Text()); m != nil {
				a[1] = m[1]
				addrs <- a
			}
		}
	}()
	select {
	case a := <-addrs:
		return cmd, a[0], a[1]
	case <-time.After(10 * time.Second):
		t.Fatal("service did not start listening")
	}
	return nil, "", ""
}

// children lists the processes whose parent is pid.
func children(pid int) map[int]bool {
	out := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so cut at the last ")".
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out[p] = true
		}
	}
	return out
}

// TestWorkerRecycled checks that the service keeps one worker process and
// replaces it: each worker is a real child process that exits.
func TestWorkerRecycled(t *testing.T) {
	cmd, _, _ := startWithAdmin(t, "-worker-every", "200ms")
	seen := map[int]bool{}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && len(seen) < 4 {
		for p := range children(cmd.Process.Pid) {
			seen[p] = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(seen) < 4 {
		t.Fatalf("%d worker processes seen in 3 s of recycling every 200 ms, want 4 or more", len(seen))
	}
	now := children(cmd.Process.Pid)
	if len(now) > 2 {
		t.Errorf("%d workers at once, want one (two while one replaces the other)", len(now))
	}
	gone := 0
	for p := range seen {
		if _, err := os.Stat("/proc/" + strconv.Itoa(p)); err != nil {
			gone++
		}
	}
	if gone < len(seen)-2 {
		t.Errorf("%d of %d workers exited, want all but the current ones", gone, len(seen))
	}
}

// TestCheck checks the exec probe's subcommand: 0 for a healthy server, 1
// for none.
func TestCheck(t *testing.T) {
	_, addr, admin := startWithAdmin(t)
	run := func(url string) int {
		c := exec.Command(os.Args[0], "-check", url)
		c.Env = append(os.Environ(), "SAMPLEAPP_CHILD=1")
		out, _ := c.CombinedOutput()
		t.Logf("check %s: %s", url, out)
		return c.ProcessState.ExitCode()
	}
	if code := run("http://" + addr + sampleapp.PathHealth); code != 0 {
		t.Errorf("check of a healthy server: exit %d, want 0", code)
	}
	// The admin listener answers 404 there.
	if code := run("http://" + admin + sampleapp.PathHealth); code != 1 {
		t.Errorf("check of an answer that is not 2xx: exit %d, want 1", code)
	}
}

func TestAdminCrashAndOOM(t *testing.T) {
	for _, tc := range []struct {
		path string
		args []string
		want int
	}{
		{sampleapp.PathCrash, nil, sampleapp.ExitCrash},
		// No memory limit here: the ceiling is reached and the process
		// exits with its own code instead of taking the machine's memory.
		{sampleapp.PathOOM, []string{"-oom-max", strconv.Itoa(32 << 20)}, sampleapp.ExitNoOOM},
	} {
		cmd, _, admin := startWithAdmin(t, tc.args...)
		resp, err := http.Post("http://"+admin+tc.path, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Errorf("%s: HTTP %d, want 202", tc.path, resp.StatusCode)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the process did not exit", tc.path)
		}
		if code := cmd.ProcessState.ExitCode(); code != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.path, code, tc.want)
		}
	}
}

// TestAdminFill checks that PathFill writes the file it is asked for into
// the fill directory, and that it is refused without one or past its
// bounds; the service keeps running.
func TestAdminFill(t *testing.T) {
	dir := t.TempDir()
	cmd, addr, admin := startWithAdmin(t, "-fill-dir", dir)
	post := func(admin, query string) int {
		resp, err := http.Post("http://"+admin+sampleapp.PathFill+query, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(admin, "?mib=3"); code != http.StatusAccepted {
		t.Fatalf("fill 3 MiB: HTTP %d, want 202", code)
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 1 {
		t.Fatalf("%d files in the fill directory, want 1", len(files))
	}
	fi, err := files[0].Info()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 3<<20 {
		t.Errorf("file of %d bytes, want %d", fi.Size(), 3<<20)
	}
	for _, q := range []string{"?mib=0", "?mib=x", "?mib=100000"} {
		if code := post(admin, q); code != http.StatusBadRequest {
			t.Errorf("fill %s: HTTP %d, want 400", q, code)
		}
	}
	if resp, err := http.Get("http://" + addr + sampleapp.PathHealth); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the service after filling: %v %v, want it serving", resp, err)
	} else {
		resp.Body.Close()
	}
	if cmd.ProcessState != nil {
		t.Error("the service exited")
	}

	_, _, bare := startWithAdmin(t)
	if code := post(bare, ""); code != http.StatusConflict {
		t.Errorf("fill without a fill directory: HTTP %d, want 409", code)
	}
}
