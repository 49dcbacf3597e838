// One WebSocket connection to a pod, up to its welcome and then line by
// line: on Node through the ws package (which sends headers and shows a
// refused upgrade's HTTP answer), elsewhere through the standard
// WebSocket of the platform (a browser's), which does neither.

import { closedError, DisconnectedError, RefusedError } from "./errors.js";
import { Kinds, type Envelope, type Filter } from "./types.js";

/**
 * The standard (WHATWG) WebSocket, as browsers have it: what the client
 * needs of one given as `ConnectOptions.WebSocket`.
 */
export interface StandardWebSocket {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: string, listener: (event: any) => void): void;
}

/** A constructor of standard WebSockets, such as a browser's `WebSocket`. */
export type StandardWebSocketConstructor = new (url: string) => StandardWebSocket;

/** The largest WebSocket message read: a batch of 256 envelopes of up to twice the default 1 MiB limit. */
const READ_LIMIT = 64 << 20;

/** How much of a refusal's body is read: the gateway's JSON is far shorter. */
const REFUSAL_BODY_LIMIT = 4096;

/** Close codes that say the connection ended without a close frame. */
const NO_CLOSE_FRAME = new Set([1005, 1006, 1015]);

/** What one connection is dialed with. */
export interface DialOptions {
  /** Sent with the upgrade (Node only: a browser cannot set them). */
  headers: Record<string, string>;
  /** The standard WebSocket to use instead of the ws package. */
  WebSocket: StandardWebSocketConstructor | undefined;
  /** The CAs a wss:// gateway's certificate is checked against (trustedCAs), in place of Node's defaults (ws package only). */
  ca: Array<string | Buffer> | undefined;
  /** Bounds the dial, up to the welcome. */
  timeoutMs: number;
  signal: AbortSignal | undefined;
}

/** The parameters of one upgrade (docs/protocol.md sections 1, 4 and 8). */
export interface UpgradeQuery {
  pod: string;
  participant?: string | undefined;
  token?: string | undefined;
  filter?: Filter | undefined;
  history?: number | "all" | undefined;
  fold?: boolean | undefined;
  resume?: string | undefined;
  /** serves=, the values comma-separated (an empty list leaves it out). */
  serves?: string[] | undefined;
  /** true: observe=1. */
  observe?: boolean | undefined;
}

/**
 * The URL of one upgrade: `url` (ws://, wss://, http:// or https://; the
 * path /ws when it has none) with the pod, the participant, what it
 * serves, observe, the filter and the history parameters in its query,
 * and the token when it must travel there (a browser cannot send the
 * Authorization header). Strict, a filter, serves or observe value the
 * query cannot write is a TypeError.
 */
export function upgradeURL(url: string, q: UpgradeQuery, tokenInQuery: boolean, strict: boolean): string {
  const u = gatewayURL(url, "ws");
  if (u.pathname === "" || u.pathname === "/") u.pathname = "/ws";
  const p = u.searchParams;
  p.set("pod", q.pod);
  if (q.participant !== undefined) p.set("participant", q.participant);
  if (q.token !== undefined && tokenInQuery) p.set("token", q.token);
  if (q.serves !== undefined) {
    if (strict && !(Array.isArray(q.serves) && q.serves.every((v) => typeof v === "string"))) {
      throw new TypeError(`serves: ${JSON.stringify(q.serves)} is not a list of strings (such as ["mcp"])`);
    }
    if (q.serves.length > 0) p.set("serves", q.serves.join(","));
  }
  if (q.observe !== undefined) {
    if (strict && typeof q.observe !== "boolean") throw new TypeError(`observe: ${JSON.stringify(q.observe)} is not a boolean`);
    if (q.observe) p.set("observe", "1");
  }
  for (const [name, value] of Object.entries(q.filter ?? {})) {
    const v = filterValue(name, value, strict);
    if (v !== undefined) p.set(name, v);
  }
  if (q.resume !== undefined && q.resume !== "") p.set("resume", q.resume);
  if (q.history !== undefined && q.history !== 0) {
    p.set("history", String(q.history));
    if (q.fold === false) p.set("fold", "0");
  }
  return u.toString();
}

