// The client: one participant in one pod, over the connections that keep
// it there. It hands out what it receives in order, matches answers to
// requests, confirms what it sends, and when a connection is lost dials
// again and resumes after the last envelope it handed out.

import {
  dial,
  onNode,
  upgradeURL,
  type Connection,
  type StandardWebSocketConstructor,
  type UpgradeQuery,
} from "./connection.js";
import {
  ClientClosedError,
  ClosedError,
  DisconnectedError,
  GatewayError,
  RefusedError,
} from "./errors.js";
import { newId } from "./id.js";
import { Stream } from "./stream.js";
import { loadOpenTelemetry, traceFor } from "./trace.js";
import { trustedCAs, type CACertificate } from "./tls.js";
import {
  CloseCodes,
  GATEWAY_ID,
  Kinds,
  type CapabilityEvent,
  type ContextObject,
  type Envelope,
  type ErrorPayload,
  type Filter,
  type Grant,
  type Kick,
  type Kicked,
  type Refreshed,
  type Revoke,
  type Welcome,
} from "./types.js";

/** How long each dial may take, up to the welcome. */
export const DEFAULT_TIMEOUT_MS = 10_000;
/**
 * The wait before the first reconnection attempt; it doubles with each
 * failed attempt up to DEFAULT_MAX_DELAY_MS. Each wait is drawn between
 * half of it and all of it, so that the participants of a gateway that
 * restarts do not all come back at once.
 */
export const DEFAULT_MIN_DELAY_MS = 100;
export const DEFAULT_MAX_DELAY_MS = 10_000;
/** How long close() waits for the gateway's closing handshake before dropping the connection. */
const CLOSE_WAIT_MS = 1_000;
/**
 * Bounds the ids of system/context events kept to recognise their replay
 * after a resume; past it the client resumes after the newest of them
 * instead (the gateway knows their ids too).
 */
const MAX_SEEN = 4096;
/** Bounds the ids of envelopes written again, whose duplicate_id says the first copy got through. */
const MAX_RESENT = 4096;
/**
 * The close codes after which the client does not reconnect: another
 * connection took the participant id (4000), or the gateway wants this
 * one gone (4401 token expired, 4403 revoked, 4410 kicked).
 */
const FINAL_CLOSE_CODES: ReadonlySet<number> = new Set([
  CloseCodes.replaced,
  CloseCodes.tokenExpired,
  CloseCodes.revoked,
  CloseCodes.kicked,
]);

/** How the client reconnects after a lost connection. */
export interface ReconnectOptions {
  /** The wait before the first attempt (default 100 ms). */
  minDelayMs?: number;
  /** The longest wait between attempts (default 10 s). */
  maxDelayMs?: number;
  /** Ends the client after this many failed attempts in a row; 0 (the default) tries until close(). */
  maxAttempts?: number;
}

/** Which pod to join, as whom, and how. */
export interface ConnectOptions {
  /** The pod to join (required). */
  pod: string;
  /** The participant id, in open mode (a gateway without tokens); a token names the participant otherwise. */
  participant?: string;
  /** Sent as `Authorization: Bearer TOKEN` (on Node), or as `?token=` where headers cannot be set (a browser). */
  token?: string;
  /** The filter to join with (docs/protocol.md section 4), by the query's names. */
  filter?: Filter;
  /** The pod's past to replay after the welcome: the last N envelopes the filter admits, or "all". First connection only. */
  history?: number | "all";
  /** false replays that history unfolded (fold=0). */
  fold?: boolean;
  /** The id of the last envelope a previous client received: what came after it is replayed. */
  resume?: string;
  /**
   * What the participant answers requests of, sent as `serves=` on every
   * connection: `["mcp"]` (SERVES_MCP, the one value the gateway takes)
   * for an MCP server in the pod; welcomes and presence events then show
   * it in its identity (`serves`). Another value is refused (400
   * `invalid_filter`).
   */
  serves?: string[];
  /**
   * true: watch the pod without being present (`observe=1`, on every
   * connection): no presence event, not in welcomes or participant lists.
   * It needs the `gateway/observe` capability: without it connect rejects
   * with a RefusedError (403 `forbidden`).
   */
  observe?: boolean;
  /** false: a lost connection ends the client. Otherwise how to reconnect (default: with backoff, forever). */
  reconnect?: boolean | ReconnectOptions;
  /** Bounds each dial, up to the welcome (default 10 s). */
  timeoutMs?: number;
  /** Extra headers of the upgrade (Node only). */
  headers?: Record<string, string>;
  /**
   * A standard WebSocket constructor to use instead of the ws package
   * (Node) or the platform's own (a browser): another runtime's, or a
   * polyfill. With it the token travels in the query.
   */
  WebSocket?: StandardWebSocketConstructor;
  /**
   * A CA certificate (PEM, a string or a Buffer) to trust for a wss://
   * gateway besides Node's default roots: a gateway whose certificate a
   * private CA signed (Node only; NODE_EXTRA_CA_CERTS does the same for
   * the whole process).
   */
  ca?: CACertificate;
  /** Aborts connect() (not the client once connected: use close()). */
  signal?: AbortSignal;
}

