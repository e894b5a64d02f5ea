package web

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/drainscope/drainscope/internal/httpauth"
)

// contentSecurityPolicy allows nothing but this server's own scripts,
// styles, images and API: no inline script, no eval, no frames, no other
// origin. SVG presentation attributes (fill, stroke) are not styles, so
// the timeline needs no 'unsafe-inline'.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
		next.ServeHTTP(w, r)
	})
}

// escapedRouting routes on the escaped path, so that a name holding "/" or
// "%" (which Kubernetes forbids, but a store may hold anything) stays one
// segment and decodes the same way every time.
func escapedRouting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// hostCheck refuses requests whose Host is not allowed (DNS rebinding).
func (s *Server) hostCheck(next http.Handler) http.Handler {
	if len(s.opts.AllowedHosts) == 0 {
		return next
	}
	allowed := map[string]bool{}
	for _, h := range s.opts.AllowedHosts {
		allowed[strings.ToLower(strings.Trim(h, "[]"))] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !allowed[strings.ToLower(strings.Trim(host, "[]"))] {
			http.Error(w, "misdirected request: this server answers only to "+strings.Join(s.opts.AllowedHosts, ", "), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

const tokenCookie = "drainscope_token"

// presented is the token r carries: a bearer header, else the cookie.
func presented(r *http.Request) string {
	got := httpauth.Bearer(r)
	if got == "" {
		if c, err := r.Cookie(tokenCookie); err == nil {
			got = c.Value
		}
	}
	return got
}

func (s *Server) tokenOK(got string) bool { return httpauth.TokenOK(got, s.opts.AuthToken) }

func (s *Server) setTokenCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: tokenCookie, Value: s.opts.AuthToken, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// auth requires the token. A page opened with ?token=TOKEN stores it in a
// cookie and redirects to the same address without it, so the token does
// not stay in the address bar or the history.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.AuthToken == "" {
			next.ServeHTTP(w, r)
			return
		}
		t := r.URL.Query().Get("token")
		if t != "" && r.Method != http.MethodGet && r.Method != http.MethodHead {
			t = ""
		}
		got := presented(r)
		if t != "" {
			if !s.tokenOK(t) {
				s.wrongToken(w, r)
				return
			}
			s.setTokenCookie(w, r)
			u := *r.URL
			q := u.Query()
			q.Del("token")
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if !s.tokenOK(got) {
			if got == "" { // no token at all is not a guess
				s.unauthorized(w, r)
				return
			}
			s.wrongToken(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// wrongToken answers a wrong token: 429 while the client's address has
// failed too many lately, else 401, counted. The right token is never
// refused for its address's failures: every user of a `kubectl
// port-forward` or a proxy shares one address, and one of them guessing
// must not lock the others out. Tokens are at least 32 characters
// (httpauth.MinTokenLength), so the limit does not stand between a guesser
// and the token; it bounds the work and the log lines guesses cost.
func (s *Server) wrongToken(w http.ResponseWriter, r *http.Request) {
	if s.tooManyFailures(w, r) {
		return
	}
	s.failed(r)
	s.unauthorized(w, r)
}

func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="drainscope"`)
	if isAPI(r) {
		writeJSON(w, http.StatusUnauthorized, apiError{Error: "missing or wrong token: send Authorization: Bearer TOKEN"})
		return
	}
	next := r.URL.RequestURI()
	http.Redirect(w, r, "/login?next="+url.QueryEscape(next), http.StatusSeeOther)
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login.html", loginData{Next: safeNext(r.URL.Query().Get("next")), Enabled: s.opts.AuthToken != ""})
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if s.opts.AuthToken == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !s.tokenOK(r.PostForm.Get("token")) {
		// As wrongToken: only wrong tokens are limited.
		if s.tooManyFailures(w, r) {
			return
		}
		s.failed(r)
		s.render(w, r, http.StatusUnauthorized, "login.html", loginData{Next: next, Enabled: true, Failed: true})
		return
	}
	s.setTokenCookie(w, r)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// safeNext keeps a redirect target on this server: a path on this origin
// and nothing a browser could read as another. Browsers drop tabs and
// newlines from a Location and read '\' as '/', so "/\t/evil.example" and
// "/\evil.example" lead off-site just as "//evil.example" does; anything
// but printable ASCII is refused outright (the server's own addresses are
// escaped), and so is a path that turns into one of those once decoded,
// in case something on the way decodes it.
func safeNext(next string) string {
	const home = "/rollouts"
	if !localPath(next) {
		return home
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || u.User != nil {
		return home
	}
	if dec, err := url.PathUnescape(u.EscapedPath()); err != nil || !localPath(dec) {
		return home
	}
	return next
}

// localPath reports whether p is "/…" in printable ASCII, without a
// backslash, and not "//…".
func localPath(p string) bool {
	if len(p) == 0 || p[0] != '/' || (len(p) > 1 && p[1] == '/') {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

type loginData struct {
	Next    string
	Enabled bool
	Failed  bool
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	if isAPI(r) {
		writeJSON(w, http.StatusNotFound, apiError{Error: "no such endpoint; see /api/v1 in API.md"})
		return
	}
	s.render(w, r, http.StatusNotFound, "error.html", errorData{Status: http.StatusNotFound, Message: "There is no page at this address."})
}

// methodNotAllowed answers 405 with the Allow header chi's custom handlers
// do not get, found by asking the router which methods match.
func (s *Server) methodNotAllowed(router chi.Routes) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if router.Match(chi.NewRouteContext(), m, r.URL.EscapedPath()) {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
		}
		if isAPI(r) {
			writeJSON(w, http.StatusMethodNotAllowed, apiError{Error: r.Method + " is not allowed here; allowed: " + strings.Join(allow, ", ")})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusMethodNotAllowed)
		w.Write([]byte("method not allowed\n"))
	}
}

func (loginData) Title() string { return "Sign in" }
