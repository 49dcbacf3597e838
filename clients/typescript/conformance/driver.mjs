// The conformance driver: clients/conformance_test.go drives it with the
// same scenarios as the Python client's driver, and its header comment is
// the protocol both speak. One JSON request per line on stdin, exactly
// one JSON answer per line on stdout for each, in order; it holds at most
// one client at a time. Anything on stderr is for humans. Uses the built
// package (dist/): run `npm run build` first.
//
//   node clients/typescript/conformance/driver.mjs

import { createInterface } from "node:readline";

import {
  ClientClosedError,
  ClosedError,
  connect,
  DisconnectedError,
  GatewayError,
  MCPPError,
  publish,
  Reconnected,
  RefusedError,
} from "../dist/index.js";

/** A bad request to the driver itself. */
class UsageError extends Error {}

/** @type {import("../dist/index.js").Client | undefined} */
let client;
/** @type {AsyncIterator<import("../dist/index.js").StreamItem> | undefined} */
let stream;
/**
 * The read of the stream a timed-out next left waiting: the next next
 * takes its result, so that nothing is lost.
 * @type {Promise<IteratorResult<import("../dist/index.js").StreamItem>> | undefined}
 */
let pending;

/** The options connect takes from a request: those present, as given. */
const CONNECT_OPTIONS = ["pod", "participant", "token", "filter", "history", "fold", "resume"];

/**
 * @param {Record<string, any>} req
 * @returns {Promise<Record<string, unknown>>}
 */
async function handle(req) {
  switch (req.op) {
    case "connect": {
      if (typeof req.url !== "string") throw new UsageError("connect needs a url");
      const given = req.options ?? {};
      /** @type {Record<string, unknown>} */
      const options = {};
      for (const name of CONNECT_OPTIONS) if (given[name] !== undefined) options[name] = given[name];
      await drop();
      client = await connect(req.url, /** @type {import("../dist/index.js").ConnectOptions} */ (/** @type {unknown} */ (options)));
      stream = client[Symbol.asyncIterator]();
      return { ok: true, welcome: client.welcome };
    }
    case "send": {
      // "confirm" is passed only when given, so that the default
      // (confirmed: a refusal is the answer's error) is what runs.
      if (req.confirm === undefined) return { ok: true, id: await current().send(req.envelope) };
      if (typeof req.confirm !== "boolean") throw new UsageError("confirm is true or false");
      return { ok: true, id: await current().send(req.envelope, { confirm: req.confirm }) };
    }
    case "request":
      return { ok: true, answer: await current().request(req.kind, req.payload ?? {}) };
    case "next":
      return next(typeof req.timeout_ms === "number" ? req.timeout_ms : 5000);
    case "branch": {
      /** @type {{parent?: string, payload?: unknown}} */
      const options = {};
      if (req.parent !== undefined) options.parent = req.parent;
      if (req.payload !== undefined) options.payload = req.payload;
      return { ok: true, context: await current().branch(req.type ?? "reasoning", options) };
    }
    case "conclude":
      if (typeof req.context !== "string") throw new UsageError("conclude needs a context id");
      return { ok: true, id: await current().conclude(req.context, req.payload ?? {}) };
    case "publish": {
      /** @type {{pod: string, participant?: string, token?: string}} */
      const options = { pod: req.pod };
      if (req.participant !== undefined) options.participant = req.participant;
      if (req.token !== undefined) options.token = req.token;
      return { ok: true, results: await publish(req.url, options, req.envelopes ?? []) };
    }
    case "close":
      await drop();
      return { ok: true };
  }
  throw new UsageError(`unknown op ${JSON.stringify(req.op)}`);
}

function current() {
  if (client === undefined) throw new UsageError("no client: connect first");
  return client;
}

/** Closes the current client, if any. */
async function drop() {
  const c = client;
  client = undefined;
  stream = undefined;
  pending = undefined;
  if (c !== undefined) await c.close();
}

/**
 * The next item of the stream, or a timeout after ms.
 * @param {number} ms
 */
async function next(ms) {
  current();
  if (stream === undefined) throw new UsageError("no client: connect first");
  pending ??= stream.next();
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;
  const timeout = new Promise((resolve) => (timer = setTimeout(() => resolve("timeout"), ms)));
  let r;
  try {
    r = await Promise.race([pending, timeout]);
  } catch (err) {
    pending = undefined;
    throw err;
  } finally {
    clearTimeout(timer);
  }
  if (r === "timeout") return { ok: false, error: { type: "timeout", message: `nothing in the stream within ${ms} ms` } };
  pending = undefined;
  const result = /** @type {IteratorResult<import("../dist/index.js").StreamItem>} */ (r);
  if (result.done) return { ok: false, error: { type: "closed", message: "the client is closed" } };
  const item = result.value;
  if (item instanceof Reconnected) return { ok: true, event: { type: "reconnected", resumed: item.resumed } };
  return { ok: true, envelope: item };
}

/**
 * A failure as the conformance protocol writes it.
 * @param {unknown} err
 */
function failure(err) {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof RefusedError) {
    /** @type {Record<string, unknown>} */
    const e = { type: "refused", status: err.status, message };
    if (err.code !== "") e.code = err.code;
    return { ok: false, error: e };
  }
  if (err instanceof GatewayError) return { ok: false, error: { type: "gateway", code: err.code, message } };
  if (err instanceof ClosedError) return { ok: false, error: { type: "closed", close_code: err.closeCode, message } };
  if (err instanceof DisconnectedError || err instanceof ClientClosedError || err instanceof MCPPError) {
    return { ok: false, error: { type: "closed", message } };
  }
  return { ok: false, error: { type: "usage", message } };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.trim() === "") continue;
  let answer;
  try {
    let req;
    try {
      req = JSON.parse(line);
    } catch {
      throw new UsageError(`not JSON: ${line.slice(0, 200)}`);
    }
    if (req === null || typeof req !== "object" || Array.isArray(req)) throw new UsageError("a request is a JSON object");
    answer = await handle(req);
  } catch (err) {
    answer = failure(err);
    // What the protocol has a type for is the answer; anything else is
    // shown whole, for whoever reads the driver's stderr.
    if (answer.error.type === "usage" && !(err instanceof UsageError) && !(err instanceof TypeError)) console.error(err);
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
await drop();
