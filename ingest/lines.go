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
	// notText is the rejection of an input that is not text at all, or nil.
	notText *LineError
}

func newLineReader(r io.Reader) *lineReader {
	br, notText := openText(r)
	return &lineReader{br: br, notText: notText}
}

// utf8BOM is the byte order mark Windows tools (Excel's "CSV UTF-8",
// PowerShell, Notepad) put at the start of a UTF-8 file.
var utf8BOM = []byte("\ufeff")

// openText is where every format starts reading its input: it buffers r,
// drops a leading UTF-8 byte order mark (which no format's first field can
// start with, so it would fail line 1) and judges whether the input is text
// at all. notText is the rejection of an input that is not, or nil.
func openText(r io.Reader) (br *bufio.Reader, notText *LineError) {
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < 64<<10 {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	if head, _ := br.Peek(len(utf8BOM)); bytes.Equal(head, utf8BOM) {
		br.Discard(len(utf8BOM))
	}
	return br, sniffBinary(br)
}

// sniffPrefix is how much of an input sniffBinary judges it by.
const sniffPrefix = 4096

// sniffBinary judges an input by the lines in its first bytes: a line is
// not text when it holds a NUL byte or more than a tenth of its bytes are
// control characters or invalid UTF-8. The input is binary when its first
// line is not text and neither are most lines of the prefix; then the
// rejection names that first line. A text log with a damaged line (a run
// of NULs after a crash, a line of garbage) is not binary, wherever the line
// is: that line alone is rejected, as it is read, and the good lines around
// it are kept.
func sniffBinary(br *bufio.Reader) *LineError {
	head, _ := br.Peek(sniffPrefix)
	if bytes.HasPrefix(head, []byte{0xff, 0xfe}) || bytes.HasPrefix(head, []byte{0xfe, 0xff}) {
		return &LineError{Line: 1, Field: FieldLine, final: true,
			Msg: "UTF-16 text (it starts with a UTF-16 byte order mark): convert it to UTF-8, e.g. with iconv -f UTF-16 -t UTF-8"}
	}
	var lines, bad, firstLine, firstOff int
	var firstWhy string
	for n, off := 1, 0; off < len(head); n++ {
		end := bytes.IndexByte(head[off:], '\n')
		if end < 0 {
			end = len(head) - off
		}
		line := head[off : off+end]
		cut := off+end == len(head) && len(head) == sniffPrefix // the prefix ends inside this line
		if len(bytes.TrimSpace(line)) > 0 {
			lines++
			if at, why := notTextAt(line, cut); at >= 0 {
				bad++
				if firstLine == 0 {
					firstLine, firstOff, firstWhy = n, at, why
				}
			} else if firstLine == 0 {
				return nil // the first line is text: this is a text input
			}
		}
		off += end + 1
	}
	if bad == 0 || bad*2 <= lines {
		return nil
	}
	return &LineError{Line: firstLine, Field: FieldLine, final: true,
		Msg: fmt.Sprintf("binary data, not text (column %d is %s, and %d of the first %d lines are not text): not a log in this format", firstOff+1, firstWhy, bad, lines)}
}

// notTextAt reports whether line is not text, and if so the offset of its
// first bad byte and what that byte is. cut says the line may end inside a
// character.
func notTextAt(line []byte, cut bool) (int, string) {
	bad, first, why := 0, -1, ""
	for i := 0; i < len(line); {
		c := line[i]
		size := 1
		w := ""
		if c < utf8.RuneSelf {
			switch {
			case c == 0:
				return i, "a NUL byte"
			case c == 0x7f || (c < 0x20 && c != '\t' && c != '\r' && c != '\f' && c != 0x1b):
				w = fmt.Sprintf("control character 0x%02x", c)
			}
		} else {
			var r rune
			r, size = utf8.DecodeRune(line[i:])
			if r == utf8.RuneError && size == 1 && (!cut || len(line)-i >= utf8.UTFMax) {
				w = fmt.Sprintf("byte 0x%02x, not UTF-8", c)
			}
		}
		if w != "" {
			bad++
			if first < 0 {
				first, why = i, w
			}
		}
		i += size
	}
	if bad*10 > len(line) {
		return first, why
	}
	return -1, ""
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

// skipLine, returned by a line parser, marks a line that holds no record
// (a CSV header): it is neither emitted nor counted.
var skipLine = &LineError{Field: FieldLine, Msg: "not a record"}

// scanLines drives a line-based parser: it numbers lines, skips blank ones,
// rejects binary input, over-long lines and lines with NUL bytes, and hands
// the rest to parse. parse fills rec (already reset to the line) or returns
// a LineError: skipLine for a line that is no record, one marked final when
// nothing after that line can be read.
func scanLines(r io.Reader, emit Emit, parse func(line []byte, rec *Record) *LineError) error {
	lr := newLineReader(r)
	var rec Record
	if lr.notText != nil {
		rec.reset(lr.notText.Line)
		rec.Err = lr.notText
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
			rec.Err = lineErr(lr.n, FieldLine, "longer than %d bytes (the line is skipped; is this a log in this format?)", MaxLineBytes)
		case bytes.IndexByte(line, 0) >= 0:
			rec.Err = lineErr(lr.n, FieldLine, "binary data (NUL byte at column %d)", bytes.IndexByte(line, 0)+1)
		default:
			lerr := parse(line, &rec)
			if lerr == skipLine {
				continue
			}
			if lerr != nil {
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
		if rec.Err != nil && rec.Err.final {
			return nil
		}
	}
}

// csvSplitter splits lines of CSV into fields.
type csvSplitter struct {
	buf    []byte
	ends   []int
	fields []string
}

// split splits one line of CSV into fields, as encoding/csv does with
// TrimLeadingSpace (and without LazyQuotes), except that a quoted field must
// close on its line. A record is one line in every CSV drainscope reads
// (vegeta writes body and headers base64-encoded, and its error strings
// hold no newline), so an unclosed quote is that line's fault and must not
// swallow the good lines after it, nor buffer the rest of the input. On a bad line
// it returns the index of the field at fault and why. The fields are valid
// until the next call.
func (s *csvSplitter) split(line []byte) ([]string, int, string) {
	s.buf, s.ends = s.buf[:0], s.ends[:0]
	for i := 0; ; i++ { // i++ steps over the comma that ended the last field
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i < len(line) && line[i] == '"' {
			open := i
			for i++; ; {
				j := bytes.IndexByte(line[i:], '"')
				if j < 0 {
					return nil, len(s.ends), fmt.Sprintf("the quote at column %d is not closed on its line (a field cannot span lines; truncated line?)", open+1)
				}
				s.buf = append(s.buf, line[i:i+j]...)
				i += j + 1
				if i < len(line) && line[i] == '"' { // "" is a quote
					s.buf = append(s.buf, '"')
					i++
					continue
				}
				break
			}
			if i < len(line) && line[i] != ',' {
				return nil, len(s.ends), fmt.Sprintf("text after the closing quote at column %d (write a quote inside a quoted field as \"\")", i)
			}
		} else {
			j := bytes.IndexByte(line[i:], ',')
			if j < 0 {
				j = len(line) - i
			}
			if k := bytes.IndexByte(line[i:i+j], '"'); k >= 0 {
				return nil, len(s.ends), fmt.Sprintf("a quote at column %d inside an unquoted field (quote the field and double the quote)", i+k+1)
			}
			s.buf = append(s.buf, line[i:i+j]...)
			i += j
		}
		s.ends = append(s.ends, len(s.buf))
		if i >= len(line) {
			break
		}
	}
	all := string(s.buf)
	s.fields = s.fields[:0]
	from := 0
	for _, end := range s.ends {
		s.fields = append(s.fields, all[from:end])
		from = end
	}
	return s.fields, -1, ""
}
