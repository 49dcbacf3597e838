package wire

// The operator's API (docs/protocol.md section 7, "The operator's API"):
// HTTP endpoints under /admin/ that list the pods of a node or of a
// cluster (who is in each, what is pending and granted), kick a
// participant out of pods, revoke a grant, and drain a node. Every call
// needs a token that holds CapabilityAdmin; the pods a call reaches are
// the token's pods.

// CapabilityAdmin is the capability that opens the operator's API. Only a
// capability of exactly this kind, without a payload pattern, holds it:
// "*", "gateway/*" and a grant made in a pod (capability/grant) never do,
// since the API reaches every pod of the token's and the node itself.
const CapabilityAdmin = "gateway/admin"

// AdminID is who an operator's kick or revoke comes from in the pods: the
// kick's reason reads "kicked by system:admin", and the capability/revoke
// envelope the history keeps is from it. No participant may take an id
// that starts with "system:", so nothing but the gateway sends as it.
const AdminID = "system:admin"

// The paths of the operator's API.
const (
	PathAdminPods   = "/admin/pods"   // GET: AdminPods; /admin/pods/NAME: AdminPodAnswer
	PathAdminKick   = "/admin/kick"   // POST AdminKick: AdminKickAnswer
	PathAdminRevoke = "/admin/revoke" // POST AdminRevoke: AdminRevokeAnswer
	PathAdminDrain  = "/admin/drain"  // POST: AdminDrainAnswer
)

// The codes of the operator's API besides those of an upgrade
// (unauthorized, forbidden, invalid_json, invalid_pod,
// invalid_participant, over_capacity, shutting_down).
const (
	CodeInvalidRequest Code = "invalid_request" // 400: a query parameter or a body field that does not fit the call; 405 with a method the path does not take
	CodeNotFound       Code = "not_found"       // 404: no such pod (on the nodes asked), or no such grant in force
)

// AdminNode is a node asked for its part of an answer.
//
//	{"node": "3f9a1c2e", "host": "mcpp-gateway-0", "addr": "10.0.0.7:8080", "answered": true, "draining": false}
type AdminNode struct {
	// Node is the node's id (it changes when the process restarts).
	Node string `json:"node"`
	// Host and Addr are the machine's host name (a Kubernetes pod's
	// name) and the address the node listens on; empty for a node that
	// did not answer.
	Host string `json:"host,omitempty"`
	Addr string `json:"addr,omitempty"`
	// Answered is false for a node known to the cluster (its heartbeat)
	// that did not answer in time; Error says why.
	Answered bool   `json:"answered"`
	Draining bool   `json:"draining"`
	Error    string `json:"error,omitempty"`
}

// AdminPods is the answer to GET /admin/pods: one page of the pods the
// token reaches, by name.
//
//	{"node": "3f9a1c2e", "nodes": [{"node": "3f9a1c2e", …, "answered": true}], "complete": true,
//	 "pods": [{"name": "lab", …}], "next": "lab"}
type AdminPods struct {
	// Node is the node that took the request.
	Node string `json:"node"`
	// Nodes are the nodes asked: this one, or with cluster=1 every node
	// of the cluster it knows of.
	Nodes []AdminNode `json:"nodes"`
	// Complete is true when every node asked answered.
	Complete bool       `json:"complete"`
	Pods     []AdminPod `json:"pods"`
	// Next is the after= of the next page, or null on the last one.
	Next *string `json:"next"`
}

// AdminPod is a pod in a listing.
//
//	{"name": "lab", "nodes": ["3f9a1c2e"], "members": [{"id": "alice", …}], "member_count": 1, "observers": 0,
//	 "contexts": {"active": 2, "concluded": 1}, "proposals_pending": 0, "grants": 1, "bans": 0}
type AdminPod struct {
	Name string `json:"name"`
	// Nodes are the nodes that have the pod open (and answered).
	Nodes []string `json:"nodes"`
	// Members are the pod's participants by id, at most 100 in a listing
	// and 1000 in a pod's detail; MemberCount counts them all.
	Members     []AdminMember `json:"members"`
	MemberCount int           `json:"member_count"`
	// Observers are the connections that watch without presence
	// (observe=1), counted, on the nodes that answered.
	Observers int `json:"observers"`
	// Contexts counts the pod's contexts: active, and concluded ones still
	// retained (--context-retention).
	Contexts AdminContexts `json:"contexts"`
	// ProposalsPending, Grants and Bans count the proposals pending, the
	// capability grants in force and the bans (gateway/kick) in force.
	ProposalsPending int `json:"proposals_pending"`
	Grants           int `json:"grants"`
	Bans             int `json:"bans"`
}

// AdminContexts counts a pod's contexts.
type AdminContexts struct {
	Active    int `json:"active"`
	Concluded int `json:"concluded"`
}

// AdminMember is one participant of a pod. The fields that only the node
// holding its connection knows (Via, Since, Addr, Queue) are null for a
// member of another node that only this node's view names (a listing
// without cluster=1).
//
//	{"id": "alice", "node": "3f9a1c2e", "via": "ws", "since": "2026-11-26T10:00:00.000Z", "addr": "10.1.2.3:51234",
//	 "protocol": "mcpp/v0.1", "queue": {"messages": 0, "bytes": 0}, "capabilities": ["*"]}
type AdminMember struct {
	ID   string `json:"id"`
	Node string `json:"node"`
	// Via is "ws" (a WebSocket connection) or "mcp" (an MCP session).
	Via *string `json:"via"`
	// Since is when its connection was accepted or its MCP session joined.
	Since *string `json:"since"`
	// Addr is the connection's remote address (a proxy's, behind one);
	// null for an MCP session.
	Addr     *string `json:"addr"`
	Protocol string  `json:"protocol,omitempty"`
	// Queue is what waits to be written to its WebSocket connection; null
	// for an MCP session, which reads the history instead.
	Queue        *AdminQueue  `json:"queue"`
	Capabilities []Capability `json:"capabilities"`
	Serves       []string     `json:"serves,omitempty"`
}

