// The shapes of the gateway's messages, as they are on the wire
// (docs/protocol.md; the Go package wire defines the same ones). Field
// names are the wire's own, so an envelope received is a plain object
// that JSON.stringify writes back unchanged.

/** The protocol this client speaks (docs/protocol.md section 2). */
export const PROTOCOL = "mcpp/v0.1";

/** The `from` of every message the gateway writes itself. */
export const GATEWAY_ID = "system:gateway";

/**
 * The context field of an envelope in its object form (docs/protocol.md
 * section 3). The path form is a string, `"root/child/leaf"`.
 */
export interface ContextObject {
  id: string;
  type?: string;
  parent?: string;
  metadata?: Record<string, unknown>;
}

/** How a pod's history keeps an envelope (docs/protocol.md section 8). */
export interface Lifecycle {
  mode?: "durable" | "transient" | "ephemeral";
  summary?: string;
  consumes?: string[];
}

/**
 * One message of a pod (docs/protocol.md section 2). To send, `kind` is
 * enough: the gateway fills `protocol`, `ts` and `from`, and the client
 * fills `id`. Every field received is kept, unknown ones included.
 */
export interface Envelope {
  protocol?: string;
  id?: string;
  ts?: string;
  from?: string;
  to?: string[];
  kind: string;
  correlation_id?: string | string[];
  context?: ContextObject | string;
  payload?: unknown;
  lifecycle?: Lifecycle;
  /**
   * The W3C trace context the envelope continues (docs/protocol.md
   * section 1, "Trace context"): the sender's, relayed as sent, or the
   * gateway's span when it traces and the sender gave none.
   */
  trace?: Trace;
  [field: string]: unknown;
}

/** An envelope's trace field: W3C Trace Context's traceparent (version 00) and tracestate. */
export interface Trace {
  traceparent: string;
  tracestate?: string;
}

/**
 * The value of `serves` (ConnectOptions.serves, Identity.serves) of a
 * participant that answers MCP requests: an MCP server in the pod, such
 * as `mcpp bridge` (docs/protocol.md section 11).
 */
export const SERVES_MCP = "mcp";

/** A participant as the welcome and presence events show it. */
export interface Identity {
  id: string;
  capabilities: unknown[];
  /**
   * What it answers requests of, as it said when it joined
   * (ConnectOptions.serves): `["mcp"]` (SERVES_MCP) for an MCP server,
   * to send `mcp/request` envelopes to (`tools/list`); absent for plain
   * participants.
   */
  serves?: string[];
}

/**
 * A participant's filter as the welcome and `system/filter` write it
 * (docs/protocol.md section 4): every field set.
 */
export interface EffectiveFilter {
  main: boolean;
  contexts: "all" | "none";
  types: string[];
  exclude_types: string[];
  ids: string[];
  subtree: boolean;
  conclusions: boolean;
  routing: "all" | "directed";
  echo: boolean;
  batch: boolean;
}

/**
 * The filter to join with: the names of the upgrade's query
 * (docs/protocol.md section 4). Lists may be arrays or the wire's
 * comma-separated strings; absent fields keep the gateway's default.
 */
export interface Filter {
  main?: boolean;
  contexts?: "all" | "none";
  types?: string[] | string;
  exclude_types?: string[] | string;
  ids?: string[] | string;
  subtree?: boolean;
  conclusions?: boolean;
  routing?: "all" | "directed";
  echo?: boolean;
  batch?: boolean;
}

/** What follows the welcome when history or a resume was asked for. */
export interface HistoryInfo {
  /** Set after `resume=`: false means the gateway could not resume (a gap). */
  resumed?: boolean;
  replayed: number;
  folded?: number;
  collapsed?: number;
  [field: string]: unknown;
}

/** The gateway's limits, as the welcome announces them. */
export interface Limits {
  max_message_bytes: number;
  history: number;
  send_queue: number;
  rate: number;
  burst: number;
  conclusion_kinds: string[];
  [limit: string]: unknown;
}

/** The payload of `system/welcome` (docs/protocol.md section 5). */
export interface Welcome {
  you: Identity;
  participants: Identity[];
  pod: string;
  filter: EffectiveFilter;
  limits: Limits;
  history?: HistoryInfo;
  [field: string]: unknown;
}

/**
 * The payload of `system/context` (docs/protocol.md section 3): a context
 * concluded, why (`"conclusion"`, `"timeout"`, `"parent_concluded"`), and
 * what went on in it.
 */
export interface ContextEvent {
  event: string;
  reason: string;
  stats: ContextStats;
  [field: string]: unknown;
}