/** Options of one call that waits on the gateway. */
export interface CallOptions {
  /** Stops waiting; the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of send. */
export interface SendOptions extends CallOptions {
  /**
   * true (the default): resolve once the gateway has accepted the
   * envelope, reject with its refusal. false: resolve once the envelope
   * is written, for a sender that must not spend a round trip on each; a
   * refusal then comes in the stream as a system/error whose
   * correlation_id is the id.
   */
  confirm?: boolean;
  /**
   * The W3C trace context to send the envelope in (its trace field),
   * when it has none: a traceparent (version 00) and its tracestate.
   * Without it, the active span of @opentelemetry/api's context, when
   * that package is installed (docs/protocol.md section 1).
   */
  traceparent?: string;
  tracestate?: string;
}

/**
 * In the stream, in place of the welcome of a new connection: the
 * connection was lost and is back. `resumed` true means nothing was lost:
 * what was sent meanwhile follows, none missing and none twice. `resumed`
 * false means there may be a gap: the gateway no longer had the last
 * envelope received (or keeps no history, or none had been received).
 */
export class Reconnected {
  readonly type = "reconnected" as const;
  constructor(
    /** Whether the gateway resumed after `resumedAfter`. */
    readonly resumed: boolean,
    /** The id the client asked to resume after, if any. */
    readonly resumedAfter: string | undefined,
    /** The new connection's welcome payload (its participants are the ones to trust: presence missed meanwhile is not replayed). */
    readonly welcome: Welcome,
    /** The new connection's welcome envelope. */
    readonly envelope: Envelope,
    /** Why the connection was lost. */
    readonly cause: Error,
    /** How many dials it took. */
    readonly attempts: number,
  ) {}

  /** Whether envelopes may have been missed while the connection was down. */
  get gap(): boolean {
    return !this.resumed;
  }
}

/** What the stream yields: the envelopes received, and reconnections. */
export type StreamItem = Envelope | Reconnected;

/** The state of a client. */
export type ClientState = "open" | "reconnecting" | "closed";

interface PendingSend {
  id: string;
  text: string;
  /** Whether it waits for the gateway's judgement, or only for its write. */
  confirm: boolean;
  /** Whether the gateway would refuse a second copy with duplicate_id, so that it may be written again. */
  durable: boolean;
  /** The connection it was last written on, and its place there. */
  conn: Connection | undefined;
  seq: number;
  resolve: () => void;
  reject: (err: unknown) => void;
}

interface PendingRequest {
  text: string;
  resolve: (env: Envelope) => void;
  reject: (err: unknown) => void;
  /**
   * Set for an envelope of the pod that waits for the gateway's answer (a
   * grant, a revoke): written on one connection only, never asked again,
   * since a second copy would be a second envelope of the pod. It names
   * the envelope, for the error when that connection is lost first.
   */
  once?: { what: string; conn: Connection | undefined };
}

/** A sync: a request that changes nothing, whose answer says the gateway has judged what was written before it. */
interface Sync {
  id: string;
  conn: Connection;
  upTo: number;
}

/**
 * Joins a pod: dials the gateway at url (`ws://HOST:PORT`, with or
 * without `/ws`; `http://` works too) and resolves once it is welcomed.
 * A refused upgrade rejects with a RefusedError (its HTTP `status` and
 * `code`); connect itself does not retry.
 */
export async function connect(url: string, options: ConnectOptions): Promise<Client> {
  if (options === null || typeof options !== "object") throw new TypeError("connect: options are required ({pod: …})");
  if (typeof options.pod !== "string" || options.pod === "") throw new TypeError("connect: options.pod is required");
  if (options.history !== undefined && options.history !== "all" && !(Number.isInteger(options.history) && options.history >= 0)) {
    throw new TypeError(`connect: options.history must be a number of envelopes or "all", not ${JSON.stringify(options.history)}`);
  }
  return Client.open(url, options);
}

/**
 * One participant in one pod. Iterate it (`for await`) for everything it
 * receives, in order; send, request, branch and conclude from anywhere,
 * also while iterating.
 */
export class Client implements AsyncIterable<StreamItem> {
  /** The gateway's URL; refresh() takes a token out of its query. */
  private url: string;
  private readonly opts: ConnectOptions;
  private readonly reconnectOpts: Required<ReconnectOptions> | undefined;
  private readonly tokenInQuery: boolean;
  /** What a connection's certificate is checked against (ConnectOptions.ca), or undefined for Node's defaults. */
  private ca: Array<string | Buffer> | undefined;
  private readonly stream = new Stream<StreamItem>();
  /** Aborts dials and waits when the client is closed. */
  private readonly stopping = new AbortController();