/**
 * A filter field as the query writes it: booleans 0 or 1, lists
 * comma-separated; undefined leaves it out (an absent value, an empty
 * list, which is the default, and, unless strict, a value of a shape the
 * query has no form for, which a newer gateway's effective filter may
 * hold).
 */
function filterValue(name: string, value: unknown, strict: boolean): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value === "boolean") return value ? "1" : "0";
  if (typeof value === "string") return value;
  if (Array.isArray(value) && value.every((v) => typeof v === "string")) {
    return value.length === 0 ? undefined : value.join(",");
  }
  if (!strict) return undefined;
  throw new TypeError(`filter.${name}: ${JSON.stringify(value)} is not a boolean, a string or a list of strings`);
}

/**
 * `url` parsed, with its scheme turned into the family wanted (ws or
 * http); it throws a TypeError for a URL that is none of the four.
 */
export function gatewayURL(url: string, family: "ws" | "http"): URL {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`the gateway's URL ${JSON.stringify(url)} does not parse`);
  }
  const secure = u.protocol === "wss:" || u.protocol === "https:";
  if (!secure && u.protocol !== "ws:" && u.protocol !== "http:") {
    throw new TypeError(`the gateway's URL ${JSON.stringify(url)}: the scheme must be ws, wss, http or https`);
  }
  // URL keeps its scheme when set between special and non-special
  // schemes; ws, wss, http and https are all special, so this holds.
  u.protocol = family === "ws" ? (secure ? "wss:" : "ws:") : (secure ? "https:" : "http:");
  u.hash = "";
  return u;
}

/** Whether the client runs on Node, where the ws package is used. */
export function onNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === "string";
}

/** The platform's own WebSocket (a browser's), or undefined. */
export function platformWebSocket(): StandardWebSocketConstructor | undefined {
  return (globalThis as { WebSocket?: StandardWebSocketConstructor }).WebSocket;
}

/** The low level of one connection: a ws socket or a standard one. */
interface Socket {
  send(text: string): Promise<void>;
  close(code: number): void;
  destroy(): void;
}

/**
 * One connection, once welcomed. Each envelope it receives after the
 * welcome goes to the handler as one line of text, in order; `ended`
 * resolves with why it ended, once.
 */
export class Connection {
  /** Resolves with why the connection ended: a ClosedError or a DisconnectedError. */
  readonly ended: Promise<Error>;
  private handler: ((line: string) => void) | undefined;
  private early: string[] = [];
  private over = false;
  private socket: Socket | undefined;
  private finish!: (why: Error) => void;

  constructor() {
    this.ended = new Promise((resolve) => {
      this.finish = (why) => {
        if (this.over) return;
        this.over = true;
        resolve(why);
      };
    });
  }

  /** Hands every line received from now on (and those received before) to handler. */
  onLine(handler: (line: string) => void): void {
    this.handler = handler;
    const early = this.early;
    this.early = [];
    for (const line of early) handler(line);
  }

  /** Writes one message; it rejects with a DisconnectedError when the connection is over. */
  write(text: string): Promise<void> {
    if (this.over || this.socket === undefined) return Promise.reject(new DisconnectedError("the connection was lost"));
    return this.socket.send(text);
  }

  /** Closes the connection politely (1000), or drops it with destroy. */
  close(): void {
    this.socket?.close(1000);
  }

  /** Drops the connection without a closing handshake. */
  destroy(): void {
    this.socket?.destroy();
  }

  /** @internal */
  attach(socket: Socket): void {
    this.socket = socket;
  }

  /** @internal: a WebSocket message arrived. */
  received(text: string): void {
    for (const line of lines(text)) {
      if (this.handler) this.handler(line);
      else this.early.push(line);
    }
  }

  /** @internal */
  end(why: Error): void {
    this.finish(why);
  }
}

/** The envelopes of one WebSocket message: one, or several one per line (batch=1). */
function lines(text: string): string[] {
  if (!text.includes("\n")) return text.trim() === "" ? [] : [text];
  return text.split("\n").filter((l) => l.trim() !== "");
}

