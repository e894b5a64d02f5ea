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
	return redactKeywords(redactUserinfo(text, nil), nil)
}

// RedactDSN is Redact for text that may quote pieces of dsn by themselves,
// as a parser's error does ("missing = after PWTAIL"): besides Redact's
// masking, every word of the passwords Redact would mask in dsn is masked
// wherever it appears in text. It reads dsn as text, never parsing it, so
// a DSN that does not parse still has its password known.
func RedactDSN(text, dsn string) string {
	var found []string
	redactKeywords(redactUserinfo(dsn, &found), &found)
	text = Redact(strings.ReplaceAll(text, dsn, Redact(dsn)))
	for _, f := range found {
		for _, w := range strings.Fields(f) {
			if w = strings.Trim(w, "'\"`:,"); len(w) >= 3 && w != redactMask {
				text = strings.ReplaceAll(text, w, redactMask)
			}
		}
	}
	return text
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
// Each masked password is appended to found when it is not nil.
func redactUserinfo(text string, found *[]string) string {
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
		// The last '@' ends the userinfo: an '@' after it would have to
		// be in the path or query, where pgx does not look for one.
		at := strings.LastIndexByte(rest[:end], '@')
		if at < 0 || strings.IndexByte(rest[:at], ':') < 0 {
			// A password with a space ends the token early
			// (postgres://u:S3CRET pw@host/db): the userinfo then runs
			// to the last '@' of the authority, read across spaces, up
			// to its '/', '?' or '#' or the line's end. Where nothing
			// parsed, nothing tells where a password ends but its '@'.
			auth := 0
			for auth < len(rest) && !strings.ContainsRune("/?#\n\r\"'`<>", rune(rest[auth])) {
				auth++
			}
			at = strings.LastIndexByte(rest[:auth], '@')
			end = max(end, at)
		}
		if at >= 0 {
			if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
				if found != nil {
					*found = append(*found, rest[colon+1:at])
				}
				b.WriteString(rest[:colon+1] + redactMask)
				rest = rest[at:]
				continue
			}
		}
		b.WriteString(rest[:end])
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

// passwordTail extends an unquoted password value text[v:end] over the
// words after it on the same line that are no key=value pair: a password
// written with a space and no quotes (password=S3CRET PWTAIL) runs on past
// its first word, and nothing parsed says where it ends. It stops after a
// word that holds a quote or ends in ':' or ',', where a message that quotes
// the DSN goes on with words of its own.
func passwordTail(text string, v, end int) int {
	for !strings.ContainsAny(text[v:end], "`\"')") && !strings.HasSuffix(text[v:end], ":") && !strings.HasSuffix(text[v:end], ",") {
		ws := end
		for ws < len(text) && (text[ws] == ' ' || text[ws] == '\t') {
			ws++
		}
		if ws == end || ws == len(text) {
			return end
		}
		we := ws
		for we < len(text) && !isSpace(text[we]) {
			we++
		}
		if strings.IndexByte(text[ws:we], '=') >= 0 {
			return end
		}
		v, end = ws, we
	}
	return end
}

// redactKeywords masks the value of every password-like key=value pair,
// appending each to found when it is not nil.
func redactKeywords(text string, found *[]string) string {
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
			end = passwordTail(text, v, end)
		}
		if found != nil {
			*found = append(*found, text[v:end])
		}
		b.WriteString(text[done:v])
		b.WriteString(redactMask)
		done = end
		i = end - 1
	}
	b.WriteString(text[done:])
	return b.String()
}
