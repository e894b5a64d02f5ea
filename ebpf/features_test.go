package ebpf

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// degradedCollector is socketCollector with some kernel features withheld:
// the programs load as on a kernel without them.
func degradedCollector(t *testing.T, p *testPod, without ...Feature) (*Collector, *recorder) {
	t.Helper()
	pods := &fakePods{}
	pods.add(p)
	c := openCollector(t, Config{Pods: pods, WithoutFeatures: without})
	for _, f := range without {
		if slices.Contains(c.Features(), f) {
			t.Fatalf("feature %s withheld but in use", f)
		}
	}
	if err := c.Track(p.PodCgroupID); err != nil {
		t.Fatal(err)
	}
	if p.NetNSIno != 0 {
		if err := c.TrackNetNS(p.NetNSIno); err != nil {
			t.Fatal(err)
		}
	}
	return c, record(t, c)
}

func missing(c *Collector) []string { return MissingEvidence(c.Evidence()) }

// TestFeaturesOfThisKernel: the kernel the tests run on (6.18) has every
// feature, so no evidence is missing.
func TestFeaturesOfThisKernel(t *testing.T) {
	c := openCollector(t, Config{})
	t.Logf("kernel %s, features %v", c.KernelRelease(), c.Features())
	if got := c.Features(); !slices.Equal(got, Features) {
		t.Errorf("features %v, want all of %v on this kernel", got, Features)
	}
	if m := missing(c); len(m) != 0 {
		t.Errorf("missing evidence %v on a kernel with every feature", m)
	}
}

// TestWithoutTaskBTF: before Linux 5.11 the socket programs take the
// current task from bpf_get_current_task and read it with CO-RE probes.
// They still load, and still name the owning process and the exit flag.
func TestWithoutTaskBTF(t *testing.T) {
	p := newTestPod(t, true)
	c, r := degradedCollector(t, p, FeatureTaskBTF)
	if m := missing(c); len(m) != 0 {
		t.Errorf("missing evidence %v: the fallback should see everything", m)
	}
	h, addr := serve(t, p, "exit", 0)
	conn, br := dial(t, addr)
	request(t, conn, br)
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	client := localAddr(conn)
	cc := r.waitFor(t, "conn_closed", func(e *event.Event) bool {
		return e.Kind == event.ConnClosed && e.Remote == client
	})
	if cc.PID != int32(h.Pid()) || cc.Comm == "" || !cc.Flags.Has(event.FlagAtExit) {
		t.Errorf("conn_closed without its owner or exit flag: %s", describe(&cc))
	}
	assertPod(t, cc, p, true)
}

// TestWithoutNoSocketResets: before Linux 6.10, on a kernel where neither
// refused-connection fallback runs (no fentry, kfree_skb without the drop
// reason: arm64 before 5.17), a SYN to a closed port leaves no trace; the
// collector says refused connections are missing.
func TestWithoutNoSocketResets(t *testing.T) {
	p := newTestPod(t, true)
	c, r := degradedCollector(t, p, FeatureNoSocketResets, FeatureResetFentry, FeatureDropReasonNoSocket)
	m := missing(c)
	if !slices.Equal(m, []string{string(EvidenceRefused), string(EvidenceResetsWithoutSock)}) {
		t.Errorf("missing evidence %v, want refused_connections and resets_without_socket", m)
	}
	for _, s := range c.Evidence() {
		if s.Evidence == EvidenceRefused && !strings.Contains(s.Why, "refused connections cannot be seen on this node's kernel") {
			t.Errorf("why refused connections are missing: %q", s.Why)
		}
	}
	h, addr := serve(t, p, "exit", 0)
	conn, br := dial(t, addr)
	request(t, conn, br)
	closed := netip.AddrPortFrom(p.IP, 8081)
	if _, err := net.DialTimeout("tcp", closed.String(), 5*time.Second); err == nil {
		t.Fatal("dial of a closed port succeeded")
	}
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit })
	time.Sleep(2 * c.flush) // anything the refusal produced is delivered by now
	for _, e := range r.all() {
		if e.Kind == event.ConnRefused || e.Kind == event.RSTSent && e.Flags&event.FlagAtExit == 0 && e.PID == 0 {
			t.Errorf("no-socket reset reported in the degraded mode: %s", describe(&e))
		}
	}
}

