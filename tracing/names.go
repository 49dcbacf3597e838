package tracing

import "go.opentelemetry.io/otel/attribute"

// The attributes of the gateway's spans. The messaging ones are
// OpenTelemetry's messaging conventions (a pod is a destination, an
// envelope a message); the MCP ones its conventions for MCP (mcp.*,
// jsonrpc.*, gen_ai.*, error.type); mcpp.* are the pod's own, for what
// neither names (who sent an envelope, in which sub-context, who
// answered a call, who decided a proposal).
const (
	MessagingSystem         = attribute.Key("messaging.system")
	MessagingOperationName  = attribute.Key("messaging.operation.name")
	MessagingOperationType  = attribute.Key("messaging.operation.type")
	MessagingDestination    = attribute.Key("messaging.destination.name")
	MessagingMessageID      = attribute.Key("messaging.message.id")
	MessagingBodySize       = attribute.Key("messaging.message.body.size")
	MessagingConversationID = attribute.Key("messaging.message.conversation_id")
	MessagingBatchCount     = attribute.Key("messaging.batch.message_count")
	MessagingClientID       = attribute.Key("messaging.client.id")

	MCPMethodName      = attribute.Key("mcp.method.name")
	MCPSessionID       = attribute.Key("mcp.session.id")
	GenAIToolName      = attribute.Key("gen_ai.tool.name")
	GenAIOperationName = attribute.Key("gen_ai.operation.name")
	JSONRPCRequestID   = attribute.Key("jsonrpc.request.id")
	RPCStatusCode      = attribute.Key("rpc.response.status_code")
	ErrorType          = attribute.Key("error.type")

	Sender         = attribute.Key("mcpp.sender")
	Kind           = attribute.Key("mcpp.kind")
	ContextID      = attribute.Key("mcpp.context.id")
	Node           = attribute.Key("mcpp.node")
	Origin         = attribute.Key("mcpp.origin")
	Participant    = attribute.Key("mcpp.participant")
	Transport      = attribute.Key("mcpp.transport")
	Outcome        = attribute.Key("mcpp.outcome")
	Requester      = attribute.Key("mcpp.call.requester")
	Recipient      = attribute.Key("mcpp.call.recipient")
	AnsweredBy     = attribute.Key("mcpp.call.answered_by")
	Answer         = attribute.Key("mcpp.call.answer")
	ProposalID     = attribute.Key("mcpp.proposal.id")
	Proposer       = attribute.Key("mcpp.proposal.proposer")
	ProposalState  = attribute.Key("mcpp.proposal.state")
	DecidedBy      = attribute.Key("mcpp.proposal.decided_by")
	ProposalScope  = attribute.Key("mcpp.proposal.scope")
	ProposalWaitMS = attribute.Key("mcpp.proposal.wait_ms")
	Grantor        = attribute.Key("mcpp.grant.grantor")
	Grantee        = attribute.Key("mcpp.grant.recipient")
	KickedBy       = attribute.Key("mcpp.kick.by")
	TraceDropped   = attribute.Key("mcpp.trace.dropped")
)

// System is messaging.system of every span of a pod.
const System = "mcpp"

// The operations on a pod (messaging.operation.name, the first word of
// a span's name, "accept lab"), and their messaging.operation.type.
const (
	// OpAccept: a node takes an envelope into the pod (receive): its
	// checks, its place in the pod's order.
	OpAccept = "accept"
	// OpDeliver: a node queues an envelope for its members (send), once
	// for all of them: messaging.batch.message_count is how many.
	OpDeliver = "deliver"
)

// The answerers of a call (mcpp.call.answered_by).
const (
	ByRecipient = "recipient"
	ByGateway   = "gateway"
)

// Instrumentation names the tracers of this repository's packages.
const Instrumentation = "github.com/mcpp/gateway"
