// Package console is raftmq's web console: one page of plain HTML, CSS
// and JavaScript, embedded in the binary, that a browser loads from a
// node's management listener and that drives the management API on the
// same origin with the user's credentials (HTTP basic authentication, as
// RabbitMQ's management UI does). There is no build step: the files under
// static/ are what the browser runs.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// contentTypes are the types of the files static/ holds; a file of
// another extension is not served.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// securityPolicy lets the page run only its own script and style and talk
// only to its own origin: an object name the API returns can never become
// markup that runs, even if the page's escaping missed it.
const securityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console: index.html at / and the assets beside it.
// Anything else is a 404, so a mistyped API path outside /api/ is not
// answered with a page.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" {
			name = "index.html"
		}
		typ, ok := contentTypes[path.Ext(name)]
		if strings.Contains(name, "/") || !ok {
			http.NotFound(w, r)
			return
		}
		b, err := static.ReadFile("static/" + name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", typ)
		h.Set("Content-Security-Policy", securityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary: revalidate on every load (the
		// ETag makes that a 304) rather than run an old script against a
		// new API after an upgrade.
		h.Set("Cache-Control", "no-cache")
		sum := sha256.Sum256(b)
		h.Set("ETag", `"`+hex.EncodeToString(sum[:8])+`"`)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
	})
}