  private conn: Connection | undefined;
  private welcomeEnv!: Envelope;
  private filter: Filter;
  private status: ClientState = "open";
  private closing: Promise<void> | undefined;

  /** The id of the last pod envelope handed out: where a reconnection resumes. */
  private resumeId: string | undefined;
  /** Ids of the system/context events handed out since it, which a resume replays. */
  private seen = new Set<string>();

  private readonly sends = new Map<string, PendingSend>();
  /** Ids of envelopes sent with confirm false and written again: the gateway's duplicate_id for them is dropped. */
  private readonly resent = new Set<string>();
  private readonly requests = new Map<string, PendingRequest>();
  private seq = 0;
  private sync: Sync | undefined;
  private syncQueued = false;

  /** Use connect(). */
  private constructor(url: string, options: ConnectOptions) {
    this.url = url;
    this.opts = { ...options };
    // A copy: every connection sends what was asked at connect, whatever becomes of the caller's array.
    if (Array.isArray(options.serves)) this.opts.serves = [...options.serves];
    this.filter = { ...(options.filter ?? {}) };
    this.resumeId = options.resume === "" ? undefined : options.resume;
    this.tokenInQuery = options.WebSocket !== undefined || !onNode();
    const r = options.reconnect;
    if (r === false) this.reconnectOpts = undefined;
    else {
      const o = typeof r === "object" ? r : {};
      const min = positive(o.minDelayMs, DEFAULT_MIN_DELAY_MS);
      this.reconnectOpts = {
        minDelayMs: min,
        maxDelayMs: Math.max(positive(o.maxDelayMs, DEFAULT_MAX_DELAY_MS), min),
        maxAttempts: Math.max(0, o.maxAttempts ?? 0),
      };
    }
    // Checks the URL, the filter, serves and observe now, so that a mistake is a TypeError of connect().
    upgradeURL(url, { pod: options.pod, filter: this.filter, serves: options.serves, observe: options.observe }, this.tokenInQuery, true);
    if (options.ca !== undefined && options.WebSocket !== undefined) {
      throw new TypeError("ca is for the ws package's connections: a standard WebSocket trusts what its platform trusts");
    }
  }

  /** @internal: connect() itself, which alone may construct a client. */
  static async open(url: string, options: ConnectOptions): Promise<Client> {
    const client = new Client(url, options);
    client.ca = await trustedCAs(options.ca);
    await loadOpenTelemetry(); // send puts the active span in envelopes when it is there
    const { conn, welcome } = await dial(client.upgrade(client.resumeId, true), client.dialOptions(options.signal));
    client.stream.push(welcome);
    client.adopt(conn, welcome);
    return client;
  }

  /** The welcome's payload of the current connection (of the last one while reconnecting). */
  get welcome(): Welcome {
    return this.welcomeEnv.payload as Welcome;
  }

  /** "open", "reconnecting" (sends and requests wait), or "closed" (after close() or an end for good). */
  get state(): ClientState {
    return this.status;
  }

  /**
   * Sends an envelope and resolves with its id once the gateway has
   * accepted it; rejects with a GatewayError (its `code`) when the gateway
   * refuses it. With `confirm: false`, resolves once it is written, and a
   * refusal comes in the stream. An envelope without `id` gets a new
   * UUIDv4. While the client reconnects, it waits for the new connection;
   * an envelope whose connection was lost before the gateway judged it
   * (with `confirm: false`, under its write) is written again on the next
   * one, and a `duplicate_id` answer then means the first copy got
   * through (when the gateway keeps no history, or the envelope is
   * ephemeral or a request, the gateway could not tell: it rejects with a
   * DisconnectedError instead).
   */
  send(envelope: Envelope, options: SendOptions = {}): Promise<string> {
    if (envelope === null || typeof envelope !== "object" || Array.isArray(envelope)) {
      return Promise.reject(new TypeError("send: an envelope is an object ({kind, payload, …})"));
    }
    if (typeof envelope.kind !== "string" || envelope.kind === "") {
      return Promise.reject(new TypeError("send: the envelope needs a kind"));
    }
    if (envelope.id !== undefined && (typeof envelope.id !== "string" || envelope.id === "")) {
      return Promise.reject(new TypeError("send: an envelope's id is a non-empty string (leave it out to have one made)"));
    }
    const id = envelope.id ?? newId();
    if (this.sends.has(id)) return Promise.reject(new TypeError(`send: envelope ${id} is already being sent`));
    let text: string;
    try {
      const trace = traceFor(envelope, options.traceparent, options.tracestate);
      text = JSON.stringify(envelope.id === undefined || trace ? { ...envelope, id, ...(trace ? { trace } : {}) } : envelope);
    } catch (err) {
      if (err instanceof TypeError && err.message.startsWith("send: traceparent")) return Promise.reject(err);
      return Promise.reject(new TypeError(`send: the envelope is not JSON: ${String(err)}`, { cause: err }));
    }
    const limit = this.welcome.limits?.max_message_bytes;
    if (typeof limit === "number" && limit > 0 && text.length > limit / 3 && new TextEncoder().encode(text).length > limit) {
      // The gateway would refuse it the same way, or, at twice the limit,
      // close the connection (1009); refusing it here keeps the connection.
      return Promise.reject(new GatewayError({
        error: "message_too_large",
        message: `the envelope is over the gateway's max_message_bytes (${limit}); refused by the client`,
        retryable: false,
      }));
    }
    if (this.closing || this.status === "closed") return Promise.reject(this.endError());
    return this.waitFor(options.signal, (resolve, reject) => {
      const p: PendingSend = {
        id, text, confirm: options.confirm !== false,
        durable: !envelope.kind.startsWith("gateway/") && envelope.lifecycle?.mode !== "ephemeral",
        conn: undefined, seq: 0,
        resolve: () => resolve(id), reject,
      };
      this.sends.set(id, p);
      this.writeSend(p);
      return () => this.sends.delete(id);
    });
  }