// TestWithoutResetReason: without the reset reason a reset at exit with
// unread data is still recorded, but not as one with unread data.
func TestWithoutResetReason(t *testing.T) {
	p := newTestPod(t, true)
	c, r := degradedCollector(t, p, FeatureResetReason)
	if m := missing(c); !slices.Equal(m, []string{string(EvidenceUnreadDataResets)}) {
		t.Errorf("missing evidence %v, want unread_data_resets", m)
	}
	h := p.start(t, "hold", "DRAINSCOPE_HELPER_ADDR=0.0.0.0:8080")
	conn, _ := dial(t, netip.AddrPortFrom(p.IP, 8080))
	conn.Write([]byte("POST /pay HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n"))
	time.Sleep(100 * time.Millisecond)
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	rst := r.waitFor(t, "rst_sent", func(e *event.Event) bool {
		return e.Kind == event.RSTSent && e.Remote == localAddr(conn)
	})
	if rst.Reason != "" || rst.Flags.Has(event.FlagUnreadData) || !rst.Flags.Has(event.FlagAtExit) {
		t.Errorf("rst_sent without the reason feature: %s", describe(&rst))
	}
	assertPod(t, rst, p, true)
}

// TestProcessExitOnce: a process whose threads all exit at the same moment
// is reported as exiting once, with group_dead (Linux 6.16) and on the
// live-counter path older kernels take (whose duplicates the reader drops,
// TestDuplicateExitDropped; on 6.16+ the tracepoint comes right after the
// decrement, so the old path's race is rarely hit here).
func TestProcessExitOnce(t *testing.T) {
	const procs, threads = 6, 64
	for _, tc := range []struct {
		name    string
		without []Feature
	}{
		{"group_dead", nil},
		{"live_counter", []Feature{FeatureExitGroupDead}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPod(t, false)
			_, r := degradedCollector(t, p, tc.without...)
			var pids []int
			for i := 0; i < procs; i++ {
				h := p.start(t, "threads-exit", "DRAINSCOPE_HELPER_N="+strconv.Itoa(threads))
				syscall.Kill(h.Pid(), syscall.SIGTERM)
				h.Wait(t)
				pids = append(pids, h.Pid())
			}
			last := pids[len(pids)-1]
			r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit && e.PID == int32(last) })
			time.Sleep(2 * r.c.flush)
			dups := 0
			for _, pid := range pids {
				n := 0
				for _, e := range r.all() {
					if e.Kind == event.ProcessExit && e.PID == int32(pid) {
						n++
					}
				}
				if n == 0 {
					t.Errorf("process %d: no exit event", pid)
				}
				dups += max(n-1, 0)
				if n > 1 {
					t.Errorf("process %d with %d threads: %d exit events, want 1", pid, threads, n)
				}
			}
			t.Logf("%d duplicate exit events over %d processes of %d threads", dups, procs, threads)
		})
	}
}

// TestDuplicateExitDropped: on kernels without group_dead two threads of
// one process can each produce its exit record; the reader emits the
// first and counts the second. With group_dead every record is emitted.
func TestDuplicateExitDropped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		feats kernelFeatures
		want  int
	}{
		{"live_counter", kernelFeatures{}, 1},
		{"group_dead", kernelFeatures{FeatureExitGroupDead: true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Collector{
				resolver: newResolver(nil, nil, 1, slog.Default()),
				decoder:  decoder{node: "n"},
				clock:    newWallClock(time.Second),
				features: tc.feats,
			}
			var ts unix.Timespec
			unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
			emitted := 0
			for i, tid := range []uint32{101, 102} {
				raw := probesEvent{Kind: kindExit, Pid: 100, Tid: tid, TsNs: uint64(ts.Nano()) + uint64(i)*1000, Comm: comm("srv")}
				var scratch probesEvent
				var ev event.Event
				err := c.handle(rawBytes(&raw), &scratch, &ev)
				switch {
				case err == nil:
					emitted++
				case errors.Is(err, errDuplicateExit):
				default:
					t.Fatal(err)
				}
			}
			if emitted != tc.want {
				t.Errorf("%d exit events emitted for one process, want %d", emitted, tc.want)
			}
			// A later process that reuses the PID is a new exit.
			raw := probesEvent{Kind: kindExit, Pid: 100, TsNs: uint64(ts.Nano()) + uint64(2*time.Second)}
			var scratch probesEvent
			var ev event.Event
			if err := c.handle(rawBytes(&raw), &scratch, &ev); err != nil {
				t.Errorf("exit of a reused PID 2 s later: %v", err)
			}
		})
	}
}

