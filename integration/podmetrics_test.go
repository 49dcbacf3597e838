package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// Metrics a team can alert on per pod (issue 36, docs/protocol.md section
// 7, "Metrics per pod"): what each pod did, as /metrics says it, and the
// bound on the pods it names.

// podSeries is one per-pod series as harness.MetricsOf names it:
// metric{pod="POD"} or, with more labels, all of them in the order of
// their names.
func podSeries(metric, pod string, more ...string) string {
	labels := append([]string{`pod="` + pod + `"`}, more...)
	slices.Sort(labels)
	return metric + `{` + strings.Join(labels, ",") + `}`
}

// TestPodMetrics: in a pod, members, envelopes and bytes in and out,
// refusals by code, MCP calls (answered by their recipient, or by the
// gateway for one absent) with their durations, and pending proposals
// are counted for it; with --metrics-max-pods 2 a third pod is counted
// under "other", and a pod that closes frees its slot and its series go.
func TestPodMetrics(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.MetricsMaxPods = 2 })
	metric := func(series string) float64 { return harness.MetricOrZero(t, g.URL, series) }
	want := func(series string, v float64) {
		t.Helper()
		harness.Eventually(t, 5*time.Second, fmt.Sprintf("%s = %v (it is %v)", series, v, metric(series)), func() bool { return metric(series) == v })
	}

	alice := g.Dial(t, "m1", "alice", "")
	bob := g.Dial(t, "m1", "bob", "")
	alice.AwaitPresence("join", "bob", 5*time.Second)
	other := g.Dial(t, "m2", "carol", "")
	third := g.Dial(t, "m3", "dave", "")
	want(podSeries("mcpp_pod_members", "m1"), 2)
	want(podSeries("mcpp_pod_members", "m2"), 1)
	want(podSeries("mcpp_pod_members", "other"), 1) // m3: two pods are named already
	want("mcpp_metrics_pods_named", 2)

	// Envelopes and bytes: what alice sent, as bob received it.
	in := 0
	for i := range 3 {
		id := fmt.Sprintf("e%d", i)
		alice.Send(map[string]any{"id": id, "kind": "chat", "payload": map[string]any{"text": strings.Repeat("x", 100*i)}})
		_, raw := bob.Relayed(id)
		in += len(raw)
	}
	want(podSeries("mcpp_pod_envelopes_in_total", "m1"), 3)
	want(podSeries("mcpp_pod_bytes_in_total", "m1"), float64(in))
	if out := metric(podSeries("mcpp_pod_envelopes_out_total", "m1")); out < 3 { // and alice's news of bob's join
		t.Fatalf("deliveries in m1: %v, want bob's 3 at least", out)
	}
	if out := metric(podSeries("mcpp_pod_bytes_out_total", "m1")); out < float64(in) {
		t.Fatalf("bytes out of m1: %v, want %d at least", out, in)
	}
	third.Send(map[string]any{"id": "o1", "kind": "chat"})
	want(podSeries("mcpp_pod_envelopes_in_total", "other"), 1)
	if v := harness.Metric(t, g.URL, podSeries("mcpp_pod_envelopes_in_total", "m3")); v != -1 {
		t.Fatalf("m3 is named: %v", v)
	}

	// Refusals, by code.
	bob.Send(map[string]any{"id": "r1", "kind": "system/x"})
	bob.ExpectErr("reserved_kind")
	want(podSeries("mcpp_pod_refusals_total", "m1", `code="reserved_kind"`), 1)

	// Calls: one bob answers, one to nobody, which the gateway answers.
	alice.Send(map[string]any{"id": "c1", "kind": "mcp/request", "to": []string{"bob"},
		"payload": map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "x"}}})
	bob.ExpectEnvelope("mcp/request", "c1")
	time.Sleep(20 * time.Millisecond) // the call waits: its duration is seen in the histogram
	bob.Send(map[string]any{"kind": "mcp/response", "correlation_id": "c1", "payload": map[string]any{"jsonrpc": "2.0", "id": 1, "result": map[string]any{}}})
	if m := alice.NextOf(); m.Kind() != "mcp/response" {
		t.Fatalf("alice got %v", m)
	}
	alice.Send(map[string]any{"id": "c2", "kind": "mcp/request", "to": []string{"nobody"},
		"payload": map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{"name": "x"}}})
	if m := alice.NextOf(); m.Kind() != "mcp/response" || m.Str("from") != "system:gateway" {
		t.Fatalf("alice got %v", m)
	}
	want(podSeries("mcpp_pod_tool_calls_total", "m1"), 2)
	want(podSeries("mcpp_pod_tool_calls_unanswered_total", "m1"), 1)
	want(podSeries("mcpp_pod_tool_call_duration_seconds_count", "m1"), 2)
	if fast := metric(podSeries("mcpp_pod_tool_call_duration_seconds_bucket", "m1", `le="0.005"`)); fast != 1 {
		t.Fatalf("calls answered within 5 ms: %v, want 1 (the gateway's answer; bob's took 20 ms)", fast)
	}

	// Pending proposals.
	alice.Send(map[string]any{"id": "p1", "kind": "mcp/proposal", "to": []string{"bob"},
		"payload": map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": map[string]any{"name": "x"}}})
	want(podSeries("mcpp_pod_proposals_pending", "m1"), 1)
	alice.Send(map[string]any{"id": "w1", "kind": "mcp/withdraw", "correlation_id": "p1", "payload": map[string]any{}})
	want(podSeries("mcpp_pod_proposals_pending", "m1"), 0)

	// Members leave; the pods close: m1's slot is freed and its series
	// deleted; the "other" members gauge goes back to 0; a pod opened
	// next is named.
	_ = bob.Conn.Close()
	want(podSeries("mcpp_pod_members", "m1"), 1)
	_ = alice.Conn.Close()
	_ = third.Conn.Close()
	harness.Eventually(t, 15*time.Second, "m1's series deleted", func() bool {
		return harness.Metric(t, g.URL, podSeries("mcpp_pod_envelopes_in_total", "m1")) == -1
	})
	want("mcpp_metrics_pods_named", 1)
	want(podSeries("mcpp_pod_members", "other"), 0)
	if v := harness.Metric(t, g.URL, podSeries("mcpp_pod_refusals_total", "m1", `code="reserved_kind"`)); v != -1 {
		t.Fatalf("m1's refusals are still served: %v", v)
	}
	g.Dial(t, "m4", "erin", "")
	want(podSeries("mcpp_pod_members", "m4"), 1)
	want(podSeries("mcpp_pod_members", "m2"), 1)
	_ = other
}