  /**
   * Sends a `gateway/*` request (docs/protocol.md section 6) and resolves
   * with the gateway's answer, the envelope whose correlation_id is the
   * request's id; rejects with a GatewayError when the answer is a
   * system/error. Kinds the client does not know are sent as they are.
   * When the connection is lost before the answer, the request is asked
   * again on the next one.
   */
  request(kind: string, payload: unknown = {}, options: CallOptions = {}): Promise<Envelope> {
    if (typeof kind !== "string" || !kind.startsWith("gateway/")) {
      return Promise.reject(new TypeError(`request: ${JSON.stringify(kind)} is not a gateway/* kind; send other envelopes with send()`));
    }
    if (this.closing || this.status === "closed") return Promise.reject(this.endError());
    const id = newId();
    let text: string;
    try {
      text = JSON.stringify({ id, kind, payload });
    } catch (err) {
      return Promise.reject(new TypeError(`request: the payload is not JSON: ${String(err)}`, { cause: err }));
    }
    return this.waitFor(options.signal, (resolve, reject) => {
      this.requests.set(id, { text, resolve, reject });
      this.conn?.write(text).catch(ignore); // without a connection, the next one asks it
      return () => this.requests.delete(id);
    });
  }

  /**
   * Opens a sub-context (docs/protocol.md sections 3 and 9): sends a
   * `context/branch` envelope with `payload` in a new context of `type`
   * (with `parent` as its parent, if given) and resolves with the context,
   * to send more envelopes in it and to conclude it.
   */
  async branch(type = "reasoning", options: { parent?: string; payload?: unknown } & CallOptions = {}): Promise<ContextObject> {
    const context: ContextObject = { id: newId(), type };
    if (options.parent !== undefined) context.parent = options.parent;
    await this.send({ kind: "context/branch", context, payload: options.payload ?? {} }, options);
    return context;
  }

  /**
   * Concludes a context (its id, or what branch() resolved with): sends
   * a `conclusion` envelope in it, whose
   * payload is `summary` (a string becomes `{"summary": …}`). Everyone
   * whose filter admits the context then receives it and a
   * `system/context` event with the context's statistics. Resolves with
   * the conclusion's id.
   */
  conclude(context: string | ContextObject, summary: unknown = {}, options: CallOptions = {}): Promise<string> {
    const id = typeof context === "string" ? context : context?.id;
    if (typeof id !== "string" || id === "") return Promise.reject(new TypeError("conclude: the context is its id, or what branch() resolved with"));
    const payload = typeof summary === "string" ? { summary } : summary;
    return this.send({ kind: "conclusion", context: { id }, payload }, options);
  }

  /**
   * Gives the gateway a fresh token for this connection
   * (`gateway/refresh`, docs/protocol.md section 6), before the current
   * one expires: its claims (capabilities, expiry) apply from the answer
   * on, and the client presents it on every later reconnection (in the
   * Authorization header, or where the token travels in the query, there;
   * a token given in the URL's query is dropped from it). It must name the
   * same participant. Resolves with the answer's payload; a refusal
   * rejects with a GatewayError (`unauthorized` whose message names the
   * claim that failed, `forbidden`, `auth_violation` for another
   * participant, `unknown_request` on an open gateway), and the
   * connection keeps its current token. When the connection is lost
   * before the answer, it is asked again on the next one.
   */
  async refresh(token: string, options: CallOptions = {}): Promise<Refreshed> {
    if (typeof token !== "string" || token === "") throw new TypeError("refresh: the token is a non-empty string");
    const answer = await this.request("gateway/refresh", { token }, options);
    this.opts.token = token;
    const u = new URL(this.url);
    if (u.searchParams.has("token")) {
      u.searchParams.delete("token");
      this.url = u.toString();
    }
    // The new token goes in its own header: one set by hand would
    // present the old token again.
    if (this.opts.headers !== undefined) {
      this.opts.headers = Object.fromEntries(Object.entries(this.opts.headers).filter(([name]) => name.toLowerCase() !== "authorization"));
    }
    return answer.payload as Refreshed;
  }

