package store

import (
	"encoding/json"
	"unicode/utf8"
)

// decodeAttrs decodes an event's attributes as Postgres returns them: a
// JSON object of strings (jsonb's text, `{"proxy": "nftables", ...}`).
// Reading a report decodes one per row, and encoding/json's reflection
// was a third of a report's CPU (docs/scale.md); the common shape (keys
// and values without escapes, valid UTF-8) is read here directly.
// Anything else (an escape, a number, nesting, null, bad input) goes to
// encoding/json, so that the result and the errors are always its own.
// The plain keys and values come from in, which may be nil; so may the
// whole map, for the same bytes as a recent row's (see interner.attrs).
func decodeAttrs(b []byte, in *interner) (map[string]string, error) {
	if m, ok := in.sharedAttrs(b); ok {
		return m, nil
	}
	m, ok := decodeFlatAttrs(b, in)
	if !ok {
		m = nil
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
	}
	in.shareAttrs(b, m)
	return m, nil
}

// decodeFlatAttrs reads a flat object of plain strings; ok is false for
// any input it does not read exactly as encoding/json would.
func decodeFlatAttrs(b []byte, in *interner) (m map[string]string, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, false
	}
	m = make(map[string]string, 4)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, skipSpace(b, i+1) == len(b)
	}
	for {
		var k, v []byte
		if k, i, ok = plainString(b, i); !ok {
			return nil, false
		}
		if i = skipSpace(b, i); i == len(b) || b[i] != ':' {
			return nil, false
		}
		if v, i, ok = plainString(b, skipSpace(b, i+1)); !ok {
			return nil, false
		}
		m[in.str(k)] = in.str(v) // a repeated key: the last wins, as in encoding/json
		if i = skipSpace(b, i); i == len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return m, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainString reads a JSON string at b[i] that needs no unescaping: no
// backslash, no control character, valid UTF-8. It returns the string's
// bytes (within b) and the index after its closing quote.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i == len(b) || b[i] != '"' {
		return nil, i, false
	}
	ascii := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !ascii && !utf8.Valid(s) {
				return nil, i, false // encoding/json replaces bad bytes with U+FFFD
			}
			return s, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, i, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, i, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
