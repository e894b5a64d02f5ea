package analysis

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
)

var signalNames = map[int32]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 15: "SIGTERM",
}

func signalName(s int32) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

// Describe renders one event as a short phrase for timelines and reports.
func Describe(e *event.Event) string {
	switch e.Kind {
	case event.PodCreated:
		return "pod created"
	case event.PodDeletion:
		return "deletion observed (grace " + fmtDur(e.Duration) + ")"
	case event.PodReady:
		return "pod ready"
	case event.PodNotReady:
		return "pod not ready"
	case event.ContainerTerminated:
		s := "container terminated"
		if e.Reason != "" {
			s += " " + e.Reason
		}
		if e.Signal != 0 {
			return s + " by " + signalName(e.Signal)
		}
		return s + fmt.Sprintf(" code %d", e.Code)
	case event.EndpointAdded, event.EndpointReady, event.EndpointNotReady, event.EndpointServing,
		event.EndpointNotServing, event.EndpointTerminating, event.EndpointRemoved:
		s := strings.ReplaceAll(string(e.Kind), "_", " ")
		if e.Service != "" {
			s += " in " + e.Service
		}
		if e.Node != "" {
			s += " (seen on " + e.Node + ")"
		}
		return s
	case event.DataplaneEndpointAdded, event.DataplaneEndpointRemoved:
		verb := "stopped"
		if e.Kind == event.DataplaneEndpointAdded {
			verb = "began"
		}
		s := fmt.Sprintf("%s's proxy rules %s sending %s to %s", NodeName(e.Node), verb, serviceKey(e.Pod.Namespace, e.Service), e.Local)
		if p := e.Attrs[event.AttrProxy]; p != "" {
			s += " (" + p + ")"
		}
		return s
	case event.ServiceChanged:
		s := "Service " + e.Pod.Namespace + "/" + e.Service + " " + e.Reason
		if ips := e.Attrs[event.AttrClusterIPs]; ips != "" {
			s += " (" + ips + ")"
		}
		return s
	case event.WorkloadChanged:
		return e.Workload.String() + " " + e.Reason
	case event.KubeletEvent:
		s := "the kubelet reported " + e.Reason
		if e.Pod.Container != "" {
			s += " for container " + e.Pod.Container
		}
		if m := e.Attrs[event.AttrMessage]; m != "" {
			s += ": " + m
		}
		return s
	case event.NodeInfo:
		return "node " + NodeName(e.Node) + " runs kubelet " + e.Attrs[event.AttrKubeletVersion] + " (API server " + e.Attrs[event.AttrAPIServerVersion] + ")"
	case event.ProxyState:
		s := "proxy " + e.Pod.Container + " " + e.Reason
		if n := e.Attrs[event.AttrConnections]; n != "" {
			s += " (" + n + " still open)"
		}
		return s + " (its log)"
	case event.Signal:
		return fmt.Sprintf("%s from %s to %s", signalName(e.Signal), ProcName(e.PeerComm, e.PeerPID), ProcName(e.Comm, e.PID))
	case event.ProcessExit:
		if e.Signal != 0 {
			return fmt.Sprintf("%s exited by %s", ProcName(e.Comm, e.PID), signalName(e.Signal))
		}
		return fmt.Sprintf("%s exited with code %d", ProcName(e.Comm, e.PID), e.Code)
	case event.ListenerClosed:
		return "listener " + addr(e.Local) + " closed" + atExit(e.Flags)
	case event.ConnClosed:
		who := "app"
		if e.Reason == "peer" {
			who = "peer"
		}
		return fmt.Sprintf("connection %s ↔ %s closed by %s%s", addr(e.Local), addr(e.Remote), who, atExit(e.Flags))
	case event.RSTSent:
		s := fmt.Sprintf("RST sent %s → %s", addr(e.Local), addr(e.Remote))
		if e.Reason != "" {
			s += " (" + e.Reason + ")"
		}
		if e.Flags.Has(event.FlagUnreadData) {
			s += " with unread data"
		}
		return s + atExit(e.Flags)
	case event.RSTReceived:
		return fmt.Sprintf("RST received %s ← %s", addr(e.Local), addr(e.Remote))
	case event.ConnRefused:
		return fmt.Sprintf("connection from %s refused on %s", addr(e.Remote), addr(e.Local))
	case event.ClientFailure:
		s := "client failure " + e.Reason
		if e.Reason == event.FailStatus {
			s += fmt.Sprintf(" %d", e.Code)
		}
		if e.Flags.Has(event.FlagInferred) {
			s = "inferred " + s
		}
		if e.Local.IsValid() {
			s += " from " + e.Local.String()
		}
		if b := e.Attrs[event.AttrBackend]; b != "" {
			s += " via " + b
		} else if e.Remote.IsValid() {
			s += " to " + e.Remote.String()
		}
		return s
	}
	return string(e.Kind)
}

func atExit(f event.Flags) string {
	if f.Has(event.FlagAtExit) {
		return " at exit"
	}
	return ""
}

func addr[T interface {
	IsValid() bool
	String() string
}](a T) string {
	if !a.IsValid() {
		return "?"
	}
	return a.String()
}

// fmtDur renders nanoseconds for people: "3.0 s", "412 ms", "0.35 ms".
func fmtDur(ns int64) string {
	neg := ns < 0
	a := math.Abs(float64(ns))
	var s string
	switch {
	case a >= 60e9:
		s = (time.Duration(a) / time.Second * time.Second).String()
	case a >= 1e9:
		s = strconv.FormatFloat(a/1e9, 'f', 3, 64)
		s = strings.TrimRight(s, "0")
		if strings.HasSuffix(s, ".") {
			s += "0"
		}
		s += " s"
	case a >= 1e6:
		s = strconv.FormatFloat(a/1e6, 'f', 0, 64) + " ms"
	case a == 0:
		s = "0 ms"
	default:
		s = strconv.FormatFloat(a/1e6, 'f', 2, 64) + " ms"
	}
	if neg {
		return "-" + s
	}
	return s
}

// FormatDuration renders nanoseconds for people, as every report and page
// shows them: "3.0 s", "412 ms", "0.35 ms", "2m30s".
func FormatDuration(ns int64) string { return fmtDur(ns) }

// FormatOffset renders a signed offset: "+3.0 s", "-412 ms".
func FormatOffset(ns int64) string { return fmtOffset(ns) }

// fmtOffset renders a signed offset: "+3.0 s", "-412 ms".
func fmtOffset(ns int64) string {
	if ns < 0 {
		return fmtDur(ns)
	}
	return "+" + fmtDur(ns)
}

// ProcName names a process by its command and pid, either when the other
// is unknown, "?" when both are.
func ProcName(comm string, pid int32) string {
	switch {
	case comm != "" && pid != 0:
		return fmt.Sprintf("%s (pid %d)", comm, pid)
	case comm != "":
		return comm
	case pid != 0:
		return fmt.Sprintf("pid %d", pid)
	}
	return "?"
}
