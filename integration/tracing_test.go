package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The traces of a pod in a real trace backend: Jaeger (its Go module,
// built once and kept: testdata/jaeger), OTLP in, its query API out. The
// gateway, mcpp bridge and the Go SDK server behind it are real
// processes, configured by the OTEL_* variables alone, as an operator
// runs them; the test is the MCP host, and exports its own span of the
// call. The pod's spans are checked one by one in process (package pod's
// tracing tests); here, that they make one trace, across processes and
// nodes.

// tracedEnv is what turns tracing on in a process: OTLP over HTTP or
// gRPC to j, exported in batches every 100 ms.
func tracedEnv(j *harness.JaegerProc, grpc bool) []string {
	if grpc {
		return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLPGRPC, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=100"}
	}
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLPHTTP, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_BSP_SCHEDULE_DELAY=100"}
}

// hostTracer is the MCP host's tracing: its spans go to j as the
// service mcp-host.
func hostTracer(t *testing.T, j *harness.JaegerProc) trace.Tracer {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(j.OTLPHTTP+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("mcp-host"))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer("mcp-host")
}

// tracedCall is the scenario of the trace tests: an MCP host on the
// host's gateway that may only propose calls its server's tool (the
// test's span, whose context goes in the call's _meta), which becomes a
// proposal; boss, on the bridge's gateway, approves it; the call goes
// through mcpp bridge to the Go SDK server and its answer back to the
// host. It returns the id of the host's trace.
func tracedCall(t *testing.T, j *harness.JaegerProc, hostGW, bridgeGW *harness.Gateway, pod string) string {
	t.Helper()
	boss := bridgeGW.DialToken(t, pod, "boss-t", true, "routing=directed")
	probe := bridgetest.DialWith(t, bridgeGW.WS, client.Options{Pod: pod, Token: "boss-t", Observe: true})
	startBridgeProc(t, bridgeGW, probe, pod, "tools", []string{"--token", "tools-t"}, goServer(t))
	host := harness.MCPConnect(t, hostGW.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("agent-t")})
	harness.Eventually(t, 10*time.Second, "the host lists the server's tool", func() bool {
		return slices.Contains(toolNamesOf(t, host), "tools__echo")
	})

	ctx, span := hostTracer(t, j).Start(context.Background(), "call tools__echo", trace.WithSpanKind(trace.SpanKindClient))
	sc := span.SpanContext()
	done := make(chan error, 1)
	var text string
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		res, err := host.CallTool(cctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"message": "traced"},
			Meta: mcp.Meta{"traceparent": fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())}})
		if err == nil && len(res.Content) > 0 {
			text = res.Content[0].(*mcp.TextContent).Text
		}
		done <- err
	}()
	var id, digest string
	for deadline := time.Now().Add(20 * time.Second); id == "" && time.Now().Before(deadline); {
		if m := boss.Next(time.Until(deadline)); m != nil && m.Kind() == "system/proposal" && m.Payload()["state"] == "pending" {
			id, digest = m.Payload()["proposal"].(string), digestOf(t, m)
		}
	}
	if id == "" {
		t.Fatal("boss was told of no proposal")
	}
	time.Sleep(300 * time.Millisecond) // the person reads it
	request(t, boss, approval("approve-1", id, digest, ""))
	if err := <-done; err != nil || text != "Echo: traced" {
		t.Fatalf("the host's call: %v %q", err, text)
	}
	span.End()
	return sc.TraceID().String()
}

