package audit

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/mcpp/gateway/wire"
)

// Decision names what was decided: the decision field of a line.
type Decision string

// The decisions (docs/protocol.md section 7 has a sample line of each).
const (
	// Join: a participant was let into a pod (Transport says how).
	Join Decision = "join"
	// JoinRefused: it was not: Code, Rule and Message say why.
	JoinRefused Decision = "join_refused"
	// CapabilityRefused: an envelope or request was refused for what its
	// sender may do (capability_violation, auth_violation, forbidden):
	// Kind, Code and Rule say what and by which rule.
	CapabilityRefused Decision = "capability_refused"
	// Grant and Revoke: capabilities given (By the grantor, to
	// Participant) or taken back while the pod runs.
	Grant  Decision = "grant"
	Revoke Decision = "revoke"
	// Kick: Participant was removed from the pod By a moderator; Ban: it
	// may not join again before Until.
	Kick Decision = "kick"
	Ban  Decision = "ban"
	// Refresh: a connection took a fresh token (gateway/refresh), and
	// its capabilities from then on; RefreshRefused: the token was not
	// taken.
	Refresh        Decision = "refresh"
	RefreshRefused Decision = "refresh_refused"
	// Proposal: Participant proposed a call (mcp/proposal) to To, held
	// until someone decides. Its end is one of the decisions after it.
	Proposal          Decision = "proposal"
	ProposalApproved  Decision = "proposal_approved"
	ProposalFulfilled Decision = "proposal_fulfilled"
	ProposalRejected  Decision = "proposal_rejected"
	ProposalWithdrawn Decision = "proposal_withdrawn"
	ProposalExpired   Decision = "proposal_expired"
	// TokensReloaded: the token file and the JWT keys were read again;
	// TLSReloaded: the certificate was.
	TokensReloaded Decision = "tokens_reloaded"
	TLSReloaded    Decision = "tls_reloaded"
)

// The transports of a join.
const (
	TransportWS      = "ws"           // a WebSocket member (/ws)
	TransportObserve = "observe"      // a WebSocket that watches without presence (/ws?observe=1)
	TransportMCP     = "mcp"          // an MCP host (/mcp)
	TransportPublish = "http_publish" // POST /pods/NAME/envelopes, for its one request
	TransportAdmin   = "admin"        // the operator's API (/admin/): its kicks and revokes
)

// The ways a participant is authenticated (Credential.Auth).
const (
	AuthOpen      = "open"       // no token: ?participant= (open mode)
	AuthTokenFile = "token_file" // an entry of --tokens
	AuthJWT       = "jwt"        // a JWT verified with the configured keys
)

// The rules of a capability refusal (Record.Rule): which check said no.
// A join refused by a token's claim has the claim as its rule ("exp",
// "signature", …: tokens.Refusal.Claim).
const (
	RuleNoCapability    = "no_capability"      // no capability of the sender's names the kind
	RulePayloadPattern  = "payload_pattern"    // a capability names the kind, but its payload pattern does not match
	RuleGrantScope      = "grant_scope"        // what a grant allows, it allows in its context alone (and never gateway/kick)
	RuleDelegation      = "delegation"         // a grantor grants only what it holds where the grant applies
	RuleSelfGrant       = "self_grant"         // a grantor may not grant itself
	RuleNotGrantor      = "not_grantor"        // only a grant's grantor revokes it
	RuleNotApprover     = "not_approver"       // only who may make a proposed call approves or rejects it
	RuleNotProposer     = "not_proposer"       // only its proposer withdraws a proposal
	RuleFrom            = "from"               // from must be the sender's own id
	RuleRefreshIdentity = "refresh_identity"   // a fresh token must name the same participant
	RuleRemoved         = "removed"            // the sender was kicked or replaced: nothing more of it is relayed
	RuleBanned          = "banned"             // a join while a ban lasts
	RuleOrigin          = "origin"             // a browser page of an origin not allowed
	RuleObserve         = "observe_capability" // observe=1 without gateway/observe
	RuleSessionOwner    = "session_owner"      // an MCP session used by another participant than its creator's
)

// Credential says which token admitted a participant, never the token.
type Credential struct {
	// Auth is AuthOpen, AuthTokenFile or AuthJWT.
	Auth string `json:"auth,omitempty"`
	// TokenSHA256 is the first 16 hex digits of the token's SHA-256
	// (TokenHash): the token file's token_sha256 begins with them.
	TokenSHA256 string `json:"token_sha256,omitempty"`
	// Issuer, KeyID and JTI are a JWT's iss, kid (its header's) and jti.
	Issuer string `json:"iss,omitempty"`
	KeyID  string `json:"kid,omitempty"`
	JTI    string `json:"jti,omitempty"`
}

