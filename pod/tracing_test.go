package pod

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/tracing"
	"github.com/mcpp/gateway/wire"
)

// The pod's spans, checked in process with the SDK's in-memory
// recorder: each span a user would look for in a trace backend, under
// the span it continues, with the attributes the conventions name.

const (
	sendersTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sendersTID   = "4bf92f3577b34da6a3ce929d0e0e4736"
	sendersSID   = "00f067aa0ba902b7"
)

// traced turns tracing on for n (before its pods open), every span
// sampled, recorded in memory.
func traced(t *testing.T, n *Node) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	n.Traces = NewTraces(tp.Tracer(tracing.Instrumentation))
	return rec
}

// spans are the recorded spans named name.
func spans(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// oneSpan is the one span named name that has attribute kv, waiting a
// moment for it (spans end as the pod goes on).
func oneSpan(t *testing.T, rec *tracetest.SpanRecorder, name string, kv attribute.KeyValue) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var found []sdktrace.ReadOnlySpan
		for _, s := range spans(rec, name) {
			if attr(s, kv.Key) == kv.Value.Emit() {
				found = append(found, s)
			}
		}
		if len(found) == 1 {
			return found[0]
		}
		if len(found) > 1 || time.Now().After(deadline) {
			var names []string
			for _, s := range rec.Ended() {
				names = append(names, s.Name())
			}
			t.Fatalf("%d spans %q with %s=%s; spans: %v", len(found), name, kv.Key, kv.Value.Emit(), names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// attr is a span's attribute, as text ("" when absent).
func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

// childOf fails unless s is a child of the span parent names.
func childOf(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	if s.Parent().SpanID() != parent.SpanID() || s.SpanContext().TraceID() != parent.TraceID() {
		t.Fatalf("%s: parent %s/%s, want %s/%s", s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID(), parent.TraceID(), parent.SpanID())
	}
}

// traceOf is the trace field of a received envelope.
func traceOf(v map[string]any) (parent, state string) {
	tr, _ := v["trace"].(map[string]any)
	parent, _ = tr["traceparent"].(string)
	state, _ = tr["tracestate"].(string)
	return parent, state
}

func traceParentOf(v map[string]any) string { p, _ := traceOf(v); return p }

// nextEnv is the next message the member received but its welcome and
// presence.
func (m *member) nextEnv() map[string]any {
	m.t.Helper()
	for {
		if v := m.nextOf(); v["kind"] != wire.KindWelcome {
			return v
		}
	}
}

// TestTraceAcceptAndDeliver: an envelope with a trace is accepted under
// the sender's span and relayed with its trace as sent; its fan-out is
// said by one span (here, the accept span: the node delivers at once),
// with how many members took it; an envelope without one is
// given the accepting span's, so that its receivers continue the
// gateway's trace; a malformed one is cut out and counted, never
// refused.
func TestTraceAcceptAndDeliver(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	rec := traced(t, n)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	bob := join(t, p, "bob", joinOpts{})
	carol := join(t, p, "carol", joinOpts{})

	alice.send(map[string]any{"id": "e1", "kind": "chat", "context": map[string]any{"id": "r1", "type": "reasoning"},
		"trace": map[string]any{"traceparent": sendersTrace, "tracestate": "ro=1"}, "payload": map[string]any{}})
	for _, m := range []*member{bob, carol} {
		if parent, state := traceOf(m.nextEnv()); parent != sendersTrace || state != "ro=1" {
			t.Fatalf("%s received trace %q %q, want the sender's as sent", m.id, parent, state)
		}
	}
	accept := oneSpan(t, rec, "accept lab", tracing.MessagingMessageID.String("e1"))
	tid, _ := trace.TraceIDFromHex(sendersTID)
	sid, _ := trace.SpanIDFromHex(sendersSID)
	childOf(t, accept, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	for k, want := range map[attribute.Key]string{tracing.MessagingSystem: "mcpp", tracing.MessagingDestination: "lab",
		tracing.MessagingOperationType: "receive", tracing.Sender: "alice", tracing.Kind: "chat", tracing.ContextID: "r1"} {
		if got := attr(accept, k); got != want {
			t.Errorf("accept: %s = %q, want %q", k, got, want)
		}
	}
	if accept.SpanKind() != trace.SpanKindConsumer || accept.SpanContext().TraceState().Get("ro") != "1" {
		t.Errorf("accept: kind %v, tracestate %q", accept.SpanKind(), accept.SpanContext().TraceState())
	}
	// One node delivers what it accepts at once: the accept span says
	// how many members took it, and no span of its own is made for that.
	if got := attr(accept, tracing.MessagingBatchCount); got != "2" {
		t.Errorf("accept: %s members took it, want 2 (bob, carol)", got)
	}
	if d := spans(rec, "deliver lab"); len(d) != 0 {
		t.Errorf("%d deliver spans on the node that accepted and delivered at once", len(d))
	}

	// Without a trace, the receivers get the accepting span's.
	alice.send(map[string]any{"id": "e2", "kind": "chat"})
	got, _ := traceOf(bob.nextEnv())
	carol.nextEnv()
	accept2 := oneSpan(t, rec, "accept lab", tracing.MessagingMessageID.String("e2"))
	if got != tracing.Traceparent(accept2.SpanContext()) || accept2.Parent().IsValid() {
		t.Fatalf("bob received trace %q, want the gateway's accept span %q (a root)", got, tracing.Traceparent(accept2.SpanContext()))
	}

	// A malformed one: relayed without it, counted, noted on the span.
	alice.send(map[string]any{"id": "e3", "kind": "chat", "trace": map[string]any{"traceparent": strings.ToUpper(sendersTrace)}})
	v := bob.nextEnv()
	carol.nextEnv()
	accept3 := oneSpan(t, rec, "accept lab", tracing.MessagingMessageID.String("e3"))
	if parent, _ := traceOf(v); v["id"] != "e3" || parent != tracing.Traceparent(accept3.SpanContext()) {
		t.Fatalf("bob received %v, want e3 with the gateway's trace in place of the malformed one", v)
	}
	if attr(accept3, tracing.TraceDropped) != "true" || counted(n.Traces.Dropped) != 1 {
		t.Fatalf("a malformed trace: span says %q, counted %v", attr(accept3, tracing.TraceDropped), counted(n.Traces.Dropped))
	}

	// A refusal ends its span with its code.
	alice.send(map[string]any{"id": "e1", "kind": "chat"})
	if v := alice.nextEnv(); v["kind"] != wire.KindError {
		t.Fatalf("alice got %v, want duplicate_id", v)
	}
	refused := oneSpan(t, rec, "accept lab", tracing.ErrorType.String(string(wire.CodeDuplicateID)))
	if refused.Status().Code != 1 { // codes.Error
		t.Fatalf("a refusal's span: status %v", refused.Status())
	}
}

// TestTraceOff: with tracing off nothing is filled in and no span made,
// but a malformed trace is still cut out and counted.
func TestTraceOff(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	bob := join(t, p, "bob", joinOpts{})
	alice.send(map[string]any{"id": "e1", "kind": "chat"})
	if v := bob.nextEnv(); v["trace"] != nil {
		t.Fatalf("tracing off, the gateway filled a trace: %v", v)
	}
	alice.send(map[string]any{"id": "e2", "kind": "chat", "trace": map[string]any{"traceparent": sendersTrace}})
	if v := bob.nextEnv(); traceParentOf(v) != sendersTrace {
		t.Fatalf("tracing off, the sender's trace is relayed as sent: got %v", v)
	}
	alice.send(map[string]any{"id": "e3", "kind": "chat", "trace": map[string]any{"traceparent": "00-0-0-01"}})
	if v := bob.nextEnv(); v["id"] != "e3" || v["trace"] != nil || counted(n.Traces.Dropped) != 1 {
		t.Fatalf("a malformed trace with tracing off: %v, counted %v", v, counted(n.Traces.Dropped))
	}
}

// TestTraceFanoutAllocations: with tracing off, an envelope that carries
// a trace costs the fan-out no allocation more than one that does not
// (BenchmarkFanout says how many there are).
func TestTraceFanoutAllocations(t *testing.T) {
	n, _ := testNode(t, 0, nil)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	for i := range 10 {
		join(t, p, "r"+string(rune('0'+i)), joinOpts{noRead: true})
	}
	// The members' writers are not woken while the sender holds its
	// flushes: what is counted is the fan-out's alone.
	alice.from.Hold = true
	// The same size, the same fields but for the trace's name: an
	// unknown field, relayed as it is.
	msg := []byte(`{"kind":"chat","id":"x","trnce":{"traceparent":"` + sendersTrace + `"},"payload":{"text":"hello"}}`)
	msgTraced := []byte(`{"kind":"chat","id":"x","trace":{"traceparent":"` + sendersTrace + `"},"payload":{"text":"hello"}}`)
	buf := make([]byte, len(msg))
	plain := testing.AllocsPerRun(200, func() { p.Handle(alice.from, append(buf[:0], msg...), false) })
	withTrace := testing.AllocsPerRun(200, func() { p.Handle(alice.from, append(buf[:0], msgTraced...), false) })
	if withTrace > plain {
		t.Fatalf("tracing off: %v allocations an envelope with a trace, %v without", withTrace, plain)
	}
}

// TestTraceCall: an MCP call is one span from its request to its answer,
// named after MCP's conventions, saying who answered: the recipient, or
// the gateway for a recipient that is not there.
func TestTraceCall(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	rec := traced(t, n)
	p := openPod(t, n, "lab")
	alice := join(t, p, "alice", joinOpts{})
	srv := join(t, p, "srv", joinOpts{serves: []string{wire.ServesMCP}})
	alice.send(map[string]any{"id": "c1", "kind": "mcp/request", "to": []string{"srv"}, "trace": map[string]any{"traceparent": sendersTrace},
		"payload": map[string]any{"jsonrpc": "2.0", "id": "r-1", "method": "tools/call", "params": map[string]any{"name": "echo", "arguments": map[string]any{}}}})
	req := srv.nextEnv()
	if parent, _ := traceOf(req); parent != sendersTrace {
		t.Fatalf("the server received trace %q", parent)
	}
	srv.send(map[string]any{"kind": "mcp/response", "correlation_id": "c1",
		"payload": map[string]any{"jsonrpc": "2.0", "id": "r-1", "error": map[string]any{"code": -32602, "message": "bad"}}})
	alice.nextEnv()
	call := oneSpan(t, rec, "tools/call echo", tracing.JSONRPCRequestID.String("r-1"))
	childOf(t, call, oneSpan(t, rec, "accept lab", tracing.MessagingMessageID.String("c1")).SpanContext())
	for k, want := range map[attribute.Key]string{tracing.MCPMethodName: "tools/call", tracing.GenAIToolName: "echo",
		tracing.AnsweredBy: "recipient", tracing.ErrorType: "-32602", tracing.Requester: "alice", tracing.Recipient: "srv"} {
		if got := attr(call, k); got != want {
			t.Errorf("call: %s = %q, want %q", k, got, want)
		}
	}

	alice.send(map[string]any{"id": "c2", "kind": "mcp/request", "to": []string{"nobody"},
		"payload": map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}})
	if v := alice.nextEnv(); v["from"] != wire.GatewayID {
		t.Fatalf("alice got %v, want the gateway's answer", v)
	}
	absent := oneSpan(t, rec, "tools/list", tracing.JSONRPCRequestID.String("7"))
	if attr(absent, tracing.AnsweredBy) != "gateway" || attr(absent, tracing.ErrorType) != wire.MCPReasonRecipientAbsent {
		t.Fatalf("a call to nobody: answered by %q, error %q", attr(absent, tracing.AnsweredBy), attr(absent, tracing.ErrorType))
	}
}

// TestTraceProposal: a proposal's span runs from pending to its
// decision and says who decided, how and how long it waited; the
// approval is a span of its own under the proposal's trace, linked to
// the approver's, and the call it releases continues it, trace field
// included.
func TestTraceProposal(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	rec := traced(t, n)
	p := openPod(t, n, "lab")
	agent := join(t, p, "agent", joinOpts{})
	agent.from.Caps = capability.MustCompile(wire.Kinds("mcp/proposal"))
	boss := join(t, p, "boss", joinOpts{})
	srv := join(t, p, "srv", joinOpts{serves: []string{wire.ServesMCP}})
	call := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "deploy"}}
	agent.send(map[string]any{"id": "p1", "kind": "mcp/proposal", "to": []string{"srv"}, "trace": map[string]any{"traceparent": sendersTrace}, "payload": call})
	var digest string
	for digest == "" {
		if v := boss.nextEnv(); v["kind"] == wire.KindProposal {
			digest, _ = v["payload"].(map[string]any)["digest"].(string)
		}
	}
	time.Sleep(20 * time.Millisecond) // a wait to see
	const approversTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	boss.send(map[string]any{"id": "a1", "kind": wire.RequestApprove, "trace": map[string]any{"traceparent": approversTrace},
		"payload": map[string]any{"proposal": "p1", "digest": digest}})
	var released map[string]any
	for released == nil {
		if v := srv.nextEnv(); v["kind"] == wire.KindMCPRequest {
			released = v
		}
	}
	proposal := oneSpan(t, rec, "proposal lab", tracing.ProposalID.String("p1"))
	childOf(t, proposal, oneSpan(t, rec, "accept lab", tracing.MessagingMessageID.String("p1")).SpanContext())
	for k, want := range map[attribute.Key]string{tracing.ProposalState: "approved", tracing.DecidedBy: "boss",
		tracing.ProposalScope: "once", tracing.Proposer: "agent", tracing.GenAIToolName: "deploy"} {
		if got := attr(proposal, k); got != want {
			t.Errorf("proposal: %s = %q, want %q", k, got, want)
		}
	}
	if wait := attr(proposal, tracing.ProposalWaitMS); wait == "" || wait == "0" {
		t.Errorf("proposal: waited %q ms", wait)
	}
	approve := oneSpan(t, rec, "approve lab", tracing.ProposalID.String("p1"))
	if approve.SpanContext().TraceID().String() != sendersTID || len(approve.Links()) != 1 ||
		approve.Links()[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("approve: trace %s, links %v: want the proposal's trace, linked to the approver's", approve.SpanContext().TraceID(), approve.Links())
	}
	if parent, _ := traceOf(released); parent != tracing.Traceparent(approve.SpanContext()) {
		t.Fatalf("the released call carries trace %q, want the approval's %q", parent, tracing.Traceparent(approve.SpanContext()))
	}
	srv.send(map[string]any{"kind": "mcp/response", "correlation_id": released["id"], "payload": map[string]any{"jsonrpc": "2.0", "id": 1, "result": map[string]any{}}})
	callSpan := oneSpan(t, rec, "tools/call deploy", tracing.MessagingMessageID.String(released["id"].(string)))
	childOf(t, callSpan, approve.SpanContext())
	if attr(callSpan, tracing.AnsweredBy) != "recipient" {
		t.Fatalf("the released call: answered by %q", attr(callSpan, tracing.AnsweredBy))
	}
}

// TestTraceKickAndGrant: a kick and a grant are spans under the request
// that made them.
func TestTraceKickAndGrant(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	rec := traced(t, n)
	p := openPod(t, n, "lab")
	boss := join(t, p, "boss", joinOpts{})
	bot := join(t, p, "bot", joinOpts{})
	boss.send(map[string]any{"id": "g1", "kind": wire.KindGrant, "trace": map[string]any{"traceparent": sendersTrace},
		"payload": map[string]any{"recipient": "bot", "capabilities": []string{"chat"}}})
	grant := oneSpan(t, rec, "grant lab", tracing.Grantee.String("bot"))
	childOf(t, grant, oneSpan(t, rec, "accept lab", tracing.MessagingMessageID.String("g1")).SpanContext())
	if attr(grant, tracing.Grantor) != "boss" {
		t.Fatalf("grant: grantor %q", attr(grant, tracing.Grantor))
	}
	boss.send(map[string]any{"id": "k1", "kind": wire.RequestKick, "trace": map[string]any{"traceparent": sendersTrace},
		"payload": map[string]any{"participant": "bot", "reason": "spam"}})
	kick := oneSpan(t, rec, "kick lab", tracing.Participant.String("bot"))
	if kick.Parent().SpanID().String() != sendersSID || attr(kick, tracing.KickedBy) != "boss" || attr(kick, tracing.Outcome) != "spam" {
		t.Fatalf("kick: parent %s, by %q, reason %q", kick.Parent().SpanID(), attr(kick, tracing.KickedBy), attr(kick, tracing.Outcome))
	}
	_ = bot
}

// TestTraceAcrossNodes: the nodes that deliver an envelope continue the
// span of the node that accepted it, which its frame carries: one trace.
func TestTraceAcrossNodes(t *testing.T) {
	c := newTestCluster(t, 2)
	recs := []*tracetest.SpanRecorder{traced(t, c.nodes[0]), traced(t, c.nodes[1])}
	pa, pb := c.open(c.nodes[0], "lab"), c.open(c.nodes[1], "lab")
	alice := c.join(pa, "alice", joinOpts{})
	bob := c.join(pb, "bob", joinOpts{})
	alice.send(map[string]any{"id": "x1", "kind": "chat", "trace": map[string]any{"traceparent": sendersTrace}})
	if v := bob.nextEnv(); v["id"] != "x1" {
		t.Fatalf("bob got %v", v)
	}
	accept := oneSpan(t, recs[0], "accept lab", tracing.MessagingMessageID.String("x1"))
	remote := oneSpan(t, recs[1], "deliver lab", tracing.MessagingMessageID.String("x1"))
	childOf(t, remote, accept.SpanContext())
	if attr(remote, tracing.Node) != "node-b" || attr(remote, tracing.Origin) != "node-a" || attr(remote, tracing.MessagingBatchCount) != "1" {
		t.Fatalf("node-b's delivery: node %q, origin %q, %s members", attr(remote, tracing.Node), attr(remote, tracing.Origin), attr(remote, tracing.MessagingBatchCount))
	}
	childOf(t, oneSpan(t, recs[0], "deliver lab", tracing.MessagingMessageID.String("x1")), accept.SpanContext())
}
