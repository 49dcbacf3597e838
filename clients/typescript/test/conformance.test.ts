// The conformance driver (conformance/driver.mjs) speaks its protocol:
// one answer per request, in order, with the shapes of
// the conformance scenarios' answers and errors.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { join } from "node:path";
import { test, type TestContext } from "node:test";

import { packageDir, podName, Proxy, startGateway, tokenFile } from "./gateway.js";

type Answer = { ok: boolean; error?: Record<string, unknown>; [k: string]: unknown };

/** Starts the driver and returns a function that sends one request and reads its answer. */
function driver(t: TestContext): (req: unknown) => Promise<Answer> {
  const child = spawn(process.execPath, [join(packageDir, "conformance", "driver.mjs")], { stdio: ["pipe", "pipe", "inherit"] });
  t.after(() => {
    child.stdin.end();
    return new Promise((r) => {
      if (child.exitCode !== null) r(undefined);
      else child.once("exit", r);
    });
  });
  const answers = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  return async (req) => {
    child.stdin.write(JSON.stringify(req) + "\n");
    const line = await answers.next();
    assert.equal(line.done, false, "the driver answered");
    return JSON.parse(line.value as string) as Answer;
  };
}

test("the driver connects, sends, requests, reads, branches, concludes, publishes and closes", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const ask = driver(t);
  const other = driver(t);

  const c = await ask({ op: "connect", url: gw.ws, options: { pod, participant: "alice", filter: { echo: true } } });
  assert.equal(c.ok, true);
  assert.equal((c["welcome"] as { you: { id: string } }).you.id, "alice");
  assert.equal((await other({ op: "connect", url: gw.ws, options: { pod, participant: "bob", history: "all" } })).ok, true);

  const w = await ask({ op: "next", timeout_ms: 5000 });
  assert.equal((w["envelope"] as { kind: string }).kind, "system/welcome");
  const sent = await ask({ op: "send", envelope: { id: "c-1", kind: "chat", payload: { text: "hi" } } });
  assert.deepEqual(sent, { ok: true, id: "c-1" });
  let env = await ask({ op: "next", timeout_ms: 5000 });
  if ((env["envelope"] as { kind: string }).kind === "system/presence") env = await ask({ op: "next", timeout_ms: 5000 });
  assert.deepEqual((env["envelope"] as { id: string }).id, "c-1");

  const ans = await ask({ op: "request", kind: "gateway/contexts", payload: { state: "all" } });
  assert.equal((ans["answer"] as { kind: string }).kind, "system/contexts");

  const br = await ask({ op: "branch", type: "reasoning", payload: { description: "d" } });
  const ctx = br["context"] as { id: string; type: string };
  assert.equal(ctx.type, "reasoning");
  const nested = await ask({ op: "branch", type: "plan", parent: ctx.id });
  assert.equal((nested["context"] as { parent: string }).parent, ctx.id);
  const cc = await ask({ op: "conclude", context: ctx.id, payload: { summary: "s" } });
  assert.equal(typeof cc["id"], "string");

  const pub = await ask({ op: "publish", url: gw.http, pod, participant: "ci", envelopes: [{ kind: "chat" }, { kind: "system/x" }] });
  const results = pub["results"] as { id?: string; error?: string }[];
  assert.equal(results.length, 2);
  assert.equal(results[1]?.error, "reserved_kind");

  assert.deepEqual(await ask({ op: "close" }), { ok: true });
  assert.equal((await ask({ op: "next", timeout_ms: 100 })).error?.["type"], "usage");
});

test("the driver's failures: refused, gateway, closed, timeout, usage, and a reconnection as an event", async (t) => {
  const tokens = tokenFile([{ token: "s3cr3t", participant: "alice", capabilities: ["chat"], pods: ["*"] }]);
  const gw = await startGateway(t, ["--tokens", tokens]);
  const proxy = await Proxy.start(t, gw.port);
  const ask = driver(t);

  assert.deepEqual((await ask({ op: "connect", url: gw.ws, options: { pod: podName(), token: "wrong" } })).error, {
    type: "refused", status: 401, code: "unauthorized", message: "the gateway refused: HTTP 401 unauthorized: unknown token",
  });
  assert.equal((await ask({ op: "connect", url: proxy.ws, options: { pod: podName(), token: "s3cr3t" } })).ok, true);
  const refused = await ask({ op: "send", envelope: { kind: "tool/x" } });
  assert.equal(refused.error?.["type"], "gateway");
  assert.equal(refused.error?.["code"], "capability_violation");
  // Not confirmed, the refusal comes in the stream instead.
  assert.deepEqual(await ask({ op: "send", envelope: { id: "x-2", kind: "tool/x" }, confirm: false }), { ok: true, id: "x-2" });
  assert.equal((await ask({ op: "send", envelope: { kind: "chat" }, confirm: "yes" })).error?.["type"], "usage");
  assert.equal((await ask({ op: "request", kind: "gateway/nope", payload: {} })).error?.["code"], "unknown_request");
  assert.equal((await ask({ op: "request", kind: "chat", payload: {} })).error?.["type"], "usage");
  assert.equal((await ask({ op: "bogus" })).error?.["type"], "usage");

  assert.equal(((await ask({ op: "next", timeout_ms: 2000 }))["envelope"] as { kind: string }).kind, "system/welcome");
  const inStream = (await ask({ op: "next", timeout_ms: 2000 }))["envelope"] as { kind: string; correlation_id: string; payload: { error: string } };
  assert.deepEqual([inStream.kind, inStream.correlation_id, inStream.payload.error], ["system/error", "x-2", "capability_violation"]);
  assert.equal((await ask({ op: "next", timeout_ms: 100 })).error?.["type"], "timeout");
  proxy.cut();
  assert.deepEqual(await ask({ op: "next", timeout_ms: 5000 }), { ok: true, event: { type: "reconnected", resumed: false } });

  // Replaced by another connection of alice: the client ends with 4000.
  const other = driver(t);
  assert.equal((await other({ op: "connect", url: gw.ws, options: { pod: "p", token: "s3cr3t" } })).ok, true);
  assert.equal((await ask({ op: "connect", url: gw.ws, options: { pod: "p", token: "s3cr3t" } })).ok, true);
  const ended = await other({ op: "next", timeout_ms: 5000 });
  const closed = ended.error?.["type"] === undefined ? await other({ op: "next", timeout_ms: 5000 }) : ended;
  assert.equal(closed.error?.["type"], "closed");
  assert.equal(closed.error?.["close_code"], 4000);
});
