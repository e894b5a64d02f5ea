package store

// interner hands out one copy of each distinct string a scan reads. The
// rows of a window repeat the same node, namespace, pod, workload, kind
// and attribute names, and an analysis keeps many of its events: a string
// per column per row was a sixth of what a 5,000-node report allocated,
// and each page of it was one more the kernel had to fault in
// (docs/scale.md).
type interner struct {
	m map[string]string
}

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