  /**
   * Removes a participant from the pod (`gateway/kick`, docs/protocol.md
   * section 6; this client needs the `gateway/kick` capability): each of
   * its connections is closed with 4410 and `reason`, everyone sees it
   * leave, and its joins are refused for `ban_ms` milliseconds (0 or
   * absent: it may come back at once; at most a week). Resolves with the
   * answer's payload (`connections` closed on the node that took it,
   * `banned_until`); a refusal rejects with a GatewayError
   * (`capability_violation`, `invalid_envelope`).
   */
  async kick(kick: Kick, options: CallOptions = {}): Promise<Kicked> {
    if (kick === null || typeof kick !== "object" || typeof kick.participant !== "string" || kick.participant === "") {
      throw new TypeError("kick: takes {participant, reason?, ban_ms?}, participant a participant id");
    }
    const answer = await this.request("gateway/kick", kick, options);
    return answer.payload as Kicked;
  }

  /**
   * Grants capabilities to another participant (`capability/grant`,
   * docs/protocol.md section 6; this client needs the `capability/grant`
   * capability): sends the grant, an envelope of the pod, to its
   * recipient (`to`), and resolves with the gateway's answer, whose
   * `grant_id` (the grant's envelope id) names it for revoke(). With
   * `context` the grant holds only in that context and its subtree, and
   * ends when it concludes. A refusal rejects with a GatewayError
   * (`capability_violation`, `invalid_context`, `invalid_envelope`…).
   * The grant is not sent again after a lost connection: when the
   * connection is lost before the answer, it rejects with a
   * DisconnectedError (the grant may or may not hold).
   */
  grant(grant: Grant, options: CallOptions = {}): Promise<CapabilityEvent> {
    if (grant === null || typeof grant !== "object") {
      return Promise.reject(new TypeError("grant: takes {recipient, capabilities, context?, reason?}"));
    }
    const payload: Record<string, unknown> = { ...grant };
    if (grant.context !== undefined) {
      const id = typeof grant.context === "string" ? grant.context : grant.context?.id;
      if (typeof id !== "string" || id === "") return Promise.reject(new TypeError("grant: context is a context's id, or what branch() resolved with"));
      payload["context"] = id;
    }
    return this.capabilityChange("capability/grant", grant.recipient, payload, options);
  }

  /**
   * Takes back what this participant granted (`capability/revoke`,
   * docs/protocol.md section 6): one grant (`grant_id`, the id grant()
   * resolved with) or capabilities out of every grant made to
   * `recipient`, one of the two. Sent to the recipient, who is told; it
   * resolves with the gateway's answer (`event` `"revoked"`). A refusal
   * rejects with a GatewayError (`capability_violation` for another
   * grantor's grant, `invalid_envelope` for a grant not in force). As
   * grant(), it is not sent again after a lost connection.
   */
  revoke(revoke: Revoke, options: CallOptions = {}): Promise<CapabilityEvent> {
    if (revoke === null || typeof revoke !== "object") {
      return Promise.reject(new TypeError("revoke: takes {recipient, grant_id?, capabilities?, reason?}"));
    }
    return this.capabilityChange("capability/revoke", revoke.recipient, { ...revoke }, options);
  }

  /** Sends a grant or a revoke to recipient and waits for the gateway's answer, a system/capability. */
  private capabilityChange(kind: string, recipient: unknown, payload: Record<string, unknown>, options: CallOptions): Promise<CapabilityEvent> {
    if (typeof recipient !== "string" || recipient === "") {
      return Promise.reject(new TypeError(`${kind.slice("capability/".length)}: recipient is a participant id`));
    }
    if (this.closing || this.status === "closed") return Promise.reject(this.endError());
    const id = newId();
    let text: string;
    try {
      text = JSON.stringify({ id, kind, to: [recipient], payload });
    } catch (err) {
      return Promise.reject(new TypeError(`${kind}: the payload is not JSON: ${String(err)}`, { cause: err }));
    }
    return this.waitFor<Envelope>(options.signal, (resolve, reject) => {
      const r: PendingRequest = { text, resolve, reject, once: { what: `${kind} ${id}`, conn: undefined } };
      this.requests.set(id, r);
      if (this.conn !== undefined) this.writeRequest(this.conn, r); // without a connection, the next one writes it
      return () => this.requests.delete(id);
    }).then((answer) => answer.payload as CapabilityEvent);
  }

  /**
   * Leaves the pod: closes the connection (1000) or stops reconnecting.
   * The stream ends (done) once what was received is taken; calls still
   * waiting reject with a ClientClosedError.
   */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closing = this.shutdown();
    return this.closing;
  }

