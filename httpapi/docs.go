package httpapi

import (
	"embed"
	"net/http"
)

// docsFiles is the API reference page: Redoc 2.5.2's standalone bundle (MIT, licences beside
// it), served from the binary so /docs works without internet access.
//
//go:embed docs/index.html docs/redoc.standalone.js
var docsFiles embed.FS

func (s *Server) registerDocs() {
	page, _ := docsFiles.ReadFile("docs/index.html")
	s.mux.HandleFunc("GET /docs", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; worker-src 'self' blob:; img-src 'self' data:")
		_, _ = w.Write(page)
	})
	s.mux.HandleFunc("GET /docs/redoc.standalone.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		http.ServeFileFS(w, r, docsFiles, "docs/redoc.standalone.js")
	})
}
