package bridge_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/bridge"
	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway/gatewaytest"
)

// The tests of this package run a real gateway (gatewaytest), a bridge in
// process, and a real MCP server of the official Go SDK connected to the
// bridge over pipes (mcp.IOTransport); requesters are participants of the
// public client (package bridgetest). integration/bridge_test.go runs the
// bridge with server processes, and as the mcpp binary.

// inMemory is a Server.Transport that connects each start of the bridge
// to a new session of srv over a pair of pipes, and sends on crashes a
// function that breaks those pipes, as a crashed server process breaks
// its standard input and output.
func inMemory(t *testing.T, srv *mcp.Server, crashes chan<- func()) func() mcp.Transport {
	return func() mcp.Transport {
		toServer, fromBridge := io.Pipe()
		toBridge, fromServer := io.Pipe()
		_, err := srv.Connect(context.Background(), &mcp.IOTransport{Reader: toServer, Writer: fromServer}, nil)
		if err != nil {
			t.Errorf("connecting the server: %v", err)
		}
		if crashes != nil {
			crashes <- func() {
				_ = fromServer.CloseWithError(io.ErrUnexpectedEOF)
				_ = toServer.CloseWithError(io.ErrClosedPipe)
			}
		}
		return &mcp.IOTransport{Reader: toBridge, Writer: fromBridge}
	}
}

// startBridge runs a bridge as participant id of pod on gw until the test
// ends, and waits until its server answers.
func startBridge(t *testing.T, gw *gatewaytest.Server, pod, id string, edit func(*bridge.Config)) {
	t.Helper()
	var logs strings.Builder
	var mu sync.Mutex
	cfg := bridge.Config{
		Gateway: gw.WS,
		Client:  client.Options{Pod: pod, Participant: id},
		Logf: func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(&logs, format+"\n", args...)
		},
	}
	edit(&cfg)
	probe := bridgetest.Dial(t, gw.WS, pod, "probe-"+id)
	b, err := bridge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the bridge's Run: %v", err)
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("the bridge's log:\n%s", logs.String())
			mu.Unlock()
		}
	})
	probe.AwaitJoin(id)
	probe.AwaitUp(id)
}
