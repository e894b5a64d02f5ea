package fleet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, what /proc/PID/stat counts CPU time in: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// cpuOf is the CPU time (user+system) the processes pids have used.
func cpuOf(pids ...int) time.Duration { return statCPU(pids, false) }

// postgresCPU is the CPU time of the Postgres processes running now and of
// those they have reaped: a backend exits with its connection, and a step
// that opened one (a report) would otherwise show none of its work.
func postgresCPU() time.Duration { return statCPU(pidsOf("postgres", ""), true) }

// statCPU sums the processes' utime and stime, with reaped also their
// reaped children's (cutime, cstime).
func statCPU(pids []int, reaped bool) time.Duration {
	n := 2 // utime, stime
	if reaped {
		n = 4 // and cutime, cstime
	}
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// The command may hold spaces: fields count from after its ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 15 {
			continue
		}
		for _, v := range f[11 : 11+n] {
			t, _ := strconv.ParseInt(v, 10, 64)
			ticks += t
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// machineIdle is the time the machine's CPUs have been idle or waiting
// for I/O, summed over the CPUs, and how many CPUs /proc/stat counts; 0
// and 0 when it cannot be read.
func machineIdle() (time.Duration, int) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	var idle time.Duration
	cpus := 0
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 6 && f[0] == "cpu":
			var ticks int64
			for _, v := range f[4:6] { // idle, iowait
				t, _ := strconv.ParseInt(v, 10, 64)
				ticks += t
			}
			idle = time.Duration(ticks) * time.Second / clockTicks
		case len(f) > 0 && strings.HasPrefix(f[0], "cpu"):
			cpus++
		}
	}
	return idle, cpus
}

// rssOf is VmRSS of pid, in bytes.
func rssOf(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// pidsOf lists the processes whose command is comm (and, when in is not
// empty, whose command line holds in): Postgres's backends, the control
// plane's etcd and kube-apiserver.
func pidsOf(comm, in string) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		c, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		if in != "" {
			cl, err := os.ReadFile(d + "/cmdline")
			if err != nil || !bytes.Contains(cl, []byte(in)) {
				continue
			}
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		out = append(out, pid)
	}
	return out
}

// loadAvg is /proc/loadavg's first three figures.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuMeter reads what the processes beside a timed step used of the
// machine's cores meanwhile: a server, kube-apiserver with etcd, Postgres
// and the simulation itself; and how long the cores sat idle.
type cpuMeter struct {
	cpu   [4]func() time.Duration
	t0    [4]time.Duration
	idle0 time.Duration
}

func meter(server int, cl *Cluster) *cpuMeter {
	api, self := cl.apiPIDs(), os.Getpid()
	m := &cpuMeter{cpu: [4]func() time.Duration{
		func() time.Duration { return cpuOf(server) },
		func() time.Duration { return cpuOf(api...) },
		postgresCPU,
		func() time.Duration { return cpuOf(self) },
	}}
	for i, c := range m.cpu {
		m.t0[i] = c()
	}
	m.idle0, _ = machineIdle()
	return m
}

func (m *cpuMeter) String() string {
	var d [4]time.Duration
	for i, c := range m.cpu {
		d[i] = (c() - m.t0[i]).Round(time.Millisecond)
	}
	idle, cpus := machineIdle()
	return fmt.Sprintf("the server %v, kube-apiserver and etcd %v, Postgres %v, the simulation %v; the %d CPUs idle %v",
		d[0], d[1], d[2], d[3], cpus, (idle - m.idle0).Round(time.Millisecond))
}

// samples keeps durations for their quantiles.
type samples struct {
	mu sync.Mutex
	v  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.v = append(s.v, d)
	s.mu.Unlock()
}

// quantile is the q-quantile (0–1) of what was added, 0 for none.
func (s *samples) quantile(q float64) time.Duration {
	s.mu.Lock()
	v := slices.Clone(s.v)
	s.mu.Unlock()
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[int(q*float64(len(v)-1))]
}

func (s *samples) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.v)
}
