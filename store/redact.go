package store

import (
	"net/url"
	"strings"
)

// redactMask replaces every secret Redact finds.
const redactMask = "xxxxx"

// Redact hides the passwords of any DSNs in text: a DSN itself, or an error
// or log line that quotes one (pgx's among them). It is the one redaction
// every start-up log, error body, page and command error goes through. It
// masks
//
//   - a URL's userinfo password, up to the last '@' of the address, so that
//     an unencoded '@' in the password (postgres://u:p@ss@h/db) hides all
//     of it;
//   - the value of every password= or sslpassword= (any case, percent-
//     encoded keys too), in a URL's query (up to '&', '#' or a space) or in
//     the keyword form (up to a space, or a whole quoted 'value').
//
// It errs towards masking too much: text that only looks like a DSN loses
// a little, a secret never shows.
func Redact(text string) string {
	return redactKeywords(redactUserinfo(text))
}

// tokenEnd reports whether c ends a URL written in running text.
func tokenEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>':
		return true
	}
	return false
}

// redactUserinfo masks "user:PASSWORD@" in every "scheme://…" of text.
func redactUserinfo(text string) string {
	var b strings.Builder
	rest := text
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:i+3])
		rest = rest[i+3:]
		end := 0
		for end < len(rest) && !tokenEnd(rest[end]) {
			end++
		}
		tok := rest[:end]
		// The last '@' ends the userinfo: an '@' after it would have to
		// be in the path or query, where pgx does not look for one.
		if at := strings.LastIndexByte(tok, '@'); at >= 0 {
			if colon := strings.IndexByte(tok[:at], ':'); colon >= 0 {
				tok = tok[:colon+1] + redactMask + tok[at:]
			}
		}
		b.WriteString(tok)
		rest = rest[end:]
	}
}

// isKeyByte reports whether c may be part of a DSN parameter's name as it
// is written (percent-encoding included).
func isKeyByte(c byte) bool {
	return c == '_' || c == '%' || c == '-' || c == '.' ||
		('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// redactKeywords masks the value of every password-like key=value pair.
func redactKeywords(text string) string {
	var b strings.Builder
	done := 0 // text[:done] is written
	for i := 0; i < len(text); i++ {
		if text[i] != '=' {
			continue
		}
		// The key: a run of name bytes before '=', spaces allowed between
		// (the keyword form takes "password = pw").
		k := i
		for k > 0 && isSpace(text[k-1]) {
			k--
		}
		ks := k
		for ks > 0 && isKeyByte(text[ks-1]) {
			ks--
		}
		key := text[ks:k]
		if dec, err := url.QueryUnescape(key); err == nil {
			key = dec
		}
		key = strings.ToLower(key)
		if key != "password" && key != "sslpassword" && key != "pgpassword" {
			continue
		}
		query := ks > 0 && (text[ks-1] == '?' || text[ks-1] == '&')
		v := i + 1
		if !query {
			for v < len(text) && isSpace(text[v]) && text[v] != '\n' {
				v++
			}
		}
		end := v
		if !query && end < len(text) && text[end] == '\'' {
			// A quoted keyword value: up to a quote no backslash
			// precedes (libpq escapes with one; a message that quotes the
			// DSN again may double it).
			end++
			for end < len(text) && (text[end] != '\'' || text[end-1] == '\\') {
				end++
			}
			end = min(end+1, len(text))
		} else {
			for end < len(text) && !isSpace(text[end]) && !(query && (text[end] == '&' || text[end] == '#')) {
				end++
			}
		}
		b.WriteString(text[done:v])
		b.WriteString(redactMask)
		done = end
		i = end - 1
	}
	b.WriteString(text[done:])
	return b.String()
}