  /**
   * Everything received, in order, as plain objects: the welcome first,
   * then every envelope (system ones included: presence, context
   * events, the refusals of envelopes sent with confirm false), and a
   * Reconnected
   * after each reconnection. Breaking out of the loop does not close the
   * client. When the client ends for good (4000 replaced; 4401, 4403 and
   * 4410 as TokenExpiredError, RevokedError and KickedError; a refused
   * reconnection) the loop throws why, after what was received.
   */
  [Symbol.asyncIterator](): AsyncIterator<StreamItem> {
    const stream = this.stream;
    return {
      next: () => stream.next(),
      return: async () => ({ value: undefined, done: true }),
    };
  }

  // ---- connections

  /**
   * The URL of one connection: the filter in effect, what to resume
   * after, and on the first the history asked for. Serves and observe go
   * on every one: a reconnection without them would be a participant
   * nobody asks for tools, or an observer made visible.
   */
  private upgrade(resume: string | undefined, first: boolean): string {
    const q: UpgradeQuery = {
      pod: this.opts.pod,
      participant: this.opts.participant,
      token: this.opts.token,
      filter: this.filter,
      resume,
      serves: this.opts.serves,
      observe: this.opts.observe,
    };
    if (first) {
      q.history = this.opts.history;
      q.fold = this.opts.fold;
    }
    return upgradeURL(this.url, q, this.tokenInQuery, false);
  }

  private dialOptions(signal: AbortSignal | undefined) {
    const headers: Record<string, string> = { ...(this.opts.headers ?? {}) };
    if (this.opts.token !== undefined && !this.tokenInQuery) headers["Authorization"] = `Bearer ${this.opts.token}`;
    return {
      headers,
      WebSocket: this.opts.WebSocket,
      ca: this.ca,
      timeoutMs: positive(this.opts.timeoutMs, DEFAULT_TIMEOUT_MS),
      signal,
    };
  }

  /** Makes conn the live connection: what it receives is dispatched, and its end handled. */
  private adopt(conn: Connection, welcome: Envelope): void {
    this.conn = conn;
    this.welcomeEnv = welcome;
    const filter = (welcome.payload as Welcome).filter;
    if (filter) this.filter = { ...filter };
    this.status = "open";
    conn.onLine((line) => this.dispatch(conn, line));
    void conn.ended.then((why) => this.lost(conn, why));
  }

  /** Hands one received envelope to whoever waits for it: a request, a send, or the stream. */
  private dispatch(conn: Connection, line: string): void {
    let env: Envelope;
    try {
      env = JSON.parse(line) as Envelope;
    } catch {
      return; // the gateway writes JSON objects; nothing to hand out
    }
    if (env === null || typeof env !== "object" || Array.isArray(env)) return;
    if (env.from === GATEWAY_ID && env.correlation_id !== undefined && this.answer(conn, env)) return;
    if (env.kind === Kinds.filter && env.payload !== null && typeof env.payload === "object") {
      this.filter = { ...(env.payload as Filter) };
    }
    this.handOut(env);
  }

  /** Gives an answer of the gateway to the request, sync or send it is about; false when none waits for it. */
  private answer(conn: Connection, env: Envelope): boolean {
    const ids = Array.isArray(env.correlation_id) ? env.correlation_id : [env.correlation_id];
    for (const id of ids) {
      if (typeof id !== "string") continue;
      if (this.sync !== undefined && this.sync.id === id) {
        this.synced(this.sync);
        return true;
      }
      const r = this.requests.get(id);
      if (r !== undefined) {
        this.requests.delete(id);
        if (env.kind === Kinds.filter && env.payload !== null && typeof env.payload === "object") {
          this.filter = { ...(env.payload as Filter) };
        }
        if (env.kind === Kinds.error) r.reject(new GatewayError(env.payload as ErrorPayload, env));
        else r.resolve(env);
        return true;
      }
      const p = this.sends.get(id);
      if (p !== undefined && p.confirm && p.conn === conn && env.kind === Kinds.error) {
        this.sends.delete(id);
        const e = new GatewayError(env.payload as ErrorPayload, env);
        // A copy written again after a lost connection that the gateway
        // already holds: the first copy got through.
        if (e.code === "duplicate_id" && p.seq < 0) p.resolve();
        else p.reject(e);
        return true;
      }
      // A copy sent with confirm false and written again after a lost
      // connection, that the gateway already holds: the first copy got
      // through, and the refusal is nobody's news.
      if (env.kind === Kinds.error && this.resent.has(id)) {
        this.resent.delete(id);
        if ((env.payload as ErrorPayload | undefined)?.error === "duplicate_id") return true;
      }
    }
    return false;
  }

