package watcher

import (
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/drainscope/drainscope/event"
)

// What a container's spec gives it to stop. On a pod's deletion the
// kubelet runs each container's preStop hook, then sends SIGTERM, both
// within the pod's terminationGracePeriodSeconds: a hook that sleeps is
// how a pod keeps serving while the proxies stop sending it traffic, so
// container_started carries the hook's type, how long it waits when the
// spec says, and the grace period, for the analysis to weigh the
// endpoint's removal against.

// preStopHook is the type of a container's preStop handler
// (event.AttrPreStop).
type preStopHook uint8

const (
	hookNone preStopHook = iota
	hookSleep
	hookExec
	hookHTTP
	hookTCP
)

var hookNames = [...]string{hookNone: "", hookSleep: event.PreStopSleep, hookExec: event.PreStopExec,
	hookHTTP: event.PreStopHTTP, hookTCP: event.PreStopTCP}

func (h preStopHook) String() string { return hookNames[h] }

// stopSpec is what a container's preStop handler is and, when timed, the
// whole seconds it waits.
type stopSpec struct {
	hook  preStopHook
	timed bool
	sleep int32
}

// preStopOf reads c's preStop handler: the sleep action's seconds, or an
// exec's when its command is only a sleep ("sleep N", directly or as a
// shell's whole script). Any other command (a script that drains, signals
// or polls) waits for as long as it runs: not timed.
func preStopOf(c *corev1.Container) stopSpec {
	if c == nil || c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return stopSpec{}
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		s := stopSpec{hook: hookSleep}
		if h.Sleep.Seconds >= 0 && h.Sleep.Seconds <= math.MaxInt32 {
			s.timed, s.sleep = true, int32(h.Sleep.Seconds)
		}
		return s
	case h.Exec != nil:
		s := stopSpec{hook: hookExec}
		s.sleep, s.timed = execSleep(h.Exec.Command)
		return s
	case h.HTTPGet != nil:
		return stopSpec{hook: hookHTTP}
	case h.TCPSocket != nil:
		return stopSpec{hook: hookTCP}
	}
	return stopSpec{}
}

// execSleep tells whether cmd only sleeps, and for how many seconds:
// ["sleep", "N"], or a shell's -c whose script is "sleep N" (N whole
// seconds, optionally suffixed "s").
func execSleep(cmd []string) (int32, bool) {
	switch len(cmd) {
	case 2:
		if isSleep(cmd[0]) {
			return sleepSeconds(cmd[1])
		}
	case 3:
		if isShell(cmd[0]) && cmd[1] == "-c" {
			script := strings.TrimSpace(cmd[2])
			script = strings.TrimSpace(strings.TrimSuffix(script, ";"))
			if f := strings.Fields(script); len(f) == 2 && isSleep(f[0]) {
				return sleepSeconds(f[1])
			}
		}
	}
	return 0, false
}

// binName is a program named with or without /bin/ or /usr/bin/.
func binName(s string) string {
	if rest, ok := strings.CutPrefix(s, "/usr/bin/"); ok {
		return rest
	}
	if rest, ok := strings.CutPrefix(s, "/bin/"); ok {
		return rest
	}
	return s
}

func isSleep(s string) bool { return binName(s) == "sleep" }

func isShell(s string) bool {
	switch binName(s) {
	case "sh", "bash", "ash", "dash":
		return true
	}
	return false
}

// sleepSeconds parses sleep's operand when it is whole seconds: "N" or
// "Ns". A fraction, another unit or several operands are not read.
func sleepSeconds(s string) (int32, bool) {
	s = strings.TrimSuffix(s, "s")
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// stripLifecycle keeps of a container's lifecycle what preStopOf reads:
// its preStop handler's type, the sleep action's seconds, and an exec's
// command only when it is a sleep (a script can be long).
func stripLifecycle(l *corev1.Lifecycle) *corev1.Lifecycle {
	if l == nil || l.PreStop == nil {
		return nil
	}
	h := l.PreStop
	var out corev1.LifecycleHandler
	switch {
	case h.Sleep != nil:
		out.Sleep = &corev1.SleepAction{Seconds: h.Sleep.Seconds}
	case h.Exec != nil:
		out.Exec = &corev1.ExecAction{}
		if _, ok := execSleep(h.Exec.Command); ok {
			out.Exec.Command = h.Exec.Command
		}
	case h.HTTPGet != nil:
		out.HTTPGet = &corev1.HTTPGetAction{}
	case h.TCPSocket != nil:
		out.TCPSocket = &corev1.TCPSocketAction{}
	default:
		return nil
	}
	return &corev1.Lifecycle{PreStop: &out}
}
