// Publishing without joining: POST /pods/NAME/envelopes
// (docs/protocol.md section 6), for a tool, a webhook or a script that
// has something to say in a pod and no reason to be seen joining it.

import { gatewayURL, refusal } from "./connection.js";
import { DisconnectedError, GatewayError, MCPPError } from "./errors.js";
import { newId } from "./id.js";
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
  let res: Response;
  let body: string;
  try {
    res = await fetch(u, init);
    body = await res.text();
  } catch (err) {
    if (options.signal?.aborted) throw options.signal.reason;
    throw new DisconnectedError(`the gateway could not be reached at ${u.origin}: ${String((err as Error)?.message ?? err)}`, { cause: err });
  }
  if (res.status !== 200) throw refusal(res.status, body.slice(0, 4096));
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
