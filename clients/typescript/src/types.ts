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
  [field: string]: unknown;
}

/** A participant as the welcome and presence events show it. */
export interface Identity {
  id: string;
  capabilities: unknown[];
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

/** The kinds the gateway writes (docs/protocol.md sections 3, 5 and 6). */
export const Kinds = {
  welcome: "system/welcome",
  presence: "system/presence",
  error: "system/error",
  context: "system/context",
  filter: "system/filter",
  contexts: "system/contexts",
  history: "system/history",
} as const;

/** The close codes the gateway sends (docs/protocol.md section 5). */
export const CloseCodes = {
  normal: 1000,
  goingAway: 1001,
  messageTooBig: 1009,
  internalError: 1011,
  replaced: 4000,
  slowConsumer: 4008,
} as const;
