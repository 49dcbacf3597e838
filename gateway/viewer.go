package gateway

import (
	"embed"
	"io/fs"
	"net/http"
)

// viewerFiles is the pod viewer (docs/protocol.md section 10): a page, its
// script modules and its styles, embedded so that the gateway serves them
// with no asset from outside the binary. They are plain files with no build
// step; gateway/viewer/main.js is where to start reading.
//
//go:embed viewer
var viewerFiles embed.FS

// viewerHandler serves the viewer's files at /.
//
// Every answer carries a Content-Security-Policy that lets the page load
// and run only the gateway's own files and connect only to the gateway: the
// page never interprets what an envelope holds as HTML, and should a bug
// ever let it, an injected script or event handler still would not run.
func viewerHandler() http.Handler {
	sub, err := fs.Sub(viewerFiles, "viewer")
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", viewerPolicy(r.Host))
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the gateway's version; have the browser
		// ask again rather than run an old page against a new gateway.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// viewerPolicy is the page's Content-Security-Policy. connect-src names the
// gateway's WebSocket URLs as well as 'self', which older browsers do not
// take to cover ws: and wss:.
func viewerPolicy(host string) string {
	connect := "'self'"
	if safeHost(host) {
		connect += " ws://" + host + " wss://" + host
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
		"connect-src " + connect + "; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}

// safeHost reports whether a Host header can go into the policy as it is.
func safeHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for _, c := range h {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '-', c == ':', c == '[', c == ']':
		default:
			return false
		}
	}
	return true
}
