// The errors of the client. Each one the gateway causes says what the
// gateway said: the HTTP status and code of a refusal, the code of a
// system/error, the close code of a closed connection.

import type { Envelope, ErrorPayload } from "./types.js";

/** The base of every error the client raises itself. */
export class MCPPError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * The gateway refused the upgrade (or a publish request) with an HTTP
 * answer (docs/protocol.md sections 1 and 6): `status` is 400, 401, 403,
 * 503…; `code` is the body's `error` (`"unauthorized"`), or `""` when the
 * body was not the gateway's JSON.
 */
export class RefusedError extends MCPPError {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(`the gateway refused: HTTP ${status}${code ? " " + code : ""}${message ? ": " + message : ""}`);
    this.status = status;
    this.code = code;
  }

  /**
   * Whether the same upgrade may succeed later: a 503 (a cap that frees
   * up, a gateway restarting), another server error, or 429. A refusal of
   * the request itself (400, 401, 403) will not change.
   */
  get temporary(): boolean {
    return this.status >= 500 || this.status === 429;
  }
}

/**
 * A `system/error`: the gateway refused an envelope (or a request) and did
 * not relay it (docs/protocol.md section 5). `code` is the payload's
 * `error` (`"capability_violation"`); `payload` has the details.
 */
export class GatewayError extends MCPPError {
  readonly code: string;
  readonly retryable: boolean;
  /** For the rate limits: how long to wait before sending it again. */
  readonly retryAfterMs: number | undefined;
  readonly payload: ErrorPayload;
  /** The system/error envelope, as the gateway sent it. */
  readonly envelope: Envelope | undefined;
  constructor(payload: ErrorPayload, envelope?: Envelope) {
    super(`the gateway refused${refusedWhat(envelope)}: ${payload.error}: ${payload.message}`);
    this.code = payload.error;
    this.retryable = payload.retryable === true;
    this.retryAfterMs = typeof payload.retry_after_ms === "number" ? payload.retry_after_ms : undefined;
    this.payload = payload;
    this.envelope = envelope;
  }
}

function refusedWhat(env: Envelope | undefined): string {
  const c = env?.correlation_id;
  if (c === undefined || c.length === 0) return "";
  return " envelope " + (Array.isArray(c) ? c.join(",") : c);
}

/**
 * The gateway closed the connection with a close code (docs/protocol.md
 * section 5). Four codes end the client with it, without reconnecting:
 * 4000 (another connection joined the pod with the same participant id:
 * reconnecting would replace the other connection, which would replace
 * this one, forever), and, each as its own subclass, 4401
 * (TokenExpiredError), 4403 (RevokedError) and 4410 (KickedError). After
 * the other codes (1001, 1011, 4008, 4503…) the client reconnects, and
 * the ClosedError is the `cause` of the Reconnected that follows.
 */
export class ClosedError extends MCPPError {
  readonly closeCode: number;
  readonly reason: string;
  constructor(closeCode: number, reason: string) {
    super(`the gateway closed the connection: ${describeClose(closeCode)}${reason ? ": " + reason : ""}`);
    this.closeCode = closeCode;
    this.reason = reason;
  }
}

/**
 * 4401: the connection's token expired and no fresh one came first
 * (`client.refresh`). The client does not reconnect with the expired
 * token: connect again with a fresh one (and `resume`).
 */
export class TokenExpiredError extends ClosedError {}

/**
 * 4403: the token was revoked (gone from the gateway's token file, or its
 * pods no longer allow the pod). The client does not reconnect: the token
 * would be refused.
 */
export class RevokedError extends ClosedError {}

/**
 * 4410: a participant holding `gateway/kick` removed this one from the
 * pod; `reason` says who and why (`kicked by mod: looping`). The client
 * does not reconnect: the kick may come with a ban, and would mean
 * nothing if the client came straight back.
 */
export class KickedError extends ClosedError {}

/** The error of a connection the gateway closed with code: a ClosedError, or its subclass for 4401, 4403 and 4410. */
export function closedError(code: number, reason: string): ClosedError {
  switch (code) {
    case 4401: return new TokenExpiredError(code, reason);
    case 4403: return new RevokedError(code, reason);
    case 4410: return new KickedError(code, reason);
  }
  return new ClosedError(code, reason);
}

function describeClose(code: number): string {
  switch (code) {
    case 1000: return "1000 normal closure";
    case 1001: return "1001 going away: the gateway is shutting down";
    case 1009: return "1009 message too big";
    case 1011: return "1011 internal error: the replay was interrupted";
    case 4000: return "4000 replaced: another connection joined the pod with the same participant id";
    case 4008: return "4008 slow consumer: the connection read too slowly and its send queue filled";
    case 4401: return "4401 token expired: the token expired and was not refreshed";
    case 4403: return "4403 revoked: the token no longer admits this participant to this pod";
    case 4410: return "4410 kicked: removed from the pod by a moderator";
    case 4503: return "4503 order lost: this gateway node lost the pod's order";
  }
  return `close ${code}`;
}

/**
 * The connection was lost, or could not be made, without a refusal or a
 * close code from the gateway: the network, a proxy, a crash, no welcome
 * in time, or (in a browser) an upgrade whose answer the browser does not
 * show. An envelope whose send rejects with it may or may not have been
 * relayed.
 */
export class DisconnectedError extends MCPPError {}

/** `close()` was called: what was waiting on the client rejects with it. */
export class ClientClosedError extends MCPPError {
  constructor() {
    super("the client is closed");
  }
}
