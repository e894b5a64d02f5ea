package event

import (
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// Attributes that keep a command name's original bytes, in hex, when they
// were not valid UTF-8. The kernel cuts a name at 15 bytes, which can split
// a multi-byte character; the stored name then ends in U+FFFD, and these
// keep what the kernel said, for matching it against the process.
const (
	AttrCommRaw     = "comm_raw"
	AttrPeerCommRaw = "peer_comm_raw"
)

// CleanString returns s as a store can keep it: valid UTF-8 without NUL
// bytes (Postgres text and jsonb refuse both). Each invalid sequence and
// each NUL becomes U+FFFD. ok reports that s was clean already, in which
// case s is returned as it is, without allocating.
func CleanString(s string) (clean string, ok bool) {
	if isClean(s) {
		return s, true
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD"), false
}

// isClean reports whether s is valid UTF-8 without NUL. Event strings are
// short and almost always ASCII: eight bytes at a time settle those, at a
// fraction of the cost of a validity check and a NUL search.
func isClean(s string) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if (w|(w-lo)&^w)&hi != 0 { // a byte ≥ 0x80, or a zero byte
			break
		}
	}
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return false
		case c >= utf8.RuneSelf:
			rest := s[i:] // starts on a character boundary: all before is ASCII
			return utf8.ValidString(rest) && strings.IndexByte(rest, 0) < 0
		}
	}
	return true
}

// Sanitize makes every string of e valid UTF-8 without NUL bytes (see
// CleanString), so that no store refuses the event for its text. A command
// name that changed keeps its original bytes in AttrCommRaw or
// AttrPeerCommRaw. Attrs is replaced by a copy when anything in it changes,
// never changed in place: producers share one map across many events.
// Seal calls it, so every sealed event is clean.
func (e *Event) Sanitize() {
	for _, p := range [...]*string{&e.Node, &e.Pod.Namespace, &e.Pod.Name, &e.Pod.UID,
		&e.Pod.Container, &e.Workload.Kind, &e.Workload.Name, &e.Service, &e.Slice, &e.Reason} {
		if !isClean(*p) {
			*p, _ = CleanString(*p)
		}
	}
	if !isClean(string(e.Kind)) || !isClean(string(e.Source)) {
		kind, _ := CleanString(string(e.Kind))
		source, _ := CleanString(string(e.Source))
		e.Kind, e.Source = Kind(kind), Source(source)
	}

	var raw [2]string // hex of the command names that changed
	for i, p := range [...]*string{&e.Comm, &e.PeerComm} {
		if !isClean(*p) {
			raw[i] = hex.EncodeToString([]byte(*p))
			*p, _ = CleanString(*p)
		}
	}
	dirty := raw[0] != "" || raw[1] != ""
	for k, v := range e.Attrs {
		if !isClean(k) || !isClean(v) {
			dirty = true
			break
		}
	}
	if !dirty {
		return
	}
	attrs := make(map[string]string, len(e.Attrs)+2)
	for k, v := range e.Attrs {
		k, _ = CleanString(k)
		v, _ = CleanString(v)
		attrs[k] = v
	}
	if raw[0] != "" {
		attrs[AttrCommRaw] = raw[0]
	}
	if raw[1] != "" {
		attrs[AttrPeerCommRaw] = raw[1]
	}
	e.Attrs = attrs
}