// TokenHash is how a line names a token: the first 16 hex digits of its
// SHA-256. A token of a few bytes could be found from its full hash; 64
// bits of it are enough to tell which entry or which JWT it was.
func TokenHash(token string) string {
	if token == "" {
		return ""
	}
	return ShortHash(sha256.Sum256([]byte(token)))
}

// ShortHash is TokenHash of a token whose SHA-256 is sum.
func ShortHash(sum [sha256.Size]byte) string { return hex.EncodeToString(sum[:8]) }

// Member is a participant a reload disconnected.
type Member struct {
	Pod         string `json:"pod"`
	Participant string `json:"participant"`
	Transport   string `json:"transport"`
}

// TokenEntry is an entry of the token file, as a reload reports it.
type TokenEntry struct {
	Participant string `json:"participant"`
	TokenSHA256 string `json:"token_sha256"`
}

// Record is one decision. The Log adds ts and node; every other field is
// written when it is set (docs/protocol.md section 7 lists which each
// decision has). Slices and fields are read by the Log's goroutine after
// Record returns: hand it values nobody changes afterwards.
type Record struct {
	Decision Decision `json:"decision"`
	Pod      string   `json:"pod,omitempty"`
	// Participant is whom the decision is about: who joined or was
	// refused, the recipient of a grant, who was kicked, the proposer.
	Participant string `json:"participant,omitempty"`
	// By is who made it, when it is not the gateway: the grantor, the
	// moderator, the approver.
	By string `json:"by,omitempty"`

	// A join's: how, from where (RemoteAddr is the TCP peer, ForwardedFor
	// the X-Forwarded-For header as received, never trusted), with which
	// token, and what it may do.
	Transport    string `json:"transport,omitempty"`
	RemoteAddr   string `json:"remote_addr,omitempty"`
	ForwardedFor string `json:"forwarded_for,omitempty"`
	Credential
	Capabilities []wire.Capability `json:"capabilities,omitempty"`

	// What a refusal refused, and why.
	Kind       string `json:"kind,omitempty"`
	EnvelopeID string `json:"envelope_id,omitempty"`
	Context    string `json:"context,omitempty"`
	Code       string `json:"code,omitempty"`
	Rule       string `json:"rule,omitempty"`
	Message    string `json:"message,omitempty"`

	// A grant's, a revoke's, a kick's, a ban's.
	GrantID string   `json:"grant_id,omitempty"`
	Via     []string `json:"via,omitempty"`
	To      string   `json:"to,omitempty"`
	Reason  string   `json:"reason,omitempty"`
	Until   string   `json:"until,omitempty"`
	// Connections counts the kicked participant's connections and
	// sessions (on every node) the kick reached.
	Connections int `json:"connections,omitempty"`

	// A proposal's: the call (Method, Tool), the digest of its bytes
	// (wire.ProposalDigest: what an approval names and the gateway
	// releases), how it was approved (Scope once or always, the grant an
	// always made) and the request the gateway released for it.
	Proposal string `json:"proposal,omitempty"`
	Method   string `json:"method,omitempty"`
	Tool     string `json:"tool,omitempty"`
	Digest   string `json:"digest,omitempty"`
	Scope    string `json:"scope,omitempty"`
	Request  string `json:"request,omitempty"`

	// A reload's: what prompted it (sighup, file_changed), its error when
	// it failed (what was in force stays), what changed, and who it
	// disconnected.
	Trigger      string       `json:"trigger,omitempty"`
	Error        string       `json:"error,omitempty"`
	Added        []TokenEntry `json:"added,omitempty"`
	Removed      []TokenEntry `json:"removed,omitempty"`
	KeysAdded    []string     `json:"keys_added,omitempty"`
	KeysRemoved  []string     `json:"keys_removed,omitempty"`
	Disconnected []Member     `json:"disconnected,omitempty"`
	// A certificate's: the SHA-256 of its leaf (hex), before and after,
	// its subject and when it expires.
	CertSHA256     string `json:"cert_sha256,omitempty"`
	PreviousSHA256 string `json:"previous_cert_sha256,omitempty"`
	Subject        string `json:"subject,omitempty"`
	NotAfter       string `json:"not_after,omitempty"`
}
