package pod

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/tracing"
	"github.com/mcpp/gateway/wire"
)

// A pod's spans (docs/protocol.md section 7, "Traces"), each continuing
// the trace context the envelope that caused it carries:
//
//	accept POD    a node takes an envelope into the pod's order (or refuses it)
//	deliver POD   a node queues a frame for its members, one span for all of them
//	              (messaging.batch.message_count); on every node that delivers it,
//	              continuing the accepting node's span, which the frame carries
//	METHOD TOOL   an MCP call, from its request to its answer (who answered:
//	              the recipient or the gateway), on the node that accepted it
//	proposal POD  a proposal, from pending to its decision (who, how, how long)
//	approve POD   an approval, whose released call continues it
//	kick POD, grant POD, revoke POD, and the gateway's join POD
//
// With tracing off (Traces.Tracer nil) none of it runs: the fan-out makes
// no allocation more (BenchmarkFanout's allocs/op). The trace context is
// never trusted for any decision: it only says where a span belongs.

// Traces are a node's tracing: its tracer, nil when tracing is off, and
// the count of malformed trace fields cut out of envelopes, which is
// kept either way.
type Traces struct {
	Tracer  trace.Tracer
	Dropped prometheus.Counter
}

// NewTraces makes a node's tracing with tracer (nil: off).
func NewTraces(tracer trace.Tracer) *Traces {
	return &Traces{Tracer: tracer, Dropped: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mcpp_trace_dropped_total",
		Help: "Malformed trace fields (W3C trace context) cut out of envelopes, which were relayed without them."})}
}

// tracer is the node's tracer, or nil when tracing is off.
func (n *Node) tracer() trace.Tracer {
	if n.Traces == nil {
		return nil
	}
	return n.Traces.Tracer
}

// podAttrs are the attributes every span of the pod has.
func (p *Pod) podAttrs(op, opType string) []attribute.KeyValue {
	return []attribute.KeyValue{
		tracing.MessagingSystem.String(tracing.System), tracing.MessagingOperationName.String(op),
		tracing.MessagingOperationType.String(opType), tracing.MessagingDestination.String(p.Name),
		tracing.Node.String(p.node.ID),
	}
}

