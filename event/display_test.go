package event

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile is what a name posted to ingest may hold: a title change, a
// screen clear, a CSI as a C1 control, a bidirectional override, a
// newline that would forge a line, a bell, invalid UTF-8.
const hostile = "web\x1b]0;owned\x07\x1b[2J\u009b31m\u202eevil\nFORGED\r\x00\xff"

func TestDisplay(t *testing.T) {
	got := Display(hostile, -1)
	for i := 0; i < len(got); i++ {
		if got[i] < 0x20 || got[i] == 0x7f {
			t.Fatalf("Display kept byte %#x: %q", got[i], got)
		}
	}
	for _, want := range []string{`\x1b]0;owned\x07`, `\x1b[2J`, `\u009b31m`, `\u202eevil`, `\x0aFORGED\x0d\x00`} {
		if !strings.Contains(got, want) {
			t.Errorf("Display(%q) = %q, want it to show %q", hostile, got, want)
		}
	}
	if !utf8.ValidString(got) {
		t.Errorf("Display gave invalid UTF-8: %q", got)
	}
	// Invisible characters and the separators that break a line as \n
	// does: a name that looks like another, a forged line.
	if got, want := Display("pay\u200bment\u200c\u200d\u2060\ufeff\u2028FORGED\u2029", -1),
		`pay\u200bment\u200c\u200d\u2060\ufeff\u2028FORGED\u2029`; got != want {
		t.Errorf("Display = %q, want %q", got, want)
	}
	if got := DisplayText("a\tb\nc\x1b", -1); got != "a\tb\nc\\x1b" {
		t.Errorf("DisplayText kept %q", got)
	}
	if s := "checkout"; Display(s, 0) != s {
		t.Errorf("Display changed a clean name")
	}
	long := strings.Repeat("s", 1<<20)
	if got := Display(long, 0); len(got) > MaxDisplay+32 || !strings.Contains(got, "(+") {
		t.Errorf("Display of 1 MiB: %d bytes, %.40q…", len(got), got)
	}
}

func TestDisplayWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewDisplayWriter(&b, 64)
	// Byte at a time and whole: the same guard.
	w.Write([]byte("service " + hostile + "\n"))
	for _, c := range []byte(hostile) {
		w.Write([]byte{c})
	}
	w.Write([]byte("\n" + strings.Repeat("é", 100) + "\nend\n"))
	out := b.String()
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			t.Fatalf("byte %#x at %d reached the output: %q", c, i, out)
		}
	}
	if strings.Contains(out, "\u009b") {
		t.Errorf("a C1 control written whole reached the output: %q", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len(line); n > 64+len("…(+9999 bytes)")+3 {
			t.Errorf("a line of %d bytes passed a 64-byte cap: %q", n, line)
		}
	}
	if !strings.Contains(out, "\nend\n") {
		t.Errorf("output %q", out)
	}
}
