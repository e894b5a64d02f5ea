package store

// interner hands out one copy of each distinct string a scan reads. The
// rows of a window repeat the same node, namespace, pod, workload, kind
// and attribute names, and an analysis keeps many of its events: a string
// per column per row was a sixth of what a 5,000-node report allocated,
// and each page of it was one more the kernel had to fault in
// (docs/scale.md).
type interner struct {
	m map[string]string
	// attrs are recent rows' attribute maps by their bytes. Every node's
	// proxy records one endpoint's rule change with the same attributes
	// (kube-proxy names an endpoint's chain by its Service, port and
	// address, the same on every node), within a second or two of the
	// others: a 5,000-node window holds a map per node and change.
	attrs map[string]map[string]string
}

// maxSharedAttrs bounds the attribute maps kept for sharing; past it the
// table starts again. Rows with equal attributes come close together, and
// most other rows' attributes are their own (timestamps, container IDs):
// a small table finds the first without holding on to the second.
const maxSharedAttrs = 1 << 12

// maxInterned bounds the table: past it, it starts again empty, so that
// a long scan of ever-new strings (pod UIDs) cannot grow it without end.
const maxInterned = 1 << 16

// str returns b as a string, the same one for the same bytes while they
// stay in the table; a nil interner makes a new one each time. b may be
// the driver's buffer: it is not kept.
func (in *interner) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if in == nil {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok { // the conversion does not allocate
		return s
	}
	if in.m == nil {
		in.m = make(map[string]string, 1024)
	} else if len(in.m) >= maxInterned {
		clear(in.m)
	}
	s := string(b)
	in.m[s] = s
	return s
}

// sharedAttrs returns the map decoded earlier from the same bytes, while
// it stays in the table. Events of a scan may then share one Attrs map:
// the store's callers read it and never write to it (event.Clone copies
// it).
func (in *interner) sharedAttrs(b []byte) (map[string]string, bool) {
	if in == nil {
		return nil, false
	}
	m, ok := in.attrs[string(b)] // the conversion does not allocate
	return m, ok
}

// shareAttrs keeps m as the map of b's bytes.
func (in *interner) shareAttrs(b []byte, m map[string]string) {
	if in == nil {
		return
	}
	if in.attrs == nil {
		in.attrs = make(map[string]map[string]string, 256)
	} else if len(in.attrs) >= maxSharedAttrs {
		clear(in.attrs)
	}
	in.attrs[string(b)] = m
}