// traceHas waits until Jaeger's trace holds a span of each want (a
// service and an operation, "mcpp-gateway tools/call echo"), and returns
// the trace's spans.
func traceHas(t *testing.T, j *harness.JaegerProc, traceID string, want []string) []*harness.JaegerSpan {
	t.Helper()
	var spans []*harness.JaegerSpan
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans = j.Trace(t, traceID)
		missing = missing[:0]
		for _, w := range want {
			if !slices.ContainsFunc(spans, func(s *harness.JaegerSpan) bool { return s.Service+" "+s.OperationName == w }) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			return spans
		}
		if time.Now().After(deadline) {
			var have []string
			for _, s := range spans {
				have = append(have, s.Service+" "+s.OperationName)
			}
			t.Fatalf("trace %s lacks %q; it has %q", traceID, missing, have)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// span is the one span of the trace whose service and operation are
// named so and whose tags have each key=value of tags.
func span(t *testing.T, spans []*harness.JaegerSpan, name string, tags ...string) *harness.JaegerSpan {
	t.Helper()
	var found []*harness.JaegerSpan
	for _, s := range spans {
		if s.Service+" "+s.OperationName != name {
			continue
		}
		ok := true
		for _, kv := range tags {
			k, v, _ := strings.Cut(kv, "=")
			ok = ok && s.Tag(k) == v
		}
		if ok {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %q with %v in the trace", len(found), name, tags)
	}
	return found[0]
}

// parentIs fails unless child's parent is parent.
func parentIs(t *testing.T, child, parent *harness.JaegerSpan) {
	t.Helper()
	if child.Parent() != parent.SpanID {
		t.Fatalf("%s %s's parent is %s, want %s %s (%s)", child.Service, child.OperationName, child.Parent(), parent.Service, parent.OperationName, parent.SpanID)
	}
}

// checkToolCallTrace checks the one trace of the scenario: the host's
// call, the gateway's MCP span of it, the proposal's wait and decision,
// the relayed request and its delivery, the bridge's call of the server,
// the server's span (seen through _meta), and the answer.
func checkToolCallTrace(t *testing.T, j *harness.JaegerProc, traceID, pod string) []*harness.JaegerSpan {
	t.Helper()
	gw := func(op string) string { return "mcpp-gateway " + op + " " + pod }
	spans := traceHas(t, j, traceID, []string{"mcp-host call tools__echo", "mcpp-gateway tools/call tools__echo",
		gw("accept"), gw("proposal"), gw("approve"), gw("deliver"), "mcpp-gateway tools/call echo",
		"mcpp-bridge tools/call echo", "gomcpserver tools/call echo"})
	host := span(t, spans, "mcp-host call tools__echo")
	mcpSpan := span(t, spans, "mcpp-gateway tools/call tools__echo")
	parentIs(t, mcpSpan, host)
	proposal := span(t, spans, gw("proposal"), "mcpp.proposal.state=approved", "mcpp.proposal.decided_by=boss", "mcpp.proposal.scope=once", "mcpp.proposal.proposer=agent")
	acceptProposal := span(t, spans, gw("accept"), "mcpp.kind=mcp/proposal")
	parentIs(t, acceptProposal, mcpSpan)
	parentIs(t, proposal, acceptProposal)
	if proposal.Duration < 300_000 {
		t.Errorf("the proposal waited %d µs, less than the 300 ms before the approval", proposal.Duration)
	}
	approve := span(t, spans, gw("approve"), "mcpp.proposal.decided_by=boss")
	parentIs(t, approve, acceptProposal)
	call := span(t, spans, "mcpp-gateway tools/call echo", "mcpp.call.answered_by=recipient", "gen_ai.tool.name=echo")
	parentIs(t, call, approve)
	bridgeCall := span(t, spans, "mcpp-bridge tools/call echo")
	parentIs(t, bridgeCall, approve) // the released request's trace field
	parentIs(t, span(t, spans, "gomcpserver tools/call echo"), bridgeCall)
	answer := span(t, spans, gw("accept"), "mcpp.kind=mcp/response")
	parentIs(t, answer, bridgeCall)
	if answer.Tag("mcpp.sender") != "tools" {
		t.Errorf("the answer's sender: %q", answer.Tag("mcpp.sender"))
	}
	return spans
}

// TestTraceToolCallInJaeger: an MCP host's call with a traceparent,
// through the pod to mcpp bridge and a Go SDK server, approved by a
// person as a proposal, is one trace in Jaeger.
func TestTraceToolCallInJaeger(t *testing.T) {
	j := harness.StartJaeger(t)
	for _, kv := range tracedEnv(j, false) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // mcpp bridge and its server (started with the test's environment)
	}
	gp := harness.StartGatewayProc(t, tracedEnv(j, false), "--listen", "127.0.0.1:0", "--tokens", proposalTokens(t), "--history", "1000")
	const pod = "traced"
	traceID := tracedCall(t, j, gp.GW, gp.GW, pod)
	spans := checkToolCallTrace(t, j, traceID, pod)
	traceScreenshot(t, traceID, spans)
}

// TestTraceToolCallAcrossNodes: the same across two nodes of a cluster,
// one exporting over OTLP/HTTP, the other over OTLP/gRPC: the host on
// node 1, the bridge and the person who approves on node 2; each node's
// spans are in the one trace, node 2 delivering what node 1 accepted.
func TestTraceToolCallAcrossNodes(t *testing.T) {
	j := harness.StartJaeger(t)
	for _, kv := range tracedEnv(j, false) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	tokens := proposalTokens(t)
	nodes := startTracedCluster(t, [][]string{tracedEnv(j, false), tracedEnv(j, true)}, "--tokens", tokens)
	const pod = "traced-cluster"
	traceID := tracedCall(t, j, nodes[0].GW, nodes[1].GW, pod)
	spans := checkToolCallTrace(t, j, traceID, pod)
	nodeOf := map[string]bool{}
	for _, s := range spans {
		if s.Service == "mcpp-gateway" && s.Tag("mcpp.node") != "" {
			nodeOf[s.Tag("mcpp.node")] = true
		}
	}
	if len(nodeOf) != 2 {
		t.Fatalf("the trace has spans of nodes %v, want both", nodeOf)
	}
	// The proposal was accepted on node 1: node 2 delivered it to boss,
	// under node 1's span.
	accept := span(t, spans, "mcpp-gateway accept "+pod, "mcpp.kind=mcp/proposal")
	var remote *harness.JaegerSpan
	for _, s := range spans {
		if s.OperationName == "deliver "+pod && s.Parent() == accept.SpanID && s.Tag("mcpp.node") != accept.Tag("mcpp.node") {
			remote = s
		}
	}
	if remote == nil || remote.Tag("mcpp.origin") != accept.Tag("mcpp.node") {
		t.Fatalf("no delivery by the other node under the accepting node's span %s", accept.SpanID)
	}
}

// startTracedCluster starts a cluster of len(envs) nodes, node i with
// envs[i], and waits until each serves pods.
func startTracedCluster(t *testing.T, envs [][]string, extra ...string) []*harness.GatewayProc {
	t.Helper()
	for try := 1; ; try++ {
		cports := make([]int, len(envs))
		var routes []string
		for i := range cports {
			cports[i] = harness.FreePort(t)
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cports[i]))
		}
		nodes := make([]*harness.GatewayProc, len(envs))
		var err error
		for i := range nodes {
			args := append([]string{"--listen", "127.0.0.1:0", "--cluster-name", "mcpp-traced", "--history", "1000",
				"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", cports[i]), "--routes", strings.Join(routes, ","),
				"--cluster-heartbeat", "200ms"}, extra...)
			if nodes[i], err = harness.TryStartGatewayProc(t, envs[i], args...); err != nil {
				break
			}
		}
		if err != nil {
			for _, n := range nodes {
				if n != nil {
					n.Stop()
				}
			}
			if !harness.PortTaken(err) || try == 3 {
				t.Fatal(err)
			}
			continue
		}
		t.Cleanup(func() {
			if t.Failed() {
				for i, n := range nodes {
					t.Logf("node %d's log:\n%s", i+1, n.Stderr)
				}
			}
		})
		for _, n := range nodes {
			n.WaitHealthy(60 * time.Second)
		}
		return nodes
	}
}
