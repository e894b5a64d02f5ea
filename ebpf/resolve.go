package ebpf

import (
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"unsafe"

	"github.com/drainscope/drainscope/event"
)

// PodLookup is where the collector takes its pod list from: the watcher
// implements it from its informer cache, the lab from the pods it runs.
// Implementations must be safe for concurrent use and should not allocate
// on a hit: the reader calls them for every event.
type PodLookup interface {
	// PodByUID returns the pod with this UID (as in metadata.uid) and its
	// owning workload.
	PodByUID(uid string) (event.PodRef, event.Workload, bool)
	// PodByIP returns the pod on this node whose pod IP is ip. Host-network
	// pods share the node's addresses and must not be returned.
	PodByIP(ip netip.Addr) (event.PodRef, event.Workload, bool)
}

// NetNSLookup may also be implemented by a PodLookup that knows each pod's
// network namespace inode (the lab does, it creates them). Without it the
// collector learns namespaces from the processes it sees in pod cgroups.
type NetNSLookup interface {
	PodByNetNS(ino uint64) (event.PodRef, event.Workload, bool)
}

// resolver attributes events to pods. It is used only by the reader
// goroutine, so its caches need no locks; a hit allocates nothing.
type resolver struct {
	pods     PodLookup
	netnsPod NetNSLookup
	cgroups  *cgroupHierarchy
	hostNet  uint64 // the node's own network namespace: never a pod's
	log      *slog.Logger

	byCgroup map[uint64]CgroupPod // negative entries have empty PodUID
	// pending: ids not in the cgroup index when first seen, with the index
	// generation then. They are looked up again (cheaply: at most one
	// rebuild per reindexInterval) until the index has been rebuilt twice
	// since, and are then given up on.
	pending map[uint64]uint64
	byNetNS map[uint64]netnsEntry
	misses  uint64 // cgroup ids that could not be resolved to a path
	// withCID caches, per container ID, the events' shared Attrs plus
	// container_id, so that a hit allocates nothing; base is the shared
	// map each was built from (the clock's, replaced when resampled).
	withCID map[string]cidAttrs
}

type cidAttrs struct {
	base  unsafe.Pointer
	attrs map[string]string
}

type netnsEntry struct {
	uid      string
	conflict bool // processes of two pods seen in it: host network, do not use
}

const maxCacheEntries = 1 << 16

func newResolver(pods PodLookup, cg *cgroupHierarchy, hostNet uint64, log *slog.Logger) *resolver {
	r := &resolver{
		pods:     pods,
		cgroups:  cg,
		hostNet:  hostNet,
		log:      log,
		byCgroup: make(map[uint64]CgroupPod),
		byNetNS:  make(map[uint64]netnsEntry),
		pending:  make(map[uint64]uint64),
		withCID:  make(map[string]cidAttrs),
	}
	if n, ok := pods.(NetNSLookup); ok {
		r.netnsPod = n
	}
	return r
}

// cgroupPod returns what the cgroup's path says, caching the answer.
func (r *resolver) cgroupPod(id uint64) CgroupPod {
	if p, ok := r.byCgroup[id]; ok {
		return p
	}
	var p CgroupPod
	if r.cgroups != nil {
		path, err := r.cgroups.Path(id)
		switch {
		case errors.Is(err, errNotIndexed):
			gen := r.cgroups.generation()
			first, ok := r.pending[id]
			if !ok {
				if len(r.pending) >= maxCacheEntries {
					clear(r.pending)
				}
				r.pending[id] = gen
				return p
			}
			if gen < first+2 {
				return p // not cached: looked up again on its next event
			}
			delete(r.pending, id)
			r.misses++
			r.log.Debug("cgroup not resolved", "cgroup_id", id, "err", err)
		case err != nil:
			delete(r.pending, id)
			r.misses++
			r.log.Debug("cgroup not resolved", "cgroup_id", id, "err", err)
		default:
			delete(r.pending, id)
			p, _ = ParseCgroupPath(path)
		}
	}
	if len(r.byCgroup) >= maxCacheEntries {
		clear(r.byCgroup)
	}
	r.byCgroup[id] = p
	return p
}

// learnNetNS remembers that a process of pod uid lives in netns.
func (r *resolver) learnNetNS(netns uint64, uid string) {
	if netns == 0 || netns == r.hostNet {
		return
	}
	e, ok := r.byNetNS[netns]
	switch {
	case !ok:
		if len(r.byNetNS) >= maxCacheEntries {
			clear(r.byNetNS)
		}
		r.byNetNS[netns] = netnsEntry{uid: uid}
	case e.uid != uid && !e.conflict:
		r.byNetNS[netns] = netnsEntry{uid: e.uid, conflict: true}
	}
}

// Resolve fills e.Pod and e.Workload: first from the cgroup (the pod UID
// and container are in its path), then from the network namespace, then
// from the local address.
func (r *resolver) Resolve(e *event.Event, cgroupID, netns uint64) {
	if cgroupID != 0 {
		if cp := r.cgroupPod(cgroupID); cp.PodUID != "" {
			r.setPod(e, cp.PodUID, cp.ContainerID)
			r.learnNetNS(netns, cp.PodUID)
			return
		}
	}
	if netns != 0 && netns != r.hostNet {
		if n, ok := r.byNetNS[netns]; ok && !n.conflict {
			r.setPod(e, n.uid, "")
			return
		}
		if r.netnsPod != nil {
			if ref, wl, ok := r.netnsPod.PodByNetNS(netns); ok {
				e.Pod, e.Workload = ref, wl
				return
			}
		}
	}
	if r.pods != nil {
		ip := e.Local.Addr()
		if ip.IsValid() && !ip.IsLoopback() && !ip.IsUnspecified() {
			if ref, wl, ok := r.pods.PodByIP(ip); ok {
				e.Pod, e.Workload = ref, wl
			}
		}
	}
}

func (r *resolver) setPod(e *event.Event, uid, container string) {
	if container != "" {
		e.Attrs = r.containerAttrs(e.Attrs, container)
	}
	if r.pods != nil {
		if ref, wl, ok := r.pods.PodByUID(uid); ok {
			e.Pod, e.Workload = ref, wl
			e.Pod.UID = uid
			if container != "" {
				e.Pod.Container = container
			}
			return
		}
	}
	e.Pod = event.PodRef{UID: uid, Container: container}
}

// containerAttrs returns base (the events' shared, read-only Attrs) with
// event.AttrContainerID set to id: the container instance a kernel event
// happened in, as the cgroup path names it, which container_started and
// container_terminated name too.
func (r *resolver) containerAttrs(base map[string]string, id string) map[string]string {
	bp := reflect.ValueOf(base).UnsafePointer()
	if c, ok := r.withCID[id]; ok && c.base == bp {
		return c.attrs
	}
	m := make(map[string]string, len(base)+1)
	maps.Copy(m, base)
	m[event.AttrContainerID] = id
	if len(r.withCID) >= maxCacheEntries {
		clear(r.withCID)
	}
	r.withCID[id] = cidAttrs{base: bp, attrs: m}
	return m
}
