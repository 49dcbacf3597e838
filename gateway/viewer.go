package gateway

import (
	"embed"
	"io/fs"
	"net/http"
)

// viewerFiles is the pod viewer (SPEC section 10): a page, its script and
// its styles, embedded so that the gateway serves them with no asset from
// outside the binary.
//
//go:embed viewer
var viewerFiles embed.FS

// viewerHandler serves the viewer's files at /.
func viewerHandler() http.Handler {
	sub, err := fs.Sub(viewerFiles, "viewer")
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return http.FileServerFS(sub)
}