/** What went on in a context, in a `system/context` event. */
export interface ContextStats {
  /** Envelopes relayed in the context, the conclusion included. */
  messages: number;
  /** Their sizes, summed. */
  bytes: number;
  /** Their distinct senders. */
  participants: string[];
  /** Its nesting depth: 1 for a root. */
  depth: number;
  /** When it opened, its last envelope, and when it concluded (RFC 3339). */
  created: string;
  last_activity: string;
  concluded: string;
  [field: string]: unknown;
}

/** The payload of `system/error` (docs/protocol.md section 5). */
export interface ErrorPayload {
  error: string;
  message: string;
  retryable: boolean;
  retry_after_ms?: number;
  [detail: string]: unknown;
}

/**
 * One entry of the answer of `POST /pods/NAME/envelopes`
 * (docs/protocol.md section 6): `{id}` when relayed, `{id, answer}` for
 * a request, or the refusal (`error`, `message`, … and `id` when the
 * envelope had one).
 */
export interface PublishResult {
  id?: string;
  answer?: unknown;
  error?: string;
  message?: string;
  retryable?: boolean;
  [field: string]: unknown;
}

/**
 * A capability (docs/protocol.md section 2): a kind pattern (`"chat"`,
 * `"tool/*"`), or one that also matches the payload (`{"kind":
 * "mcp/request", "payload": {"method": "tools/call"}}`).
 */
export type Capability = string | { kind: string; payload?: unknown };

/** The payload of `gateway/kick` (docs/protocol.md section 6). */
export interface Kick {
  /** The participant to remove from the pod. */
  participant: string;
  /** Why, told to everyone with its leave and to it in the close frame (at most 80 bytes). */
  reason?: string;
  /** How long its joins are refused, in milliseconds (0 or absent: it may come back at once; at most a week). */
  ban_ms?: number;
}

/** The answer to `gateway/kick` (`system/kick`). */
export interface Kicked {
  participant: string;
  /** Its connections and MCP sessions closed on the gateway node that took the request. */
  connections: number;
  /** When the ban ends (RFC 3339), or null without one. */
  banned_until: string | null;
  [field: string]: unknown;
}

/** The answer to `gateway/refresh` (`system/refresh`). */
export interface Refreshed {
  participant: string;
  /** The fresh token's capabilities, in force from the next envelope on. */
  capabilities: Capability[];
  /** When the connection ends unless refreshed again (RFC 3339), or null: never. */
  expires: string | null;
  [field: string]: unknown;
}

/**
 * What `client.grant` grants (the payload of `capability/grant`, MEW's
 * shape): capabilities for `recipient`, from its next envelope on; with
 * `context`, only in that context and its subtree, until it concludes.
 */
export interface Grant {
  recipient: string;
  capabilities: Capability[];
  /** A context's id (or what branch() resolved with): the grant's scope. */
  context?: string | ContextObject;
  /** Free text: the recipient reads it in the grant. */
  reason?: string;
}

/**
 * What `client.revoke` takes back (the payload of `capability/revoke`):
 * one grant (`grant_id`, the id `grant` resolved with), or capabilities
 * out of every grant this participant made to `recipient`; one of the two.
 */
export interface Revoke {
  recipient: string;
  grant_id?: string;
  capabilities?: Capability[];
  reason?: string;
}

/**
 * The payload of `system/capability` (docs/protocol.md section 5): the
 * gateway's answer to a grant (`event` `"granted"`, `grant_id` the grant's
 * envelope id) or a revoke (`"revoked"`), and, to the recipient, the end
 * of a grant (`"revoked"`, or `"ended"` when its context concluded).
 */
export interface CapabilityEvent {
  event: "granted" | "revoked" | "ended";
  grant_id: string;
  recipient: string;
  grantor?: string;
  capabilities?: Capability[];
  context?: string;
  reason?: string;
  [field: string]: unknown;
}

/** The kinds the gateway writes (docs/protocol.md sections 3, 5 and 6). */
export const Kinds = {
  welcome: "system/welcome",
  presence: "system/presence",
  error: "system/error",
  context: "system/context",
  filter: "system/filter",
  contexts: "system/contexts",
  history: "system/history",
  refresh: "system/refresh",
  kick: "system/kick",
  capability: "system/capability",
} as const;

/** The close codes the gateway sends (docs/protocol.md section 5). */
export const CloseCodes = {
  normal: 1000,
  goingAway: 1001,
  messageTooBig: 1009,
  internalError: 1011,
  replaced: 4000,
  slowConsumer: 4008,
  /** The token expired and was not refreshed: the client ends (TokenExpiredError). */
  tokenExpired: 4401,
  /** The token was revoked: the client ends (RevokedError). */
  revoked: 4403,
  /** Kicked by a moderator: the client ends (KickedError). */
  kicked: 4410,
  /** The gateway node lost the pod's order: the client reconnects and resumes. */
  orderLost: 4503,
} as const;
