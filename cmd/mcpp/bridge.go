package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/bridge"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/tracing"
)

var bridgeCommand = command{
	synopsis: "--pod NAME --participant ID [flags] -- COMMAND [ARGS...]\n       mcpp bridge --pod NAME --participant ID [flags] --url URL",
	summary:  "Put an MCP server in a pod: it answers the mcp/requests addressed to it.",
	usage: `bridge starts the MCP server COMMAND ARGS (over stdio), or connects to the
Streamable HTTP MCP server at --url, and joins the pod as the participant,
saying that it serves MCP (welcomes and presence events show
"serves": ["mcp"]). Everything after -- is the server's command line, as
it is:

  mcpp bridge --pod lab --participant everything -- npx -y @modelcontextprotocol/server-everything@2026.8.31
  mcpp bridge --pod lab --participant files --url http://127.0.0.1:3000/mcp

Each mcp/request addressed to the participant (to: [ID]) is a JSON-RPC
request for the server (tools/list, tools/call, resources/list,
resources/templates/list, resources/read, prompts/list, prompts/get, ping,
any other method it answers). The answer goes back to the requester
alone as an mcp/response, correlation_id the request's id, in the
request's context, its payload the server's JSON-RPC answer as it came
with the requester's id. The server's notifications go to the pod as
mcp/notification envelopes, except progress, which goes to the caller
alone. The bridge speaks the newest MCP revision the server offers
(2026-07-28 where it does: no initialize; --protocol asks for an older
one), and says which on standard error.

What the server asks its user while it handles a call (elicitation, or
2026-07-28's input requests) goes to the participant whose call caused it,
as an mcp/request of the bridge's to it alone, correlated to its call; its
mcp/response is the server's answer. Over stdio with several calls in
flight and nothing to say which one asks, the server gets error -32004,
data {"reason": "ambiguous_caller"}. Sampling and roots are answered
-32601 method not found: the bridge offers neither.

A server that exits, or stops answering (a ping every 15s), is started
again, after 0.5s, then twice as long each time it fails again, up to 30s.
While it is down, each request is answered at once with JSON-RPC error
-32000 and data {"reason": "server_down"}, as are the requests it had not
answered.

Bridge flags:
  --url URL                 a Streamable HTTP MCP server, instead of a command
  --max-in-flight N         requests at the server at once (default 256);
                            one more is answered at once with error -32003,
                            data {"reason": "too_many_in_flight", "limit": N}
  --request-timeout DURATION  how long an answer may take (default 2m; the
                            gateway's --mcp-request-timeout, 60s by default,
                            answers the requester first); then the request
                            is answered -32001 and cancelled at the server
  --protocol VERSION        the MCP revision to ask the server for (default:
                            the newest the two share)

The participant's capabilities must allow mcp/response* (mcp/response,
and MCPx's mcp/response:METHOD forms) and mcp/notification, and, for a
server that asks its callers questions, mcp/request of elicitation/create
(and notifications/cancelled, to call off a question whose call ended).
In a token file:
  {"token": "...", "participant": "everything", "capabilities": ["mcp/response*", "mcp/notification",
    {"kind": "mcp/request", "payload": {"method": ["elicitation/create", "notifications/cancelled"]}}]}

The server's standard error goes to bridge's; bridge says on it when the
server starts, stops and starts again, and when the gateway refuses an
envelope. A lost connection to the gateway is restored and resumed; the
answers wait meanwhile. On SIGINT or SIGTERM bridge answers the requests
in flight (server_down), stops the server (closing its standard input,
then SIGTERM) and leaves the pod: exit 0. It exits 1 when the gateway
refuses the connection or ends it for good (another connection took the
participant id, the participant was kicked).
`,
	run: runBridge,
}

func runBridge(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("bridge")
	var cf connFlags
	cf.register(fs, e)
	serverURL := fs.String("url", "", "")
	maxInFlight := fs.Int("max-in-flight", bridge.DefaultMaxInFlight, "")
	requestTimeout := fs.Duration("request-timeout", bridge.DefaultRequestTimeout, "")
	protocol := fs.String("protocol", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{msg: err.Error()}
	}
	if err := cf.check(); err != nil {
		return err
	}
	command := fs.Args()
	switch {
	case len(command) == 0 && *serverURL == "":
		return usagef("no MCP server: give its command after --, or --url URL")
	case len(command) > 0 && *serverURL != "":
		return usagef("give the server's command after --, or --url, not both")
	case *maxInFlight < 1:
		return usagef("--max-in-flight must be at least 1, not %d", *maxInFlight)
	case *requestTimeout < time.Millisecond:
		return usagef("--request-timeout must be positive, not %v", *requestTimeout)
	}
	if len(command) > 0 {
		if _, err := exec.LookPath(command[0]); err != nil {
			return usagef("the server's command %q: %v", command[0], err)
		}
	}
	stderr := &lockedWriter{w: e.stderr}
	// Its spans, under its own service name, when the OTEL_* variables
	// ask for traces (docs/protocol.md section 7, "Traces").
	traces, err := tracing.Start(ctx, "mcpp-bridge")
	if err != nil {
		return usagef("%v", err)
	}
	var tp trace.TracerProvider
	if traces != nil {
		tp = traces.TracerProvider()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), tracing.ShutdownTimeout)
			defer cancel()
			if err := traces.Shutdown(sctx); err != nil {
				fmt.Fprintf(stderr, "mcpp bridge: the last spans were not exported: %v\n", err)
			}
		}()
	}
	b, err := bridge.New(bridge.Config{
		Client: client.Options{Pod: cf.pod},
		Dial: func(ctx context.Context, opts client.Options) (*client.Client, error) {
			return cf.dial(ctx, opts)
		},
		Server:          bridge.Server{Command: command, Stderr: e.stderr, URL: *serverURL},
		MaxInFlight:     *maxInFlight,
		RequestTimeout:  *requestTimeout,
		ProtocolVersion: *protocol,
		TracerProvider:  tp,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "mcpp bridge: "+format+"\n", args...)
		},
	})
	if err != nil {
		return usagef("%v", err)
	}
	return b.Run(ctx)
}