/** Why a connection that closed with code ended. */
function closeReason(code: number, reason: string, what: string): Error {
  if (NO_CLOSE_FRAME.has(code)) return new DisconnectedError(`the connection was lost (${what})`);
  return closedError(code, reason);
}

/** A connection dialed and welcomed. */
export interface Dialed {
  conn: Connection;
  welcome: Envelope;
}

/**
 * Dials url and waits for the welcome. It rejects with a RefusedError for
 * an HTTP refusal, a ClosedError for a close code before the welcome, a
 * DisconnectedError otherwise, or the signal's reason.
 */
export async function dial(url: string, opts: DialOptions): Promise<Dialed> {
  const WS = opts.WebSocket ?? (onNode() ? undefined : platformWebSocket());
  if (WS === undefined && !onNode()) {
    throw new TypeError("this platform has no WebSocket: pass one as ConnectOptions.WebSocket");
  }
  const node = WS === undefined ? await import("ws") : undefined;
  opts.signal?.throwIfAborted();
  const conn = new Connection();
  return new Promise<Dialed>((resolve, reject) => {
    let settled = false;
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
      conn.destroy();
      reject(err);
    };
    const timer = setTimeout(
      () => fail(new DisconnectedError(`no welcome from the gateway within ${opts.timeoutMs} ms`)),
      opts.timeoutMs,
    );
    const onAbort = () => fail(opts.signal?.reason);
    opts.signal?.addEventListener("abort", onAbort, { once: true });

    // The first message is the welcome; with batch=1, the lines after it
    // in the same message are envelopes, kept for the handler.
    const first = (text: string): void => {
      if (settled) return;
      const all = lines(text);
      let welcome: Envelope | undefined;
      try {
        welcome = JSON.parse(all[0] ?? "") as Envelope;
      } catch {
        welcome = undefined;
      }
      if (welcome === undefined || welcome === null || welcome.kind !== Kinds.welcome || typeof welcome.payload !== "object" || welcome.payload === null) {
        fail(new DisconnectedError(`the first message is not a system/welcome: ${text.slice(0, 200)}`));
        return;
      }
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
      conn.received(all.slice(1).join("\n"));
      resolve({ conn, welcome });
    };
    const closedEarly = (why: Error) => {
      conn.end(why);
      fail(why);
    };

    try {
      if (node !== undefined) openNode(node.WebSocket, url, opts.headers, opts.ca, conn, first, closedEarly);
      else if (WS !== undefined) openStandard(WS, url, conn, first, closedEarly);
    } catch (err) {
      fail(err);
    }
  });
}

/**
 * Opens url with the ws package: first(text) gets the first message,
 * conn the others; a refused upgrade fails with its status and body.
 */
function openNode(
  WebSocket: typeof import("ws").WebSocket,
  url: string,
  headers: Record<string, string>,
  ca: Array<string | Buffer> | undefined,
  conn: Connection,
  first: (text: string) => void,
  failed: (why: Error) => void,
): void {
  const ws = new WebSocket(url, { headers, maxPayload: READ_LIMIT, perMessageDeflate: false, ...(ca !== undefined ? { ca } : {}) });
  let welcomed = false;
  let cause: Error | undefined;
  conn.attach({
    send: (text) =>
      new Promise((resolve, reject) => {
        if (ws.readyState !== WebSocket.OPEN) {
          reject(new DisconnectedError("the connection was lost"));
          return;
        }
        ws.send(text, (err) => (err ? reject(new DisconnectedError("the connection was lost", { cause: err })) : resolve()));
      }),
    close: (code) => ws.close(code),
    destroy: () => ws.terminate(),
  });
  ws.on("unexpected-response", (req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on("data", (b: Buffer) => {
      if (size < REFUSAL_BODY_LIMIT) chunks.push(b);
      size += b.length;
    });
    const done = () => {
      failed(refusal(res.statusCode ?? 0, Buffer.concat(chunks).subarray(0, REFUSAL_BODY_LIMIT).toString("utf8")));
      req.destroy();
    };
    res.on("end", done);
    res.on("error", done);
  });
  ws.on("message", (data, isBinary) => {
    if (isBinary) return; // the gateway sends none
    const text = Buffer.isBuffer(data) ? data.toString("utf8") : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]).toString("utf8");
    if (welcomed) conn.received(text);
    else {
      welcomed = true;
      first(text);
    }
  });
  ws.on("error", (err) => {
    cause = err;
  });
  ws.on("close", (code, reason) => {
    const why = closeReason(code, reason.toString("utf8"), cause ? cause.message : `close ${code}`);
    if (cause && why instanceof DisconnectedError) (why as { cause?: unknown }).cause = cause;
    if (welcomed) conn.end(why);
    else failed(why);
  });
}

