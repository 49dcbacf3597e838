package wire

// Who may do what, changed while a pod runs (docs/protocol.md section 1
// and 6): a participant refreshes its token before it expires, a
// moderator kicks a participant out (and keeps it out for a while), and
// a participant that holds capability/grant grants capabilities to
// another, for the whole pod or for one context's subtree only, and
// revokes them.

// The requests and their answers.
const (
	RequestRefresh = "gateway/refresh" // payload Refresh → KindRefresh
	RequestKick    = "gateway/kick"    // payload Kick → KindKick; needs the gateway/kick capability
	KindRefresh    = "system/refresh"  // the answer to RequestRefresh: Refreshed
	KindKick       = "system/kick"     // the answer to RequestKick: Kicked
)

// MEW's kinds of runtime capabilities: envelopes of the pod, relayed to
// their recipient, which the gateway also acts on. Sending one needs the
// capability/grant capability (for both: who may grant may take back what
// it granted).
const (
	KindGrant  = "capability/grant"  // payload Grant
	KindRevoke = "capability/revoke" // payload Revoke
	// KindCapability is the gateway's word on a grant: the answer to its
	// grantor (correlation_id the grant's id), and the end of a grant,
	// told to its recipient (revoked, or its context concluded).
	KindCapability = "system/capability" // payload CapabilityEvent
)

// Refresh is the payload of gateway/refresh: a fresh token for the
// connection, whose claims apply from then on.
//
//	{"token": "eyJhbGciOi…"}
type Refresh struct {
	Token string `json:"token" jsonschema:"the new token (a JWT, or an entry of the token file) naming the same participant"`
}

// Refreshed is the answer to gateway/refresh.
//
//	{"participant": "alice", "capabilities": ["chat"], "expires": "2026-11-26T10:00:00.000Z"}
type Refreshed struct {
	Participant  string       `json:"participant"`
	Capabilities []Capability `json:"capabilities"`
	// Expires is when the connection ends unless refreshed again (null:
	// never).
	Expires *string `json:"expires"`
}

// Kick is the payload of gateway/kick.
//
//	{"participant": "rogue", "reason": "looping", "ban_ms": 60000}
type Kick struct {
	Participant string `json:"participant" jsonschema:"the participant to remove from the pod"`
	Reason      string `json:"reason,omitempty" jsonschema:"why, told to everyone with its leave and to it in the close frame"`
	BanMS       int64  `json:"ban_ms,omitempty" jsonschema:"how long its joins are refused, in milliseconds (0: it may come back at once)"`
}

// Kicked is the answer to gateway/kick.
//
//	{"participant": "rogue", "connections": 1, "banned_until": "…"}
type Kicked struct {
	Participant string `json:"participant"`
	// Connections are the participant's connections and MCP sessions in
	// the pod when the kick was taken: those on the node that took it,
	// and one for a connection on another node (every node closes its
	// own).
	Connections int     `json:"connections"`
	BannedUntil *string `json:"banned_until"`
}

// Grant is the payload of capability/grant (MEW's shape): the capabilities
// the recipient (named in payload.recipient, and in to) may use from the
// next envelope on. With a context (payload.context, or the envelope's
// own context), they hold only for envelopes in that context and its
// subtree, and end when it concludes. With to, they hold only for the
// recipient's envelopes addressed to that one participant alone (an
// "always" approval grants one tool of one server so). The grant's
// envelope id names it from then on.
//
//	{"recipient": "bob", "capabilities": ["chat", {"kind": "mcp/request", "payload": {"method": "tools/call"}}],
//	 "context": "task-7", "reason": "to run the tools of this task"}
//	{"recipient": "bob", "to": "files", "capabilities": [{"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_file"}}}]}
type Grant struct {
	Recipient    string       `json:"recipient"`
	Capabilities []Capability `json:"capabilities"`
	Context      string       `json:"context,omitempty"`
	To           string       `json:"to,omitempty"`
	Reason       string       `json:"reason,omitempty"`
}

// Revoke is the payload of capability/revoke: the grant to end (grant_id),
// or capabilities to take out of what the revoker granted the recipient.
//
//	{"recipient": "bob", "grant_id": "g-1"}
//	{"recipient": "bob", "capabilities": ["mcp/*"]}
type Revoke struct {
	Recipient    string       `json:"recipient"`
	GrantID      string       `json:"grant_id,omitempty"`
	Capabilities []Capability `json:"capabilities,omitempty"`
	Reason       string       `json:"reason,omitempty"`
}

// CapabilityEvent is the payload of system/capability.
//
//	{"event": "granted", "grant_id": "g-1", "recipient": "bob", "grantor": "alice", "capabilities": ["chat"], "context": "task-7"}
//	{"event": "ended", "grant_id": "g-1", "recipient": "bob", "context": "task-7", "reason": "the context concluded"}
type CapabilityEvent struct {
	Event        string       `json:"event"` // CapabilityGranted, CapabilityRevoked or CapabilityEnded
	GrantID      string       `json:"grant_id"`
	Recipient    string       `json:"recipient"`
	Grantor      string       `json:"grantor,omitempty"`
	Capabilities []Capability `json:"capabilities,omitempty"`
	Context      string       `json:"context,omitempty"`
	To           string       `json:"to,omitempty"`
	Reason       string       `json:"reason,omitempty"`
}

// The events of CapabilityEvent.
const (
	CapabilityGranted = "granted" // to the grantor: the grant holds
	CapabilityRevoked = "revoked" // to the grantor (its answer) and to the recipient: revoked
	CapabilityEnded   = "ended"   // to the recipient: its context concluded
)
