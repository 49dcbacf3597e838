// Publishing without joining: POST /pods/NAME/envelopes
// (docs/protocol.md section 6), for a tool, a webhook or a script that
// has something to say in a pod and no reason to be seen joining it.

import { gatewayURL, refusal } from "./connection.js";
import { DisconnectedError, GatewayError, MCPPError } from "./errors.js";
import { newId } from "./id.js";
import { trustedCAs, type CACertificate } from "./tls.js";
import type { Envelope, ErrorPayload, PublishResult } from "./types.js";

/** Which pod publish writes to, and as whom. */
export interface PublishOptions {
  /** The pod (required). */
  pod: string;
  /** The sender's id in open mode, where it is required; a token names the sender otherwise. */
  participant?: string;
  /** Sent as `Authorization: Bearer TOKEN`. */
  token?: string;
  /** Extra headers of the request. */
  headers?: Record<string, string>;
  /**
   * A CA certificate (PEM, a string or a Buffer) to trust for an https://
   * gateway besides Node's default roots (Node only; the request is then
   * made with node:https, as fetch takes no CA).
   */
  ca?: CACertificate;
  signal?: AbortSignal;
}

/**
 * Sends envelopes to a pod without joining it, in one HTTP request, and
 * resolves with one result per envelope, in order: `{id}` when relayed,
 * `{id, answer}` for a gateway/contexts or gateway/history request, or the
 * refusal (`error`, `message`, …; resultError makes it a GatewayError).
 * Each is checked and relayed exactly as if the participant had sent it
 * over WebSocket. An envelope without `id` gets a new UUIDv4. `url` is the
 * gateway's (`http://HOST:PORT`, or its `ws://` URL, with or without
 * `/ws`). A request refused as a whole rejects with a RefusedError (HTTP
 * status and code); a gateway that cannot be reached, with a
 * DisconnectedError.
 */
export async function publish(url: string, options: PublishOptions, envelopes: Envelope | Envelope[]): Promise<PublishResult[]> {
  if (options === null || typeof options !== "object") throw new TypeError("publish: options are required ({pod: …})");
  if (typeof options.pod !== "string" || options.pod === "") throw new TypeError("publish: options.pod is required");
  const list = Array.isArray(envelopes) ? envelopes : [envelopes];
  if (list.length === 0) throw new TypeError("publish: no envelope to publish");
  const lines = list.map((env, i) => {
    if (env === null || typeof env !== "object" || Array.isArray(env)) {
      throw new TypeError(`publish: envelope ${i} is not an object`);
    }
    return JSON.stringify(env.id === undefined ? { ...env, id: newId() } : env);
  });

  const u = gatewayURL(url, "http");
  const prefix = u.pathname.replace(/\/+$/, "").replace(/\/ws$/, "");
  u.pathname = `${prefix}/pods/${encodeURIComponent(options.pod)}/envelopes`;
  if (options.participant !== undefined) u.searchParams.set("participant", options.participant);

  const headers: Record<string, string> = {
    ...(options.headers ?? {}),
    "Content-Type": lines.length === 1 ? "application/json" : "application/x-ndjson",
    Accept: "application/json",
  };
  if (options.token !== undefined) headers["Authorization"] = `Bearer ${options.token}`;
  const init: RequestInit = { method: "POST", headers, body: lines.length === 1 ? lines[0] : lines.join("\n") + "\n" };
  if (options.signal !== undefined) init.signal = options.signal;
  const ca = u.protocol === "https:" ? await trustedCAs(options.ca) : undefined;
  let status: number;
  let body: string;
  try {
    if (ca !== undefined) ({ status, body } = await postTrusting(u, init, ca, options.signal));
    else {
      const res = await fetch(u, init);
      status = res.status;
      body = await res.text();
    }
  } catch (err) {
    if (options.signal?.aborted) throw options.signal.reason;
    throw new DisconnectedError(`the gateway could not be reached at ${u.origin}: ${reason(err)}`, { cause: err });
  }
  if (status !== 200) throw refusal(status, body.slice(0, 4096));
  let answer: { results?: unknown };
  try {
    answer = JSON.parse(body) as { results?: unknown };
  } catch {
    throw new MCPPError(`the gateway's answer does not parse: ${body.slice(0, 200)}`);
  }
  if (!Array.isArray(answer?.results) || answer.results.length !== lines.length) {
    throw new MCPPError(`the gateway answered ${Array.isArray(answer?.results) ? answer.results.length : "no"} results for ${lines.length} envelopes`);
  }
  return answer.results as PublishResult[];
}

/** What a failed request says, with its cause (fetch says "fetch failed", its cause why: a certificate refused). */
function reason(err: unknown): string {
  const e = err as { message?: unknown; cause?: { message?: unknown } } | undefined;
  const msg = String(e?.message ?? err);
  return typeof e?.cause?.message === "string" ? `${msg}: ${e.cause.message}` : msg;
}

/** POSTs init's body to u with node:https, trusting ca, and reads the answer whole. */
async function postTrusting(u: URL, init: RequestInit, ca: Array<string | Buffer>, signal: AbortSignal | undefined): Promise<{ status: number; body: string }> {
  const https = await import("node:https");
  return new Promise((resolve, reject) => {
    const req = https.request(u, { method: "POST", headers: init.headers as Record<string, string>, ca, ...(signal !== undefined ? { signal } : {}) }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (b: Buffer) => chunks.push(b));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(init.body as string);
  });
}

/**
 * The refusal of one result of publish as a GatewayError, as a
 * participant connected over WebSocket would have received it, or
 * undefined when the envelope was relayed or answered.
 */
export function resultError(result: PublishResult): GatewayError | undefined {
  if (typeof result.error !== "string") return undefined;
  const { id, ...payload } = result;
  const envelope: Envelope = { kind: "system/error", payload };
  if (id !== undefined) envelope.correlation_id = id;
  return new GatewayError(payload as ErrorPayload, envelope);
}