/**
 * Opens url with a standard WebSocket. A browser shows neither the
 * status nor the body of a refused upgrade: when the connection fails
 * before it opens, the same URL is asked again with a plain GET (which
 * the gateway answers with its refusal, or 426 when it would have taken
 * the upgrade); when that cannot be read either (another origin), the
 * failure is a DisconnectedError that says so.
 */
function openStandard(
  WS: StandardWebSocketConstructor,
  url: string,
  conn: Connection,
  first: (text: string) => void,
  failed: (why: Error) => void,
): void {
  const ws = new WS(url);
  let opened = false;
  let welcomed = false;
  conn.attach({
    send: (text) => {
      if (ws.readyState !== 1) return Promise.reject(new DisconnectedError("the connection was lost"));
      ws.send(text);
      return Promise.resolve();
    },
    close: (code) => ws.close(code),
    // A standard WebSocket cannot be dropped without a closing handshake;
    // closing it is the nearest.
    destroy: () => ws.close(1000),
  });
  ws.addEventListener("open", () => {
    opened = true;
  });
  // A failed upgrade fires error, then close; some implementations fire
  // error alone (Node 20's), so either starts the probe, once.
  let probing = false;
  const notOpened = () => {
    if (probing) return;
    probing = true;
    probe(url).then(failed, failed);
  };
  ws.addEventListener("error", () => {
    if (!opened) notOpened();
  });
  ws.addEventListener("message", (ev: { data: unknown }) => {
    if (typeof ev.data !== "string") return; // the gateway sends no binary message
    if (welcomed) conn.received(ev.data);
    else {
      welcomed = true;
      first(ev.data);
    }
  });
  ws.addEventListener("close", (ev: { code: number; reason: string }) => {
    if (welcomed) {
      conn.end(closeReason(ev.code, ev.reason, `close ${ev.code}`));
      return;
    }
    if (opened) {
      failed(closeReason(ev.code, ev.reason, `close ${ev.code} before the welcome`));
      return;
    }
    notOpened();
  });
}

/**
 * Asks url with a plain GET, to learn why its upgrade failed: the
 * gateway runs the upgrade's checks and answers a refusal with its JSON
 * body, or 426 when it would have taken the upgrade.
 */
async function probe(url: string): Promise<Error> {
  const unknown = "the WebSocket could not be opened, and this platform does not show the gateway's answer to the upgrade";
  const doFetch = (globalThis as { fetch?: typeof fetch }).fetch;
  if (doFetch === undefined) return new DisconnectedError(unknown);
  try {
    const res = await doFetch(gatewayURL(url, "http").toString(), { method: "GET" });
    const body = (await res.text()).slice(0, REFUSAL_BODY_LIMIT);
    if (res.status >= 400 && res.status !== 426) return refusal(res.status, body);
    return new DisconnectedError(`the WebSocket could not be opened (the gateway answers the same URL with HTTP ${res.status})`);
  } catch (err) {
    return new DisconnectedError(`${unknown} (asking again over HTTP failed too: ${String(err)})`, { cause: err });
  }
}

/** A refusal from its status and body (docs/protocol.md section 1). */
export function refusal(status: number, body: string): RefusedError {
  try {
    const r = JSON.parse(body) as { error?: unknown; message?: unknown };
    if (r !== null && typeof r.error === "string" && r.error !== "") {
      return new RefusedError(status, r.error, typeof r.message === "string" ? r.message : "");
    }
  } catch {
    // not the gateway's JSON: the body itself says what happened
  }
  return new RefusedError(status, "", body.trim());
}
