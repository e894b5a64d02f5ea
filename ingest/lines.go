package ingest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// MaxLineBytes is the longest line a parser accepts; longer lines are
// rejected (and skipped) rather than buffered without bound.
const MaxLineBytes = 1 << 20

// lineReader splits input into lines, numbering them, stripping "\n" or
// "\r\n", and bounding their length.
type lineReader struct {
	br   *bufio.Reader
	n    int
	long []byte
	// last is set once the final line has been returned; unterminated if it
	// had no newline.
	unterminated bool
	binaryAt     int // offset of a NUL byte in the first bytes, or -1
}

func newLineReader(r io.Reader) *lineReader {
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < 64<<10 {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	return &lineReader{br: br, binaryAt: sniffBinary(br)}
}

// sniffBinary looks at the first bytes of the input for signs it is not
// text: a NUL byte on the first line, or more than a tenth of the bytes
// being control characters or invalid UTF-8. It returns the offset of the
// first such byte, or -1. A text log with a damaged line further on (a run
// of NULs after a crash) is not binary: that line alone is rejected.
func sniffBinary(br *bufio.Reader) int {
	head, _ := br.Peek(4096)
	nl := bytes.IndexByte(head, '\n')
	if nl < 0 {
		nl = len(head)
	}
	bad, first := 0, -1
	for i := 0; i < len(head); {
		c := head[i]
		size := 1
		isBad := false
		if c < utf8.RuneSelf {
			isBad = c == 0 || c == 0x7f || (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != 0x1b)
			if c == 0 && i < nl {
				return i
			}
		} else {
			var r rune
			r, size = utf8.DecodeRune(head[i:])
			isBad = r == utf8.RuneError && size == 1 && len(head)-i >= utf8.UTFMax
		}
		if isBad {
			bad++
			if first < 0 {
				first = i
			}
		}
		i += size
	}
	if bad*10 > len(head) {
		return first
	}
	return -1
}

// binaryError is the rejection for an input that is not text.
func binaryError(off int) *LineError {
	return lineErr(1, FieldLine, "binary data (byte %d is not text): not a log in this format", off)
}

// next returns the next line (valid until the following call), whether it
// was longer than MaxLineBytes (and so cut short), and io.EOF after the last.
func (l *lineReader) next() (line []byte, tooLong bool, err error) {
	l.long = l.long[:0]
	buffered := false
	for {
		frag, err := l.br.ReadSlice('\n')
		switch {
		case err == nil || err == io.EOF:
			if err == io.EOF && len(frag) == 0 && !buffered {
				return nil, false, io.EOF
			}
			l.n++
			if err == io.EOF {
				l.unterminated = true
			}
			if buffered {
				l.long, tooLong = appendBounded(l.long, frag, tooLong)
				frag = l.long
			}
			frag = bytes.TrimSuffix(frag, []byte{'\n'})
			frag = bytes.TrimSuffix(frag, []byte{'\r'})
			return frag, tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			buffered = true
			l.long, tooLong = appendBounded(l.long, frag, tooLong)
		default:
			return nil, false, fmt.Errorf("reading line %d: %w", l.n+1, err)
		}
	}
}

// appendBounded appends frag to buf unless that would pass MaxLineBytes;
// once past, it keeps buf as it is and reports the line too long.
func appendBounded(buf, frag []byte, tooLong bool) ([]byte, bool) {
	if tooLong || len(buf)+len(frag) > MaxLineBytes {
		return buf, true
	}
	return append(buf, frag...), false
}

// scanLines drives a line-based parser: it numbers lines, skips blank ones,
// rejects binary input, over-long lines and lines with NUL bytes, and hands
// the rest to parse. parse fills rec (already reset to the line) or returns
// a LineError.
func scanLines(r io.Reader, emit Emit, parse func(line []byte, rec *Record) *LineError) error {
	lr := newLineReader(r)
	var rec Record
	if lr.binaryAt >= 0 {
		rec.reset(1)
		rec.Err = binaryError(lr.binaryAt)
		return emit(&rec)
	}
	for {
		line, tooLong, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 && !tooLong {
			continue
		}
		rec.reset(lr.n)
		switch {
		case tooLong:
			rec.Err = lineErr(lr.n, FieldLine, "longer than %d bytes", MaxLineBytes)
		case bytes.IndexByte(line, 0) >= 0:
			rec.Err = lineErr(lr.n, FieldLine, "binary data (NUL byte at column %d)", bytes.IndexByte(line, 0)+1)
		default:
			if lerr := parse(line, &rec); lerr != nil {
				rec.reset(lr.n)
				lerr.Line = lr.n
				rec.Err = lerr
			}
		}
		if rec.Err != nil && lr.unterminated {
			rec.Err.Unterminated = true
		}
		if err := emit(&rec); err != nil {
			return err
		}
	}
}
