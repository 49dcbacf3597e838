package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/client"
)

// Defaults of Config, each used when its field is zero.
const (
	// DefaultMaxInFlight bounds the requests the bridge has sent to its
	// server and not yet had answered. Twice the gateway's default bound
	// per requester (--max-mcp-requests-per-participant, 128): a few
	// requesters at their bound fit, and a server that stops answering
	// costs at most this many goroutines and table entries.
	DefaultMaxInFlight = 256
	// DefaultRequestTimeout is how long a request waits for the server's
	// answer before the bridge answers it with a timeout error and cancels
	// it at the server. Longer than the gateway's --mcp-request-timeout
	// (60 s by default), which answers the requester first: this one only
	// frees the bridge's place for the request.
	DefaultRequestTimeout = 2 * time.Minute
	// DefaultMinRestartDelay and DefaultMaxRestartDelay bound the wait
	// before each restart of a server that exited or stopped answering
	// (doubling, with jitter). Half a second brings a crashed server back
	// before most requesters notice; thirty seconds keeps a server that
	// cannot start from spinning.
	DefaultMinRestartDelay = 500 * time.Millisecond
	DefaultMaxRestartDelay = 30 * time.Second
	// DefaultPingInterval and DefaultPingTimeout: the bridge pings its
	// server this often when it is up, and restarts it when no answer
	// comes within the timeout. A Streamable HTTP server that stopped
	// answering has no process to exit: this is how the bridge learns it
	// is down (besides its event stream ending).
	DefaultPingInterval = 15 * time.Second
	DefaultPingTimeout  = 10 * time.Second
	// DefaultInitializeTimeout bounds the initialize handshake of each
	// start: generous, because the first start of `npx -y PACKAGE`
	// downloads the package before the server can answer.
	DefaultInitializeTimeout = 2 * time.Minute
	// DefaultStopTimeout is how long a stdio server is given to exit after
	// its standard input is closed, then again after SIGTERM, before it is
	// killed (the MCP specification's shutdown for stdio).
	DefaultStopTimeout = 5 * time.Second
	// DefaultFlushTimeout is how long the bridge, when it stops, keeps
	// sending the answers it still holds (the error answers of the
	// requests in flight) before it leaves the pod.
	DefaultFlushTimeout = 5 * time.Second
	// stableAfter is how long a server must have run for its next exit to
	// restart it after DefaultMinRestartDelay again rather than after the
	// doubled delay.
	stableAfter = 30 * time.Second
)

// ClientName is the name the bridge gives itself in the initialize
// request (clientInfo.name), so that a server's logs say who called.
const ClientName = "mcpp-bridge"

// Config says which pod to join, which MCP server to bridge into it, and
// how.
type Config struct {
	// Gateway is the gateway's WebSocket endpoint (ws://HOST:PORT/ws), for
	// the default Dial.
	Gateway string
	// Client are the options to join with: Pod (required), Participant
	// (open mode) or Token. The bridge sets Serves (wire.ServesMCP) and a
	// directed filter (routing=directed: it receives what is addressed to
	// it and what is addressed to everyone, not the pod's other calls).
	Client client.Options
	// Dial joins the pod; nil is client.Dial(ctx, Gateway, opts). mcpp
	// bridge passes its own, which adds the connection flags (--ca-file)
	// and explains a refusal.
	Dial func(ctx context.Context, opts client.Options) (*client.Client, error)

	// Server is the MCP server to bridge.
	Server Server

	// MaxInFlight bounds the requests sent to the server and not yet
	// answered (default DefaultMaxInFlight); a request past it is
	// answered at once with RPCTooManyInFlight.
	MaxInFlight int
	// RequestTimeout bounds the wait for each answer (default
	// DefaultRequestTimeout).
	RequestTimeout time.Duration
	// MinRestartDelay and MaxRestartDelay bound the wait before a restart
	// (defaults DefaultMinRestartDelay, DefaultMaxRestartDelay).
	MinRestartDelay time.Duration
	MaxRestartDelay time.Duration
	// PingInterval and PingTimeout: how often the server is pinged, and how
	// long an answer may take (defaults DefaultPingInterval,
	// DefaultPingTimeout).
	PingInterval time.Duration
	PingTimeout  time.Duration
	// InitializeTimeout bounds each start's handshake (default
	// DefaultInitializeTimeout).
	InitializeTimeout time.Duration
	// ClientVersion is clientInfo.version in the initialize request
	// (default "devel").
	ClientVersion string
	// ProtocolVersion is the MCP revision to speak to the server: "" (the
	// default) for the newest the two share (MCP 2026-07-28 where the
	// server offers it, else the one it answers initialize with), or an
	// older one to ask for at initialize (handshake.go).
	ProtocolVersion string

	// TracerProvider makes the bridge's spans of its calls (tracing.go);
	// nil: the process's (OpenTelemetry's global, which records nothing
	// unless set: mcpp bridge sets it from the OTEL_* variables).
	TracerProvider trace.TracerProvider

	// Logf, when set, is told what a person running the bridge wants to
	// know: the server started, exited, is restarted; the gateway refused
	// an envelope; the connection to the pod was lost and restored. It is
	// called from several goroutines.
	Logf func(format string, args ...any)
}

