package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/drainscope/drainscope/analysis"
)

//go:embed static templates
var assets embed.FS

type staticFile struct {
	body  []byte
	etag  string
	ctype string
}

func loadStatics(rules []analysis.Rule) map[string]staticFile {
	out := map[string]staticFile{}
	add := func(name string, b []byte) {
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out[name] = staticFile{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: ct}
	}
	add("causes.css", causesCSS(rules))
	entries, err := fs.ReadDir(assets, "static")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := assets.ReadFile("static/" + e.Name())
		if err != nil {
			panic(err)
		}
		add(e.Name(), b)
	}
	return out
}

// staticVersion is appended to asset links so a new binary's files are
// fetched at once while unchanged ones stay cached.
func (s *Server) staticVersion(name string) string {
	if f, ok := s.statics[name]; ok {
		return "/static/" + name + "?v=" + f.etag[1:9]
	}
	return "/static/" + name
}

func (s *Server) static(w http.ResponseWriter, r *http.Request) {
	f, ok := s.statics[chi.URLParam(r, "file")]
	if !ok {
		s.notFound(w, r)
		return
	}
	w.Header().Set("Content-Type", f.ctype)
	w.Header().Set("ETag", f.etag)
	if r.URL.Query().Get("v") != "" {
		w.Header().Set("Cache-Control", "public, max-age=86400")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}
