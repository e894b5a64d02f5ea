package textreport

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/analysis"
)

// bigResult is a report far longer than one chunk, whose names hold
// controls, a C1 control and a bidirectional override for the display
// writer to escape, and one name longer than a display line.
func bigResult() *analysis.Result {
	r := &analysis.Result{From: 1_796_000_000e9, To: 1_796_000_600e9, Scope: "shop/Deployment/checkout"}
	for i := range 3000 {
		tl := analysis.PodTimeline{Workload: "Deployment/checkout", Kind: "Deployment", Name: "checkout", Node: fmt.Sprintf("node-%04d", i)}
		tl.Pod.Namespace, tl.Pod.UID = "shop", fmt.Sprintf("uid-%d", i)
		tl.Pod.Name = fmt.Sprintf("checkout-%d\x1b[31m\u0085\u202e", i)
		if i == 7 {
			tl.Pod.Name = strings.Repeat("n", 3000)
		}
		tl.Deletion = r.From + int64(i)*1e8
		r.Timelines = append(r.Timelines, tl)
	}
	return r
}

// A report written in chunks is byte for byte the one written in a line
// at a time, and so the one written whole: the chunks cut nothing the
// display writer sees.
func TestLineWriterChunks(t *testing.T) {
	r := bigResult()
	chunk := lineChunk
	defer func() { lineChunk = chunk }()
	for _, write := range []struct {
		name, escaped string
		fn            func(*bytes.Buffer, *analysis.Result) error
	}{
		{"text", `\x1b[31m\u0085\u202e`, func(b *bytes.Buffer, r *analysis.Result) error { return WriteText(b, r) }},
		// Markdown's source escapes the backslashes and the bracket.
		{"markdown", `\\x1b\[31m\\u0085\\u202e`, func(b *bytes.Buffer, r *analysis.Result) error { return WriteMarkdown(b, r) }},
	} {
		// In chunks (the default size), a line at a time, whole.
		var chunked, lines, whole bytes.Buffer
		for _, c := range []struct {
			size int
			out  *bytes.Buffer
		}{{chunk, &chunked}, {1, &lines}, {1 << 30, &whole}} {
			lineChunk = c.size
			if err := write.fn(c.out, r); err != nil {
				t.Fatal(err)
			}
		}
		if chunked.Len() < 4*chunk {
			t.Fatalf("%s: the report is %d bytes, not several chunks of %d", write.name, chunked.Len(), chunk)
		}
		if !bytes.Equal(chunked.Bytes(), lines.Bytes()) || !bytes.Equal(chunked.Bytes(), whole.Bytes()) {
			t.Errorf("%s: chunked %d bytes, line by line %d, whole %d: not the same", write.name, chunked.Len(), lines.Len(), whole.Len())
		}
		if bytes.ContainsAny(chunked.Bytes(), "\x1b\u0085\u202e") || !bytes.Contains(chunked.Bytes(), []byte(write.escaped)) {
			t.Errorf("%s: a control reached the output raw, or was not escaped", write.name)
		}
	}
}

type failingWriter struct{ writes int }

func (f *failingWriter) Write(p []byte) (int, error) {
	f.writes++
	return 0, errors.New("disk full")
}

// The first write error is returned, and nothing more is written after it.
func TestLineWriterError(t *testing.T) {
	f := &failingWriter{}
	if err := WriteText(f, bigResult()); err == nil || err.Error() != "disk full" {
		t.Fatalf("WriteText = %v, want the writer's error", err)
	}
	if f.writes != 1 {
		t.Errorf("%d writes after the first failed, want none", f.writes-1)
	}
}