// Server says how to reach the MCP server: exactly one of Command, URL
// and Transport.
type Server struct {
	// Command is the program and its arguments, started with its standard
	// input and output as the MCP stdio transport (mcp.CommandTransport),
	// and started again each time it exits.
	Command []string
	// Dir and Env are the command's working directory and environment
	// (exec.Cmd's; empty: the bridge's).
	Dir string
	Env []string
	// Stderr receives the command's standard error (nil: discarded).
	Stderr io.Writer

	// URL is the endpoint of a Streamable HTTP MCP server
	// (mcp.StreamableClientTransport), connected to again when it stops
	// answering.
	URL string
	// HTTPClient makes the requests to URL (nil: http.DefaultClient's
	// transport).
	HTTPClient *http.Client

	// Transport, when set, makes the transport of each start instead: a
	// server in the same process (mcp.NewInMemoryTransports), a transport
	// of one's own.
	Transport func() mcp.Transport
}

// withDefaults fills the zero fields of c with their defaults and says
// what is wrong with the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Client.Pod == "" {
		return c, errors.New("bridge: Config.Client.Pod is required")
	}
	given := 0
	if len(c.Server.Command) > 0 {
		given++
	}
	if c.Server.URL != "" {
		given++
		u, err := url.Parse(c.Server.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("bridge: the server's URL %q is not an http:// or https:// URL", c.Server.URL)
		}
	}
	if c.Server.Transport != nil {
		given++
	}
	if given != 1 {
		return c, errors.New("bridge: Config.Server needs exactly one of Command, URL and Transport")
	}
	if c.Dial == nil {
		if c.Gateway == "" {
			return c, errors.New("bridge: Config.Gateway is required (or Config.Dial)")
		}
		gw := c.Gateway
		c.Dial = func(ctx context.Context, opts client.Options) (*client.Client, error) {
			return client.Dial(ctx, gw, opts)
		}
	}
	c.MaxInFlight = orDefault(c.MaxInFlight, DefaultMaxInFlight)
	c.RequestTimeout = orDefault(c.RequestTimeout, DefaultRequestTimeout)
	c.MinRestartDelay = orDefault(c.MinRestartDelay, DefaultMinRestartDelay)
	c.MaxRestartDelay = max(orDefault(c.MaxRestartDelay, DefaultMaxRestartDelay), c.MinRestartDelay)
	c.PingInterval = orDefault(c.PingInterval, DefaultPingInterval)
	c.PingTimeout = orDefault(c.PingTimeout, DefaultPingTimeout)
	c.InitializeTimeout = orDefault(c.InitializeTimeout, DefaultInitializeTimeout)
	if c.ClientVersion == "" {
		c.ClientVersion = "devel"
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c, nil
}

// orDefault is v, or def when v is not positive.
func orDefault[T ~int64 | ~int](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
