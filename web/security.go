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

// authorized compares the token in constant time (of its hash, so the
// length does not leak either).
func (s *Server) authorized(r *http.Request) bool {
	if s.opts.AuthToken == "" {
		return true
	}
	got := httpauth.Bearer(r)
	if got == "" {
		if c, err := r.Cookie(tokenCookie); err == nil {
			got = c.Value
		}
	}
	return s.tokenOK(got)
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
		if t := r.URL.Query().Get("token"); t != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			if !s.tokenOK(t) {
				s.unauthorized(w, r)
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
		if !s.authorized(r) {
			s.unauthorized(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
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
		s.render(w, r, http.StatusUnauthorized, "login.html", loginData{Next: next, Enabled: true, Failed: true})
		return
	}
	s.setTokenCookie(w, r)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// safeNext keeps a redirect target on this server.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/rollouts"
	}
	return next
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
