// Package wire defines every message shape and code of the MCPP pod
// gateway's wire protocol, in one place: the gateway and every client
// import it, and nothing is written twice. It depends on the standard
// library alone. The contract itself is docs/protocol.md; each type here
// says where it appears on the wire and cites that file's section. A
// client in another language can be written from this package: what
// follows is what goes over the wire, in the order a client meets it.
//
// The jsonschema tags of some fields are their descriptions in the JSON
// Schemas of the gateway's MCP tools, which are derived from these types
// (docs/protocol.md section 9); encoding/json ignores them.
//
// # 1. Joining a pod
//
// A participant joins a pod (a named room) with a WebSocket upgrade,
//
//	GET /ws?pod=lab&participant=alice          (PathWS, QueryPod, QueryParticipant)
//	Authorization: Bearer TOKEN                (or ?token=TOKEN from a browser)
//
// plus, optionally, its filter as query parameters (Filter.Query), the
// protocol it speaks (QueryProtocol: ProtocolMCPP by default, ProtocolMCPX
// for MCPx clients), and what it wants of the pod's past: history=N or
// history=all (QueryHistory, HistoryAll) with fold=0 (QueryFold) for it
// unfolded, or resume=ID (QueryResume) to pick up after the last envelope
// it received. With a token file the token names the participant and
// ?participant= is ignored; without one (open mode) ?participant= does.
//
// A refused upgrade is a plain HTTP answer whose JSON body is a Refusal
// ({"error": CODE, "message": TEXT}): 400 CodeInvalidPod,
// CodeInvalidParticipant, CodeInvalidFilter, CodeUnsupportedProtocol; 401
// CodeUnauthorized; 403 CodeForbidden; 503 CodeOverCapacity (a cap is
// reached, or the pod is not ready yet) or CodeShuttingDown (the gateway is
// draining: connect to another node, or later). See Code.HTTPStatus.
//
// # 2. The welcome, then the past
//
// The first message of a connection is an Envelope of kind KindWelcome
// from GatewayID, whose payload is a Welcome: who you are (You), who else
// is there (Participants), your effective Filter and the gateway's Limits.
// When you asked for history= or resume=, the welcome's History
// (HistoryInfo) says what follows: Replayed envelopes of the pod's history
// come right after the welcome, oldest first, and then live ones, with none
// missing and none twice. After resume=ID, HistoryInfo.Resumed false means
// the gateway no longer has ID: you may have missed envelopes.
//
// Replay is folded unless you asked fold=0: a concluded context is
// replayed as its conclusion-kind envelopes and its system/context event,
// and a consumed transient envelope (Lifecycle) comes with a Collapsed
// payload.
//
// # 3. Envelopes
//
// Every message is an Envelope: one JSON object per WebSocket text
// message or, for a participant that joined with batch=1 (Filter.Batch),
// several per message, one per line. To send, write one Envelope per
// message with at least a Kind; the gateway fills Protocol, ID (a UUIDv4),
// TS and From when they are absent, and relays every other field exactly
// as sent to every participant of the pod whose filter admits it (To
// addresses it to some only). You do not receive your own envelopes unless
// you joined with echo=1.
//
// An envelope may carry a Context: the object form (Context, ADR-k9j) or a
// path ("task-1/plan", PathContext). The first envelope that names a
// context id creates the context; an envelope of a conclusion kind
// (KindConclusion and the others of Limits.ConclusionKinds) concludes it,
// and so does silence for Limits.ContextTimeoutMS.
//
// An envelope may carry a Lifecycle, which says how the pod's history
// keeps it: durable (the default), transient (replayed collapsed to its
// summary once another envelope consumes it) or ephemeral (never stored,
// never replayed). Envelope.InHistory says whether history keeps one,
// which is what resume= can pick up after.
//
// # 4. What the gateway writes
//
// Besides the welcome, every message from GatewayID is one of:
//
//   - KindPresence, payload Presence: another participant joined or left.
//   - KindError, payload ErrorPayload: an envelope of yours was refused
//     and not relayed; CorrelationID is its id. The Code is the first rule
//     of the table of Code constants that it broke; Retryable and
//     RetryAfterMS say whether and when to try again.
//   - KindContext, payload ContextEvent: a context concluded, with its
//     statistics; its Context field is the context, in the object form.
//   - KindFilter, KindContexts, KindHistory: the answers to requests.
//
// # 5. Requests to the gateway
//
// An envelope whose kind starts with "gateway/" is a request, answered to
// its sender alone with CorrelationID set to the request's id, never
// relayed: RequestFilter (payload Filter: absent fields keep their value;
// answer KindFilter, the effective Filter), RequestContexts (payload
// ContextsRequest; answer ContextsAnswer) and RequestHistory (payload
// HistoryRequest; answer HistoryAnswer). A refused request is answered
// with KindError instead.
//
// # 6. Unique ids and resuming
//
// The pod's history refuses an id it already holds with CodeDuplicateID,
// so a sender that re-sends an envelope with the same id after a lost
// connection learns that the first try got through. A receiver that lost
// its connection joins again with resume= the id of the last envelope it
// received that history keeps, and receives what it missed.
//
// # 7. The end of a connection
//
// The gateway ends a connection with a WebSocket close frame whose
// CloseCode says why: CloseReplaced (4000: another connection joined with
// your participant id; do not reconnect), CloseSlowConsumer (4008: you
// read too slowly), CloseGoingAway (1001: the gateway is shutting down),
// CloseMessageTooBig (1009: a message over twice Limits.MaxMessageBytes),
// CloseInternalError (1011: the replay of the pod's history was
// interrupted; resume again).
//
// # 8. Publishing without joining
//
// POST PublishPath(pod) takes one envelope (Content-Type
// application/json) or one per line (application/x-ndjson), authenticated
// as the upgrade is, and answers a PublishAnswer: one PublishResult per
// envelope, in order. Any other Content-Type is refused with 415
// (CodeInvalidJSON), and a browser origin is checked as for the upgrade
// (403 CodeForbidden), so that a web page cannot publish with a form.
//
// # 9. Operating the gateway
//
// The operator's API (admin.go) answers a token that holds
// CapabilityAdmin: GET PathAdminPods (AdminPods, a page of pods with
// their members) and PathAdminPods/NAME (AdminPodAnswer), POST
// PathAdminKick (AdminKick; AdminKickAnswer), PathAdminRevoke
// (AdminRevoke; AdminRevokeAnswer) and PathAdminDrain
// (AdminDrainAnswer). Its kicks and revokes come from AdminID.
package wire