  /**
   * Pushes an envelope into the stream, once: an id handed out since the
   * resume point is a replay after a resume, and is dropped. Keeps the id
   * of the last pod envelope the history stores, to resume after it.
   */
  private handOut(env: Envelope): void {
    const id = typeof env.id === "string" && env.id !== "" ? env.id : undefined;
    if (id !== undefined && (id === this.resumeId || this.seen.has(id))) return;
    this.stream.push(env);
    if (id === undefined) return;
    if (typeof env.kind !== "string") return;
    if (!env.kind.startsWith("system/")) {
      if (env.lifecycle?.mode !== "ephemeral") {
        this.resumeId = id;
        this.seen.clear();
      }
    } else if (env.kind === Kinds.context) {
      if (this.seen.size >= MAX_SEEN) {
        this.resumeId = id;
        this.seen.clear();
      } else {
        this.seen.add(id);
      }
    }
  }

  /** The live connection ended: reconnect, or end the client. */
  private lost(conn: Connection, why: Error): void {
    if (conn !== this.conn) return;
    this.conn = undefined;
    this.sync = undefined;
    if (this.closing) return;
    const historyOn = (this.welcome.limits?.history ?? 0) > 0;
    for (const p of [...this.sends.values()]) {
      if (p.conn === undefined) continue; // not written yet: the next connection writes it
      if (historyOn && p.durable) {
        // Written again on the next connection; the gateway's duplicate_id
        // for the second copy then says the first got through.
        if (p.confirm) p.seq = -1;
        else this.markResent(p.id);
        continue;
      }
      this.sends.delete(p.id);
      const when = p.confirm ? "before the gateway judged" : "while writing";
      const note = !p.confirm || historyOn ? "" : " (the gateway keeps no history, so a second copy would not be recognised)";
      p.reject(new DisconnectedError(`the connection was lost ${when} envelope ${p.id}: it may or may not have been relayed${note}`, { cause: why }));
    }
    for (const [id, r] of [...this.requests]) {
      if (r.once === undefined || r.once.conn !== conn) continue;
      this.requests.delete(id);
      r.reject(new DisconnectedError(`the connection was lost before the gateway answered ${r.once.what}: it may or may not have been applied`, { cause: why }));
    }
    if (why instanceof ClosedError && FINAL_CLOSE_CODES.has(why.closeCode)) {
      // 4000: the other connection is this participant too: reconnecting
      // would replace it, and it would replace this one, forever. 4401,
      // 4403, 4410: the gateway wants this connection gone.
      this.end(why);
      return;
    }
    if (this.reconnectOpts === undefined) {
      this.end(why);
      return;
    }
    this.status = "reconnecting";
    this.reconnect(why, this.reconnectOpts).catch((err: unknown) => this.end(err instanceof Error ? err : new Error(String(err))));
  }

  /** Dials again until it succeeds, the client is closed, the gateway refuses it for good, or the attempts are spent. */
  private async reconnect(cause: Error, r: Required<ReconnectOptions>): Promise<void> {
    let last: unknown = cause;
    for (let attempt = 0; ; attempt++) {
      if (r.maxAttempts > 0 && attempt >= r.maxAttempts) {
        this.end(new DisconnectedError(`gave up reconnecting after ${attempt} attempts: ${String((last as Error)?.message ?? last)}`, { cause: last }));
        return;
      }
      if (!(await this.pause(backoff(r, attempt)))) return;
      const resume = this.resumeId;
      let dialed;
      try {
        dialed = await dial(this.upgrade(resume, false), this.dialOptions(this.stopping.signal));
      } catch (err) {
        if (this.closing) return;
        if (err instanceof RefusedError && !err.temporary) {
          this.end(err);
          return;
        }
        last = err;
        continue;
      }
      if (this.closing) {
        dialed.conn.destroy();
        return;
      }
      const w = dialed.welcome.payload as Welcome;
      const resumed = resume !== undefined && w.history?.resumed === true;
      this.stream.push(new Reconnected(resumed, resume, w, dialed.welcome, cause, attempt + 1));
      this.adopt(dialed.conn, dialed.welcome);
      this.flush(dialed.conn);
      return;
    }
  }