// TestHostNetNSFromAPod: a collector in a network namespace of its own (an
// agent pod without hostNetwork) still knows the host's namespace, and
// does not take its own for it.
func TestHostNetNSFromAPod(t *testing.T) {
	p := newTestPod(t, true)
	// The test itself runs in the host's namespace.
	host, err := NetNSInode("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	// nsenter rather than ip netns exec, which remounts /sys and with it
	// the cgroup hierarchy a pod's agent sees.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.RequireBinary(t, "nsenter"), "--net=/run/netns/"+p.NetNS, self)
	cmd.Env = append(os.Environ(), helperEnv+"=hostnet")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var found, own uint64
	if _, err := fmt.Sscan(strings.TrimPrefix(string(out), "ready"), &found, &own); err != nil {
		t.Fatalf("helper said %q: %v", out, err)
	}
	if own != p.NetNSIno {
		t.Fatalf("helper ran in netns %d, want the pod's %d", own, p.NetNSIno)
	}
	if found != host {
		t.Errorf("host network namespace %d from inside a pod, want the host's %d", found, host)
	}
}

// chartCapabilities are the capabilities deploy/helm's agent DaemonSet
// keeps (every other one dropped): CAP_SYS_RESOURCE (24), CAP_PERFMON
// (38), CAP_BPF (39).
const chartCapabilities = 1<<24 | 1<<38 | 1<<39

// TestCaptureWithChartCapabilities runs the capture as the chart runs the
// agent: root with only CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE, no new
// privileges, in a network namespace of its own. Without
// CAP_DAC_READ_SEARCH cgroup ids cannot be opened by file handle, so they
// are resolved from the index of the tracked subtree: the programs load,
// the pod's events carry its UID and container from the cgroup path, and
// the whole host hierarchy is never walked.
func TestCaptureWithChartCapabilities(t *testing.T) {
	p := newTestPod(t, false)       // the workload
	agentPod := newTestPod(t, true) // only for its network namespace
	setpriv := testenv.RequireBinary(t, "setpriv")
	nsenter := testenv.RequireBinary(t, "nsenter")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// What this host lets root have at all: a sandbox may lack some.
	bnd := capBounding(t)
	want := uint64(chartCapabilities) & bnd
	if want&(1<<38|1<<39) != 1<<38|1<<39 {
		testenv.Unavailable(t, "this host withholds CAP_BPF or CAP_PERFMON from root")
	}
	if want != chartCapabilities {
		t.Logf("this host's bounding set %#x lacks some of the chart's %#x; running with %#x", bnd, uint64(chartCapabilities), want)
	}
	cmd := exec.Command(nsenter, "--net=/run/netns/"+agentPod.NetNS,
		setpriv, "--bounding-set=-all,+bpf,+perfmon,+sys_resource", "--inh-caps=-all", "--no-new-privs", self)
	cmd.Env = append(os.Environ(), helperEnv+"=capture", "DRAINSCOPE_HELPER_CGROUP="+filepath.Dir(filepath.Dir(p.PodCgroup)))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("capture ended before %s", what)
			}
			if strings.HasPrefix(l, "error") {
				t.Fatalf("capture: %s", l)
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s from the capture", what)
		}
		return ""
	}
	if l := next("ready"); l != "ready" {
		t.Fatalf("capture said %q", l)
	}
	if eff := capEffective(t, cmd.Process.Pid); eff != want {
		t.Errorf("capture runs with capabilities %#x, want %#x", eff, want)
	}

	h := p.start(t, "exit-on-term")
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	seen := map[string]bool{}
	for !seen["signal"] || !seen["process_exit"] {
		l := next("the workload's signal and exit")
		f := strings.Fields(l)
		if len(f) != 5 || f[0] != "event" || f[4] != strconv.Itoa(h.Pid()) {
			continue
		}
		if f[2] != p.UID || f[3] != p.ContainerID {
			t.Errorf("%s attributed to pod %s container %s, want %s %s", f[1], f[2], f[3], p.UID, p.ContainerID)
		}
		seen[f[1]] = true
	}
	cmd.Process.Signal(syscall.SIGTERM)
	var stats string
	for stats == "" {
		if l := next("stats"); strings.HasPrefix(l, "stats") {
			stats = l
		}
	}
	var walks, full, hostNet uint64
	if _, err := fmt.Sscanf(stats, "stats %d %d %d", &walks, &full, &hostNet); err != nil {
		t.Fatalf("%q: %v", stats, err)
	}
	if full != 0 || walks == 0 {
		t.Errorf("cgroup index built by %d walks, %d of the whole hierarchy; want the tracked subtree only", walks, full)
	}
	if own, _ := NetNSInode("/proc/self/ns/net"); hostNet != own {
		t.Errorf("capture in a pod's network namespace took %d for the host's, want %d", hostNet, own)
	}
	t.Logf("cgroup index: %d walks, %d of the whole hierarchy", walks, full)
}

func capBounding(t *testing.T) uint64 { return capField(t, os.Getpid(), "CapBnd") }

func capEffective(t *testing.T, pid int) uint64 { return capField(t, pid, "CapEff") }

func capField(t *testing.T, pid int, name string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}
