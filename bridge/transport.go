package bridge

import (
	"net/http"
	"os/exec"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// transport makes the transport of one start of the server, and for
// Streamable HTTP the client of its requests. version will hold the
// protocol version the server chooses at initialize; streams learns which
// call's stream carries each request of the server.
func (b *Bridge) transport(version *atomic.Value, streams *streamCalls) (mcp.Transport, *http.Client) {
	srv := b.cfg.Server
	switch {
	case srv.Transport != nil:
		return srv.Transport(), nil
	case srv.URL != "":
		hc := b.httpClient(version, streams)
		return &mcp.StreamableClientTransport{
			Endpoint:   srv.URL,
			HTTPClient: hc,
			// A broken stream of a POST's answer is not resumed: the
			// session ends (its ping, its event stream) and the requests
			// in flight are answered at once, rather than after retries.
			MaxRetries: -1,
		}, hc
	}
	cmd := exec.Command(srv.Command[0], srv.Command[1:]...)
	cmd.Dir, cmd.Env, cmd.Stderr = srv.Dir, srv.Env, srv.Stderr
	ownProcessGroup(cmd)
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: DefaultStopTimeout}, nil
}

// httpClient is the client of a Streamable HTTP session: Server's, with
// the Mcp-Protocol-Version header on each request once the server has
// chosen a version (the SDK's transport sets it only in sessions that
// its own mcp.Client initialized, and the bridge makes the handshake
// itself: doc.go says why), a server's refusal of one request made the
// error answer it stands for (httprefusals.go), and each call's answer
// stream read for the requests the server makes on it (streams.go).
func (b *Bridge) httpClient(version *atomic.Value, streams *streamCalls) *http.Client {
	base := http.DefaultTransport
	hc := &http.Client{}
	if c := b.cfg.Server.HTTPClient; c != nil {
		*hc = *c
		if c.Transport != nil {
			base = c.Transport
		}
	}
	hc.Transport = taggedStreams{base: refusalAnswers{base: versionHeader{base: base, version: version}}, calls: streams}
	return hc
}

// protocolVersionHeader is the Streamable HTTP transport's header of the
// negotiated protocol version.
const protocolVersionHeader = "Mcp-Protocol-Version"

// versionHeader adds the protocol version header to requests without one.
type versionHeader struct {
	base    http.RoundTripper
	version *atomic.Value
}

func (t versionHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	v, _ := t.version.Load().(string)
	if v != "" && r.Header.Get(protocolVersionHeader) == "" {
		r = r.Clone(r.Context())
		r.Header.Set(protocolVersionHeader, v)
	}
	return t.base.RoundTrip(r)
}