  /** Waits ms, or until the client is closed; false when it was. */
  private pause(ms: number): Promise<boolean> {
    const signal = this.stopping.signal;
    if (signal.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        resolve(!signal.aborted);
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
    });
  }

  /** Writes on a new connection what the last one left unanswered: sends, then requests. */
  private flush(conn: Connection): void {
    for (const p of this.sends.values()) this.writeSend(p);
    for (const r of this.requests.values()) {
      if (r.once === undefined || r.once.conn === undefined) this.writeRequest(conn, r);
    }
  }

  /** Writes a request (or a grant or revoke, which it ties to conn) on conn. */
  private writeRequest(conn: Connection, r: PendingRequest): void {
    if (r.once !== undefined) r.once.conn = conn;
    conn.write(r.text).catch(ignore); // a write that fails loses the connection, which lost() handles
  }

  // ---- sending and confirming

  /** Writes a send on the live connection (if there is one: otherwise the next writes it) and asks for its confirmation. */
  private writeSend(p: PendingSend): void {
    const conn = this.conn;
    if (conn === undefined) return;
    if (!p.confirm) {
      p.conn = conn;
      conn.write(p.text).then(() => {
        if (this.sends.get(p.id) !== p) return;
        this.sends.delete(p.id);
        p.resolve();
      }, ignore); // a write that fails loses the connection, and lost() rejects it
      return;
    }
    // A copy written before (seq -1, left by lost()) may be a duplicate:
    // its place stays negative so that duplicate_id resolves it.
    const again = p.seq < 0 || p.conn !== undefined;
    p.conn = conn;
    p.seq = again ? -++this.seq : ++this.seq;
    conn.write(p.text).catch(ignore); // a write that fails loses the connection, which lost() handles
    this.queueSync();
  }

  /**
   * Asks the gateway, once the current turn's sends are written, for an
   * answer that comes after its judgement of them: a gateway/filter
   * request that changes nothing. One is in flight at a time; sends made
   * meanwhile wait for the next, so sends made together share one.
   */
  private queueSync(): void {
    if (this.syncQueued) return;
    this.syncQueued = true;
    queueMicrotask(() => {
      this.syncQueued = false;
      this.writeSync();
    });
  }

  private writeSync(): void {
    const conn = this.conn;
    if (conn === undefined || (this.sync !== undefined && this.sync.conn === conn)) return;
    if (![...this.sends.values()].some((p) => p.confirm && p.conn === conn)) return;
    const s: Sync = { id: newId(), conn, upTo: this.seq };
    this.sync = s;
    conn.write(JSON.stringify({ id: s.id, kind: "gateway/filter", payload: {} })).catch(ignore);
  }

  /** Remembers that an envelope sent with confirm false is written again. */
  private markResent(id: string): void {
    this.resent.add(id);
    if (this.resent.size > MAX_RESENT) {
      const oldest = this.resent.values().next().value;
      if (oldest !== undefined) this.resent.delete(oldest);
    }
  }

  /** The answer to a sync came: the sends written before it that were not refused were accepted. */
  private synced(s: Sync): void {
    this.sync = undefined;
    for (const p of [...this.sends.values()]) {
      if (p.confirm && p.conn === s.conn && Math.abs(p.seq) <= s.upTo) {
        this.sends.delete(p.id);
        p.resolve();
      }
    }
    this.writeSync();
  }

  // ---- ending

  /** A promise registered as pending, whose signal removes it and rejects it. */
  private waitFor<T>(
    signal: AbortSignal | undefined,
    register: (resolve: (v: T) => void, reject: (e: unknown) => void) => () => void,
  ): Promise<T> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<T>((resolve, reject) => {
      let unregister = (): void => {};
      const onAbort = () => {
        unregister();
        reject(signal?.reason);
      };
      const settle = <A>(f: (a: A) => void) => (a: A) => {
        signal?.removeEventListener("abort", onAbort);
        f(a);
      };
      unregister = register(settle(resolve), settle(reject));
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Why calls fail now that the client has ended. */
  private endError(): Error {
    return this.ended ?? new ClientClosedError();
  }

  private ended: Error | undefined;

  /** Ends the client for good with err: calls waiting reject with it, and the stream throws it once taken. */
  private end(err: Error): void {
    if (this.status === "closed") return;
    this.status = "closed";
    this.ended = err;
    this.stopping.abort(err);
    this.failAll(err);
    this.stream.end(err);
    this.conn?.destroy();
    this.conn = undefined;
  }

  private failAll(err: Error): void {
    for (const p of this.sends.values()) p.reject(err);
    this.sends.clear();
    for (const r of this.requests.values()) r.reject(err);
    this.requests.clear();
    this.sync = undefined;
  }

  private async shutdown(): Promise<void> {
    if (this.status === "closed") return;
    this.status = "closed";
    const err = new ClientClosedError();
    this.ended = err;
    this.stopping.abort(err);
    this.failAll(err);
    this.stream.end();
    const conn = this.conn;
    this.conn = undefined;
    if (conn === undefined) return;
    conn.close();
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([conn.ended, new Promise((r) => (timer = setTimeout(r, CLOSE_WAIT_MS)))]);
    clearTimeout(timer);
    conn.destroy();
  }
}

/** The wait before attempt n (from 0): minDelayMs doubled n times, at most maxDelayMs, of which a random half is taken off. */
function backoff(r: Required<ReconnectOptions>, n: number): number {
  const d = Math.min(r.maxDelayMs, r.minDelayMs * 2 ** Math.min(n, 30));
  return d / 2 + Math.random() * (d / 2);
}

function positive(v: number | undefined, def: number): number {
  return v !== undefined && v > 0 ? v : def;
}

function ignore(): void {}