// parent is a context whose remote span is tc's (none when tc is not
// valid).
func parent(tc envelope.TraceContext, state string) context.Context {
	sc := tracing.SpanContext(tc, state)
	if !sc.IsValid() {
		return context.Background()
	}
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

// startAccept starts the span of the envelope being accepted, under the
// trace context it carries, and gives the envelope the span's context
// when it carries none (Envelope.SetTrace: the receivers continue the
// gateway's span) and the frame the span's, for the nodes that deliver
// it. It counts a malformed trace field, which Fill cuts out. Call it
// before Fill.
func (in *ingress) startAccept() trace.Span {
	p, env := in.pod, &in.env
	if env.TraceMalformed {
		p.node.Traces.Dropped.Inc()
	}
	tr := p.node.tracer()
	if tr == nil {
		return nil
	}
	_, span := tr.Start(parent(env.TraceContext(), env.TraceState), p.spanNames.accept, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		// The envelope's strings are its sender's read buffer, which the
		// next message overwrites before the exporter reads them: copies.
		var a [maxSpanAttrs]attribute.KeyValue // one SetAttributes: the SDK copies them once
		attrs := append(append(a[:0], p.spanNames.acceptAttrs...),
			tracing.Sender.String(in.from.ID), tracing.Kind.String(strings.Clone(env.Kind)), tracing.MessagingBodySize.Int(len(env.Raw)))
		if env.TraceMalformed {
			attrs = append(attrs, tracing.TraceDropped.Bool(true))
		}
		span.SetAttributes(attrs...)
		in.countsFanout = true
	}
	sc := span.SpanContext()
	if !env.HasTrace() {
		env.SetTrace(tracing.Traceparent(sc), tracing.Tracestate(sc))
	}
	in.meta.Trace = tracing.Of(sc)
	return span
}

// endAccept ends the accept span: the envelope's id and context, or its
// refusal's code. Call it once the order lock is let go.
func (in *ingress) endAccept(span trace.Span, c *envelope.Context) {
	if span == nil {
		return
	}
	if !span.IsRecording() {
		span.End()
		return
	}
	if in.refused != "" {
		span.SetAttributes(tracing.ErrorType.String(string(in.refused)))
		span.SetStatus(codes.Error, string(in.refused))
	} else {
		var a [3]attribute.KeyValue
		attrs := append(a[:0], tracing.MessagingMessageID.String(strings.Clone(in.env.ID)))
		if c != nil && c.ID != "" {
			attrs = append(attrs, tracing.ContextID.String(strings.Clone(c.ID)))
		}
		if in.delivered >= 0 {
			attrs = append(attrs, tracing.MessagingBatchCount.Int(in.delivered))
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// startDeliver starts the span of a frame's delivery on this node, under
// the span of the node that accepted it, or returns nil (tracing off, or
// a frame no span caused). Call it with Pod.mu held.
func (p *Pod) startDeliver(m *envelope.Meta) trace.Span {
	tr := p.node.tracer()
	if tr == nil || !m.Trace.Valid() {
		return nil
	}
	_, span := tr.Start(parent(m.Trace, ""), p.spanNames.deliver, trace.WithSpanKind(trace.SpanKindProducer))
	if !span.IsRecording() {
		return nil // not sampled: nothing to end
	}
	var a [maxSpanAttrs]attribute.KeyValue
	span.SetAttributes(append(append(a[:0], p.spanNames.deliverAttrs...),
		tracing.MessagingMessageID.String(strings.Clone(m.ID)), tracing.Origin.String(strings.Clone(m.Origin)))...)
	return span
}

// maxSpanAttrs bounds the attributes an accept or deliver span is given
// at its start, in one array on the stack.
const maxSpanAttrs = 10

// spanNames are the names of a pod's spans of each operation ("accept
// lab"), and the attributes every span of the operation has, made once,
// when the pod opens: a span of the fan-out costs its own attributes
// alone.
type spanNames struct {
	accept, deliver           string
	acceptAttrs, deliverAttrs []attribute.KeyValue
}

func newSpanNames(n *Node, pod string) spanNames {
	s := spanNames{accept: tracing.OpAccept + " " + pod, deliver: tracing.OpDeliver + " " + pod}
	if n.tracer() != nil {
		common := func(op, opType string) []attribute.KeyValue {
			return []attribute.KeyValue{tracing.MessagingSystem.String(tracing.System), tracing.MessagingOperationName.String(op),
				tracing.MessagingOperationType.String(opType), tracing.MessagingDestination.String(pod), tracing.Node.String(n.ID)}
		}
		s.acceptAttrs, s.deliverAttrs = common(tracing.OpAccept, "receive"), common(tracing.OpDeliver, "send")
	}
	return s
}

// endDeliver ends a delivery's span with how many members took the
// frame.
func endDeliver(span trace.Span, n int) {
	if span != nil {
		span.SetAttributes(tracing.MessagingBatchCount.Int(n))
		span.End()
	}
}

// startCall starts the span of an MCP call this node accepted, from its
// request to its answer, under the request's span (the frame's). Call it
// with Pod.mu held.
func (p *Pod) startCall(c *call, ci *callInfo, m *envelope.Meta) {
	tr := p.node.tracer()
	if tr == nil || c.requester == wire.GatewayID && !m.Trace.Valid() {
		return // the gateway's own questions (Ask: a host's listings) start no trace of their own
	}
	r := gjson.GetManyBytes(ci.payload, "method", "params.name")
	method, name := r[0].Str, spanTarget(r[0].Str, r[1].Str)
	attrs := []attribute.KeyValue{tracing.MCPMethodName.String(method), tracing.JSONRPCRequestID.String(rpcIDString(c.rpcID)),
		tracing.Requester.String(c.requester), tracing.Recipient.String(c.recipient), tracing.MessagingDestination.String(p.Name),
		tracing.MessagingMessageID.String(strings.Clone(m.ID)), tracing.Node.String(p.node.ID)}
	if method == "tools/call" && name != "" {
		attrs = append(attrs, tracing.GenAIToolName.String(name), tracing.GenAIOperationName.String("execute_tool"))
	}
	_, c.span = tr.Start(parent(m.Trace, ""), strings.TrimSpace(method+" "+name), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...))
}

// spanTarget is what MCP's conventions put after the method in a span's
// name: a tool's or a prompt's name.
func spanTarget(method, name string) string {
	if method == "tools/call" || method == "prompts/get" {
		return name
	}
	return ""
}

// rpcIDString is a JSON-RPC id as jsonrpc.request.id has it: a string's
// value, a number's text.
func rpcIDString(id []byte) string {
	if r := gjson.ParseBytes(id); r.Type == gjson.String {
		return r.Str
	}
	return string(id)
}

// endCall ends a call's span: answered by its recipient (answer is its
// mcp/response's payload) or by the gateway (why is its reason), or left
// unanswered (why: cancelled, requester_left, pod_closed).
func endCall(c *call, by string, answer []byte, why string) {
	if c == nil || c.span == nil {
		return
	}
	span := c.span
	c.span = nil
	if by != "" {
		span.SetAttributes(tracing.AnsweredBy.String(by))
	}
	errType := why
	if answer != nil {
		r := gjson.GetManyBytes(answer, "error.code", "result.isError")
		switch {
		case r[0].Exists():
			errType = r[0].Raw
			span.SetAttributes(tracing.RPCStatusCode.String(r[0].Raw))
		case r[1].Bool():
			errType = "tool_error"
		}
	}
	if errType != "" {
		span.SetAttributes(tracing.ErrorType.String(errType))
		span.SetStatus(codes.Error, errType)
	}
	span.End()
}

// startProposal starts the span of a proposal this node accepted, from
// pending to its decision, under the proposal's span. Call it with Pod.mu
// held.
func (p *Pod) startProposal(pr *proposal, m *envelope.Meta) {
	tr := p.node.tracer()
	if tr == nil || pr == nil {
		return
	}
	r := gjson.GetManyBytes(pr.call, "method", "params.name")
	attrs := append(p.podAttrs("propose", "process"), tracing.ProposalID.String(pr.id), tracing.Proposer.String(pr.proposer),
		tracing.Recipient.String(pr.to), tracing.MCPMethodName.String(r[0].Str))
	if r[1].Str != "" {
		attrs = append(attrs, tracing.GenAIToolName.String(r[1].Str))
	}
	_, pr.span = tr.Start(parent(m.Trace, ""), "proposal "+p.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...))
}

// endProposalSpan ends a proposal's span with its decision: its state,
// who decided, how long it waited. Call it with Pod.mu held.
func endProposalSpan(pr *proposal) {
	if pr.span == nil {
		return
	}
	span := pr.span
	pr.span = nil
	span.SetAttributes(tracing.ProposalState.String(pr.state), tracing.DecidedBy.String(pr.by),
		tracing.ProposalWaitMS.Int64(timeNow().Sub(pr.created).Milliseconds()))
	if pr.reason != "" {
		span.SetAttributes(tracing.Outcome.String(pr.reason))
	}
	if pr.state != wire.ProposalApproved && pr.state != wire.ProposalFulfilled {
		span.SetStatus(codes.Error, pr.state)
	}
	span.End()
}

// scopeProposal notes how an approval decided pr (once, always) on its
// span, before it ends.
func scopeProposal(pr *proposal, scope string) {
	if pr != nil && pr.span != nil && scope != "" {
		pr.span.SetAttributes(tracing.ProposalScope.String(scope))
	}
}

// startDecision starts the span of a decision on pr by who (an approval,
// whose released call continues it), under the proposal's span, linked
// to the span of the request that decided it. It returns nil when
// tracing is off. Call it with Pod.mu held.
func (p *Pod) startDecision(pr *proposal, op, who, scope string, by envelope.TraceContext) trace.Span {
	tr := p.node.tracer()
	if tr == nil {
		return nil
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(append(p.podAttrs(op, "settle"),
		tracing.ProposalID.String(pr.id), tracing.DecidedBy.String(who), tracing.ProposalScope.String(scope),
		tracing.ProposalWaitMS.Int64(timeNow().Sub(pr.created).Milliseconds()))...)}
	if sc := tracing.SpanContext(by, ""); sc.IsValid() && sc.TraceID() != pr.trace.TraceID {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := tr.Start(parent(pr.trace, ""), op+" "+p.Name, opts...)
	return span
}

// traceEvent records what the pod decided under the span of the request
// that asked for it (a kick, a grant, a revoke): a span of its own, named
// op, with attrs. It returns the span's context, for the frame that
// carries the decision to the other nodes. Call it with Pod.mu held.
func (p *Pod) traceEvent(op string, from envelope.TraceContext, state string, attrs ...attribute.KeyValue) envelope.TraceContext {
	tr := p.node.tracer()
	if tr == nil {
		return envelope.TraceContext{}
	}
	_, span := tr.Start(parent(from, state), op+" "+p.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(p.podAttrs(op, "process"), attrs...)...))
	span.End()
	return tracing.Of(span.SpanContext())
}

// countFanout has commit count the envelope's deliveries on this node
// for the accept span (on), rather than make a span of its own, until
// it is told to stop (off): on a node that delivers what it accepts at
// once (OrderLocal) the fan-out happens inside the accept, and one span
// with its count says it, at half the cost of two (BENCHMARKS.md).
// Where the order is the stream's, the fan-out comes later, as every
// other node's, in a deliver span. Call it with Pod.mu held.
func (in *ingress) countFanout(on bool) {
	p := in.pod
	switch {
	case !in.countsFanout || !p.order.here():
	case on:
		p.fanoutTo = &in.delivered
	default:
		p.fanoutTo = nil // commit took it, unless it committed nothing here
	}
}
