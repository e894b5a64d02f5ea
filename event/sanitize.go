package event

import (
	"encoding/hex"
	"fmt"
	"io"
	"reflect"
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

// What a person reads: stored strings stay as they came (CleanString only
// makes them storable), and every text output — the report's text and
// markdown, the kubectl plugin, OTLP log records, Kubernetes Events, the
// web pages — shows them through Display, DisplayText or a DisplayWriter,
// so that no string from a log, a snapshot or the API can move a terminal's
// cursor, retitle its window, clear it or reorder what it shows.

// MaxDisplay bounds one name or value as Display shows it, and
// MaxDisplayLine one line a DisplayWriter writes; the rest is cut and
// counted.
const (
	MaxDisplay     = 256
	MaxDisplayLine = 4096
)

// displayEscape returns the escape that shows r, or "" when r shows as
// itself. keepLines keeps newline and tab.
func displayEscape(r rune, keepLines bool) string {
	switch {
	case (r == '\n' || r == '\t') && keepLines:
		return ""
	case r < 0x20 || r == 0x7f:
		return fmt.Sprintf(`\x%02x`, r)
	case r >= 0x80 && r <= 0x9f, // C1 controls: 0x9b is a CSI to some terminals
		r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, // bidirectional overrides
		r == 0x200e || r == 0x200f || r == 0x061c,
		// Invisible: zero-width space, joiners, word joiner, BOM; and the
		// line and paragraph separators, which break a line as \n does.
		r >= 0x200b && r <= 0x200d, r == 0x2060, r == 0xfeff, r == 0x2028, r == 0x2029:
		return fmt.Sprintf(`\u%04x`, r)
	}
	return ""
}

// Display returns s as one name or value may be shown on a line: every
// control character (newline and tab included), C1 control, bidirectional
// override, invisible character (\u200b, \ufeff) and line or paragraph
// separator (\u2028) written as an escape (\x1b, \u009b, \u202e),
// invalid UTF-8 as U+FFFD, and at most max bytes of s shown (0: MaxDisplay;
// negative: no bound), the rest counted ("…(+1048000 bytes)").
func Display(s string, max int) string {
	return display(s, max, false)
}

// DisplayText is Display for a text of several lines: newline and tab are
// kept, every other control character escaped.
func DisplayText(s string, max int) string {
	return display(s, max, true)
}

func display(s string, max int, keepLines bool) string {
	if max == 0 {
		max = MaxDisplay
	}
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || displayEscape(r, keepLines) != "" {
			clean = false
			break
		}
	}
	if clean && (max < 0 || len(s) <= max) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if max >= 0 && b.Len() >= max {
			fmt.Fprintf(&b, "…(+%d bytes)", len(s)-i)
			break
		}
		if e := displayEscape(r, keepLines); e != "" {
			b.WriteString(e)
		} else {
			b.WriteRune(r) // an invalid byte becomes U+FFFD
		}
	}
	return b.String()
}

// DisplayWriter writes text through to W with every byte below 0x20 other
// than newline and tab, DEL, and every C1 control written as an escape, and
// each line cut at MaxLine bytes (0: no bound) with what was cut counted.
// It is the last guard of a text output: whatever a renderer forgot to pass
// through Display cannot reach the terminal raw. A write that ends in the
// first byte of a C1 control's two is held until the next.
type DisplayWriter struct {
	W       io.Writer
	MaxLine int

	line int  // bytes of the current line written
	cut  int  // bytes of the current line cut
	held bool // the last write ended in 0xc2
	buf  []byte
}

// NewDisplayWriter returns a DisplayWriter on w.
func NewDisplayWriter(w io.Writer, maxLine int) *DisplayWriter {
	return &DisplayWriter{W: w, MaxLine: maxLine}
}

// Write implements io.Writer; it reports len(p) written when W took all
// of what p became.
func (d *DisplayWriter) Write(p []byte) (int, error) {
	n := len(p)
	if d.held {
		p = append([]byte{0xc2}, p...)
		d.held = false
	}
	if len(p) > 0 && p[len(p)-1] == 0xc2 {
		p, d.held = p[:len(p)-1], true
	}
	out := d.buf[:0]
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\n' {
			if d.cut > 0 {
				out = fmt.Appendf(out, "…(+%d bytes)", d.cut)
			}
			out = append(out, c)
			d.line, d.cut = 0, 0
			continue
		}
		var piece []byte
		switch {
		case c == '\t':
			piece = []byte{c}
		case c < 0x20 || c == 0x7f:
			piece = fmt.Appendf(nil, `\x%02x`, c)
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			piece = fmt.Appendf(nil, `\u%04x`, p[i+1])
			i++
		case c == 0xe2 && i+2 < len(p) && (p[i+1] == 0x80 && p[i+2] >= 0xaa && p[i+2] <= 0xae ||
			p[i+1] == 0x81 && p[i+2] >= 0xa6 && p[i+2] <= 0xa9): // bidirectional overrides
			r, _ := utf8.DecodeRune(p[i : i+3])
			piece = fmt.Appendf(nil, `\u%04x`, r)
			i += 2
		default:
			piece = []byte{c}
		}
		// A line is cut at a character's start, never inside one.
		if d.MaxLine > 0 && (d.cut > 0 || d.line+len(piece) > d.MaxLine && c&0xc0 != 0x80) {
			d.cut += len(piece)
			continue
		}
		out = append(out, piece...)
		d.line += len(piece)
	}
	d.buf = out
	if _, err := d.W.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// DisplayFields passes every string v reaches (v a pointer; through
// structs, pointers, slices, arrays and map values) through Display
// without a length bound, in place: for an answer decoded from the API that
// a text output then prints field by field.
func DisplayFields(v any) {
	displayValue(reflect.ValueOf(v))
}

func displayValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			displayValue(v.Elem())
		}
	case reflect.String:
		if v.CanSet() {
			if s := v.String(); Display(s, -1) != s {
				v.SetString(Display(s, -1))
			}
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				displayValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			displayValue(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			displayValue(e)
			v.SetMapIndex(k, e)
		}
	}
}
