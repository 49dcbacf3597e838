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
		ws := benchGateway(b)
		const pod = "bench-tools"
		caller := bridgetest.Dial(b, ws, pod, "caller")
		br, err := bridge.New(bridge.Config{Gateway: ws, Client: client.Options{Pod: pod, Participant: "tools"},
			Server: bridge.Server{Command: []string{server}}, Logf: func(string, ...any) {}})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- br.Run(ctx) }()
		defer func() { cancel(); <-done }()
		caller.AwaitJoin("tools")
		caller.AwaitUp("tools")
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
