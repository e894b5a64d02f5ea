package event

import "fmt"

// The longest each string of an event may be, in bytes, as stored (after
// Sanitize). Names follow Kubernetes' own limits: a namespace is a DNS
// label (63), a pod, node, workload, Service or EndpointSlice a DNS
// subdomain at most (253; an envoy cluster kept as the Service too). A
// container is a DNS label too, but a kernel event names it by the
// runtime's container ID from the cgroup path (64 hex digits for
// containerd, CRI-O and Docker): 253. A UID is 36 bytes; the bound leaves
// room for other forms.
// The stores index the UID, the namespace, the workload and the entity key
// (Entity: namespace, Service, node, address, proxy), and Postgres refuses
// a B-tree row past about 2.7 KB, so these bounds keep every index row of
// one event well inside it. Bounds is the same table, by field name.
const (
	MaxNodeLen      = 253
	MaxNamespaceLen = 63
	MaxPodNameLen   = 253
	MaxUIDLen       = 128
	MaxContainerLen = 253
	MaxWorkloadKind = 63
	MaxWorkloadName = 253
	// A command name is 15 bytes in the kernel; an invalid byte sanitized
	// takes 3.
	MaxCommLen    = 64
	MaxServiceLen = 253
	MaxSliceLen   = 253
	MaxReasonLen  = 1024
	MaxKindLen    = 64
	MaxSourceLen  = 32

	// Attributes are bounded only where events come from a party that is
	// not trusted with them (CheckBounds, which the server's relay applies
	// to agents' events): a client log's error text can be long, and the
	// importers bound their lines themselves.
	MaxAttrs        = 64
	MaxAttrKeyLen   = 128
	MaxAttrValueLen = 16 << 10
	MaxAttrsLen     = 64 << 10 // keys and values of one event together
	// MaxProxyLen bounds Attrs[proxy], which is part of a dataplane
	// event's entity key and so of an index row.
	MaxProxyLen = 63
)

// Bound is one string field's bound: Field as Validate and CheckBounds
// name it.
type Bound struct {
	Field string
	Max   int
}

// Bounds lists every string field's bound, in the order they are checked.
var Bounds = []Bound{
	{"kind", MaxKindLen}, {"node", MaxNodeLen}, {"source", MaxSourceLen},
	{"pod.namespace", MaxNamespaceLen}, {"pod.name", MaxPodNameLen}, {"pod.uid", MaxUIDLen},
	{"pod.container", MaxContainerLen}, {"workload.kind", MaxWorkloadKind}, {"workload.name", MaxWorkloadName},
	{"comm", MaxCommLen}, {"peer_comm", MaxCommLen}, {"service", MaxServiceLen}, {"slice", MaxSliceLen},
	{"reason", MaxReasonLen},
}

// stringFields returns e's string fields in the order of Bounds.
func (e *Event) stringFields() [14]string {
	return [...]string{string(e.Kind), e.Node, string(e.Source), e.Pod.Namespace, e.Pod.Name, e.Pod.UID,
		e.Pod.Container, e.Workload.Kind, e.Workload.Name, e.Comm, e.PeerComm, e.Service, e.Slice, e.Reason}
}

// checkFields reports the first string field of e past its bound.
func (e *Event) checkFields() error {
	for i, s := range e.stringFields() {
		if b := Bounds[i]; len(s) > b.Max {
			return fmt.Errorf("field %s: %d bytes, past its bound of %d", b.Field, len(s), b.Max)
		}
	}
	return nil
}

// CheckBounds reports the first string of e past its bound, naming the
// field: every field of Bounds, as Validate checks them, and the
// attributes (at most MaxAttrs, each key MaxAttrKeyLen, each value
// MaxAttrValueLen, all together MaxAttrsLen, Attrs[proxy] MaxProxyLen).
// A party whose events are taken without trust is held to it before
// anything else is done with them.
func (e *Event) CheckBounds() error {
	if err := e.checkFields(); err != nil {
		return err
	}
	if len(e.Attrs) > MaxAttrs {
		return fmt.Errorf("field attrs: %d attributes, past the bound of %d", len(e.Attrs), MaxAttrs)
	}
	total := 0
	for k, v := range e.Attrs {
		max := MaxAttrValueLen
		if k == AttrProxy {
			max = MaxProxyLen
		}
		switch {
		case len(k) > MaxAttrKeyLen:
			return fmt.Errorf("field attrs: a key of %d bytes, past the bound of %d", len(k), MaxAttrKeyLen)
		case len(v) > max:
			return fmt.Errorf("field attrs[%s]: %d bytes, past its bound of %d", k, len(v), max)
		}
		total += len(k) + len(v)
	}
	if total > MaxAttrsLen {
		return fmt.Errorf("field attrs: %d bytes in all, past the bound of %d", total, MaxAttrsLen)
	}
	return nil
}