// AdminQueue is what is queued for a connection: messages and their
// bytes (--send-queue and --send-queue-bytes bound them; past them the
// connection is closed with 4008).
type AdminQueue struct {
	Messages int `json:"messages"`
	Bytes    int `json:"bytes"`
}

// AdminPodAnswer is the answer to GET /admin/pods/NAME.
type AdminPodAnswer struct {
	Node     string         `json:"node"`
	Nodes    []AdminNode    `json:"nodes"`
	Complete bool           `json:"complete"`
	Pod      AdminPodDetail `json:"pod"`
}

// AdminPodDetail is one pod in full: AdminPod, and the lists it counts
// (each of at most 1000 entries).
type AdminPodDetail struct {
	AdminPod
	// ActiveContexts are as gateway/contexts gives them, oldest first.
	ActiveContexts []ContextInfo `json:"active_contexts"`
	// PendingProposals are the proposals waiting for a decision, oldest
	// first (gateway/proposals has their calls).
	PendingProposals []AdminProposal `json:"pending_proposals"`
	// GrantsInForce are the capability grants in force, by recipient.
	GrantsInForce []AdminGrant `json:"grants_in_force"`
	// BansInForce are the participants kept out by gateway/kick.
	BansInForce []AdminBan `json:"bans_in_force"`
}

// AdminProposal is a pending proposal: the call's method and tool name,
// not its arguments.
type AdminProposal struct {
	ID       string `json:"id"`
	Proposer string `json:"proposer"`
	To       string `json:"to"`
	Context  string `json:"context,omitempty"`
	Method   string `json:"method"`
	Tool     string `json:"tool,omitempty"`
	Digest   string `json:"digest"`
	Created  string `json:"created"`
	Expires  string `json:"expires"`
}

// AdminGrant is a capability grant in force: what POST /admin/revoke
// names by GrantID.
type AdminGrant struct {
	GrantID      string       `json:"grant_id"`
	Recipient    string       `json:"recipient"`
	Grantor      string       `json:"grantor"`
	Capabilities []Capability `json:"capabilities"`
	Context      string       `json:"context,omitempty"`
	To           string       `json:"to,omitempty"`
}

// AdminBan is a ban in force.
type AdminBan struct {
	Participant string `json:"participant"`
	By          string `json:"by"`
	Reason      string `json:"reason,omitempty"`
	Until       string `json:"until"`
}

// AdminKick is the body of POST /admin/kick: the participant leaves the
// pods named, or without Pods every pod of the token's where it is
// (on every node that answers), as if system:admin had sent gateway/kick
// in each.
//
//	{"participant": "rogue", "pods": ["lab"], "reason": "looping", "ban_ms": 600000}
type AdminKick struct {
	Participant string   `json:"participant"`
	Pods        []string `json:"pods,omitempty"`
	Reason      string   `json:"reason,omitempty"`
	BanMS       int64    `json:"ban_ms,omitempty"`
}

// AdminKickAnswer is the answer to POST /admin/kick: one entry per pod.
type AdminKickAnswer struct {
	Node        string        `json:"node"`
	Nodes       []AdminNode   `json:"nodes"`
	Complete    bool          `json:"complete"`
	Participant string        `json:"participant"`
	Kicks       []AdminKicked `json:"kicks"`
}

// AdminKicked is the kick in one pod: gateway/kick's answer, or why it
// could not be made there (Error and Message, as a refusal's).
type AdminKicked struct {
	Pod         string  `json:"pod"`
	Connections int     `json:"connections"`
	BannedUntil *string `json:"banned_until"`
	Error       Code    `json:"error,omitempty"`
	Message     string  `json:"message,omitempty"`
}

// AdminRevoke is the body of POST /admin/revoke: the grant named ends, as
// if its grantor had revoked it.
//
//	{"pod": "lab", "grant_id": "g-1", "reason": "no longer needed"}
type AdminRevoke struct {
	Pod     string `json:"pod"`
	GrantID string `json:"grant_id"`
	Reason  string `json:"reason,omitempty"`
}

// AdminRevokeAnswer is the answer to POST /admin/revoke: the grant as it
// was (Grantor its grantor), and By, who revoked it (AdminID).
type AdminRevokeAnswer struct {
	Node    string          `json:"node"`
	Pod     string          `json:"pod"`
	By      string          `json:"by"`
	Revoked CapabilityEvent `json:"revoked"`
}

// AdminDrainAnswer is the answer to POST /admin/drain, once the node has
// drained: it accepts nothing more and every connection it had was closed
// with 1001 (Dropped of them without a close frame, after
// --shutdown-timeout). Already is true when a drain had begun before.
type AdminDrainAnswer struct {
	Node        string `json:"node"`
	Host        string `json:"host,omitempty"`
	Addr        string `json:"addr,omitempty"`
	Draining    bool   `json:"draining"`
	Already     bool   `json:"already"`
	Connections int    `json:"connections"`
	Dropped     int    `json:"dropped"`
	MS          int64  `json:"ms"`
}
