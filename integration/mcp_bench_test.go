package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// The MCP endpoint's figures (BENCHMARKS.md): how many pod_send round
// trips one MCP client makes a second, and how soon a pod_read waiting
// with wait_ms returns an envelope a WebSocket participant sent. Both run
// the SDK's client over loopback HTTP against an in-process gateway, with
// sessions (2025-11-25) and without (the SDK's newest protocol).

// benchMCP connects an MCP client to the benchmark gateway ws.
func benchMCP(b *testing.B, ws, pod, id, version string) *mcp.ClientSession {
	b.Helper()
	base := strings.TrimSuffix(strings.Replace(ws, "ws://", "http://", 1), "/ws")
	cs, err := harness.MCPDial(base, pod, id, harness.MCPOpts{Version: version})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}

// BenchmarkMCPSend is one pod_send round trip: the call, the envelope's
// checks and publication, the answer with its id.
func BenchmarkMCPSend(b *testing.B) {
	for _, v := range mcpVersions {
		b.Run(v.name, func(b *testing.B) {
			ws := benchGateway(b)
			cs := benchMCP(b, ws, "bench-mcp-send", "bob", v.version)
			args := map[string]any{"kind": "chat", "payload": map[string]any{"text": strings.Repeat("x", 200)}}
			ctx := context.Background()
			n, start := 0, time.Now()
			for b.Loop() {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pod_send", Arguments: args})
				if err != nil || res.IsError {
					b.Fatalf("pod_send: %v %v", err, res)
				}
				n++
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "sends/s")
		})
	}
}

// BenchmarkMCPReadLatency is the time from a WebSocket participant's send
// to the return of an MCP pod_read that was waiting (wait_ms) for it.
func BenchmarkMCPReadLatency(b *testing.B) {
	for _, v := range mcpVersions {
		b.Run(v.name, func(b *testing.B) {
			ws := benchGateway(b)
			pod := "bench-mcp-read-" + v.name
			cs := benchMCP(b, ws, pod, "bob", v.version)
			alice := benchDial(b, ws, pod, "participant=alice")
			defer alice.CloseNow()
			got := make(chan time.Time, 1)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for {
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pod_read", Arguments: map[string]any{"wait_ms": 30000}})
					select {
					case <-stop:
						return
					default:
					}
					if err != nil || res.IsError {
						b.Errorf("pod_read: %v %v", err, res)
						return
					}
					if s, _ := res.StructuredContent.(map[string]any); s != nil {
						if list, _ := s["envelopes"].([]any); len(list) > 0 {
							got <- time.Now()
						}
					}
				}
			}()
			ctx := context.Background()
			var lat []time.Duration
			i := 0
			for b.Loop() {
				// Let the reader's next pod_read reach its wait.
				time.Sleep(2 * time.Millisecond)
				sent := time.Now()
				msg := fmt.Sprintf(`{"id":"lat-%d","kind":"chat","payload":{"text":"ping"}}`, i)
				i++
				if err := alice.Write(ctx, []byte(msg)); err != nil {
					b.Fatal(err)
				}
				select {
				case at := <-got:
					lat = append(lat, at.Sub(sent))
				case <-time.After(10 * time.Second):
					b.Fatal("pod_read did not return the envelope within 10s")
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
