package integration

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/bridge"
	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
)

// BenchmarkToolCall is what the pod adds to a tool call (issue 29,
// BENCHMARKS.md): the same tools/call of the same server
// (testdata/gomcpserver's echo, over stdio), made directly by the Go
// SDK's client, and made through the pod, by a participant's mcp/request
// to mcpp bridge (in process) and its mcp/response back, over an
// in-process gateway with history on. Each reports the median and the
// 99th percentile of its round trips.
//
//	go test -run '^$' -bench BenchmarkToolCall -benchtime 3000x ./integration/
func BenchmarkToolCall(b *testing.B) {
	server := goServer(b)
	args := map[string]any{"message": "hello"}
	b.Run("direct", func(b *testing.B) {
		ctx := context.Background()
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(server)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
			if err != nil || res.IsError {
				b.Fatalf("echo: %v %v", err, res)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatency(b, lat)
	})
	b.Run("pod", func(b *testing.B) {
		caller := benchBridge(b, server, "bench-tools")
		payload := bridgetest.ToolCall(1, "echo", args)
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if text := caller.Call("tools", payload).Text(b); text != "Echo: hello" {
				b.Fatalf("echo answered %q", text)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatency(b, lat)
	})
}

// benchBridge starts an in-process gateway (history on) and, in pod, mcpp
// bridge (in process) as participant tools in front of server over stdio,
// until b ends, and returns a caller in the pod once the server answers.
func benchBridge(b *testing.B, server, pod string) *bridgetest.Requester {
	ws := benchGateway(b)
	caller := bridgetest.Dial(b, ws, pod, "caller")
	br, err := bridge.New(bridge.Config{Gateway: ws, Client: client.Options{Pod: pod, Participant: "tools"},
		Server: bridge.Server{Command: []string{server}}, Logf: func(string, ...any) {}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	caller.AwaitJoin("tools")
	caller.AwaitUp("tools")
	return caller
}

// reportLatency reports the median and the 99th percentile of lat, in
// microseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkElicitation is what the pod adds to a call whose server asks
// its user one question (issue 35, BENCHMARKS.md): testdata/gomcpserver's
// ask_name over stdio, made directly by the Go SDK's client with an
// elicitation handler that answers at once, and made through the pod by a
// participant that answers the bridge's question as soon as it arrives
// (its mcp/request, the question's mcp/request back, its mcp/response,
// the answer). Both speak MCP 2026-07-28 to the server (the question is an
// input request of the call's result, and the call is sent again with
// the answer). Each reports the median and the 99th percentile.
//
//	go test -run '^$' -bench BenchmarkElicitation -benchtime 2000x ./integration/
func BenchmarkElicitation(b *testing.B) {
	server := goServer(b)
	const want = "Hello, Bench (state asked)"
	b.Run("direct", func(b *testing.B) {
		ctx := context.Background()
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Bench"}}, nil
			}})
		cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(server)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{}})
			if err != nil || res.IsError || len(res.Content) == 0 || res.Content[0].(*mcp.TextContent).Text != want {
				b.Fatalf("ask_name: %v %+v", err, res)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatency(b, lat)
	})
	b.Run("pod", func(b *testing.B) {
		caller := benchBridge(b, server, "bench-asks")
		payload := bridgetest.ToolCall(1, "ask_name", struct{}{})
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			p := caller.Send("tools", payload)
			caller.Reply(caller.Question(), `{"action":"accept","content":{"name":"Bench"}}`)
			if text := p.Await().Text(b); text != want {
				b.Fatalf("ask_name answered %q", text)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatency(b, lat)
	})
}
