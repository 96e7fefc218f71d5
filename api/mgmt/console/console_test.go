package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHandlerServesThePageAndItsAssets(t *testing.T) {
	h := Handler()
	for path, want := range map[string]string{
		"/":            "text/html; charset=utf-8",
		"/index.html":  "text/html; charset=utf-8",
		"/app.js":      "text/javascript; charset=utf-8",
		"/app.css":     "text/css; charset=utf-8",
		"/favicon.svg": "image/svg+xml",
	} {
		w := get(t, h, "GET", path)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != want || w.Body.Len() == 0 {
			t.Fatalf("GET %s: %d %q, %d bytes", path, w.Code, w.Header().Get("Content-Type"), w.Body.Len())
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("GET %s: security headers %v", path, w.Header())
		}
		etag := w.Header().Get("ETag")
		if etag == "" {
			t.Fatalf("GET %s: no ETag", path)
		}
		if w := get(t, h, "GET", path, "If-None-Match", etag); w.Code != http.StatusNotModified {
			t.Fatalf("GET %s again with its ETag: %d", path, w.Code)
		}
	}
	// The page loads its script and style from the paths served above.
	page := get(t, h, "GET", "/").Body.String()
	for _, ref := range []string{`src="app.js"`, `href="app.css"`, `href="favicon.svg"`} {
		if !strings.Contains(page, ref) {
			t.Fatalf("index.html does not reference %s", ref)
		}
	}
}

func TestHandlerRefusesTheRest(t *testing.T) {
	h := Handler()
	for _, path := range []string{"/nope.js", "/static/app.js", "/console.go", "/../console.go", "/index", "/x/app.js"} {
		if w := get(t, h, "GET", path); w.Code != http.StatusNotFound {
			t.Fatalf("GET %s: %d", path, w.Code)
		}
	}
	if w := get(t, h, "POST", "/"); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST /: %d %v", w.Code, w.Header())
	}
	if w := get(t, h, "HEAD", "/app.js"); w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("HEAD /app.js: %d, %d bytes", w.Code, w.Body.Len())
	}
}
