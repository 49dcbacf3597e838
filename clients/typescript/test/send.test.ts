// Sending: ids filled or kept, what the other participant receives, and
// the gateway's refusals as GatewayErrors with their code.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, GatewayError } from "@mcpp/client";

import { podName, Reader, startGateway } from "./gateway.js";

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

test("send fills the id when absent and keeps the one given; the other participant receives both", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const r = new Reader(bob);
  assert.equal((await r.envelope()).kind, "system/welcome");

  const envelope = { kind: "chat", payload: { text: "hello" }, to: ["bob"], context: { id: "c1", type: "talk" } };
  const id = await alice.send(envelope);
  assert.match(id, uuid);
  assert.equal("id" in envelope, false, "send does not change the caller's object");
  const got = await r.envelope();
  assert.equal(got.id, id);
  assert.equal(got.from, "alice");
  assert.equal(got.kind, "chat");
  assert.equal(got.protocol, "mcpp/v0.1");
  assert.deepEqual(got.payload, { text: "hello" });
  assert.deepEqual(got.to, ["bob"]);
  assert.deepEqual(got.context, { id: "c1", type: "talk" });

  assert.equal(await alice.send({ id: "mine-1", kind: "chat", payload: 2, extra: { kept: true } }), "mine-1");
  const second = await r.envelope();
  assert.equal(second.id, "mine-1");
  assert.deepEqual(second["extra"], { kept: true }, "unknown fields travel as they are");
});

test("sends made together are all confirmed and arrive in order, also to a participant that takes batches", async (t) => {
  const gw = await startGateway(t, ["--rate", "10000", "--burst", "10000"]);
  const pod = podName();
  // batch=1: several envelopes per WebSocket message, one per line.
  const bob = await connect(gw.ws, { pod, participant: "bob", filter: { batch: true } });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const ids = await Promise.all(Array.from({ length: 500 }, (_, n) => alice.send({ kind: "count", payload: { n } })));
  assert.equal(new Set(ids).size, 500);
  const r = new Reader(bob);
  await r.kind("system/welcome");
  for (let n = 0; n < 500; n++) {
    const env = await r.envelope();
    assert.deepEqual([env.id, env.payload], [ids[n], { n }]);
  }
});

test("a system/* kind is refused by the gateway: a GatewayError with code reserved_kind", async (t) => {
  const gw = await startGateway(t);
  const alice = await connect(gw.ws, { pod: podName(), participant: "alice" });
  t.after(() => alice.close());
  await assert.rejects(alice.send({ id: "x1", kind: "system/x", payload: {} }), (err: unknown) => {
    assert.ok(err instanceof GatewayError);
    assert.equal(err.code, "reserved_kind");
    assert.equal(err.retryable, false);
    assert.equal(err.envelope?.kind, "system/error");
    assert.equal(err.envelope?.correlation_id, "x1");
    return true;
  });
  // The connection stays open, and the refusal is not in the stream.
  assert.match(await alice.send({ kind: "chat" }), uuid);
  const r = new Reader(alice);
  assert.equal((await r.envelope()).kind, "system/welcome");
  assert.equal(await r.quiet(200), undefined);
});

test("a kind the participant has no capability for is capability_violation, with its details", async (t) => {
  const gw = await startGateway(t, ["--default-capabilities", "chat"]);
  const alice = await connect(gw.ws, { pod: podName(), participant: "alice" });
  t.after(() => alice.close());
  assert.deepEqual(alice.welcome.you.capabilities, ["chat"]);
  await assert.rejects(alice.send({ kind: "mcp/request:tools/call", payload: {} }), (err: unknown) => {
    assert.ok(err instanceof GatewayError);
    assert.equal(err.code, "capability_violation");
    assert.equal(err.payload["attempted_kind"], "mcp/request:tools/call");
    assert.deepEqual(err.payload["your_capabilities"], ["chat"]);
    return true;
  });
  assert.match(await alice.send({ kind: "chat", payload: {} }), uuid);
});

test("an id the pod's history holds is duplicate_id; other refusals keep their codes", async (t) => {
  const gw = await startGateway(t);
  const alice = await connect(gw.ws, { pod: podName(), participant: "alice" });
  t.after(() => alice.close());
  await alice.send({ id: "once", kind: "chat" });
  await assert.rejects(alice.send({ id: "once", kind: "chat" }), { name: "GatewayError", code: "duplicate_id" });
  await assert.rejects(alice.send({ kind: "chat", from: "mallory" }), { name: "GatewayError", code: "auth_violation" });
  await assert.rejects(alice.send({ kind: "chat", context: { id: "" } }), { name: "GatewayError", code: "invalid_context" });
});

test("an envelope over the gateway's max_message_bytes is refused before it is written, and the connection stays", async (t) => {
  const gw = await startGateway(t, ["--max-message-bytes", "1000"]);
  const alice = await connect(gw.ws, { pod: podName(), participant: "alice" });
  t.after(() => alice.close());
  await assert.rejects(alice.send({ kind: "chat", payload: "x".repeat(5000) }), { name: "GatewayError", code: "message_too_large" });
  assert.equal(alice.state, "open");
  assert.match(await alice.send({ kind: "chat", payload: "small" }), uuid);
});

test("what is not an envelope is a TypeError", async (t) => {
  const gw = await startGateway(t);
  const alice = await connect(gw.ws, { pod: podName() });
  t.after(() => alice.close());
  await assert.rejects(alice.send(null as never), TypeError);
  await assert.rejects(alice.send({ payload: {} } as never), TypeError);
  await assert.rejects(alice.send({ kind: "chat", id: "" }), TypeError);
});

test("confirm: false resolves once written; a refusal then comes in the stream, about that id", async (t) => {
  const gw = await startGateway(t, ["--default-capabilities", "chat"]);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const refused = await alice.send({ kind: "tool/x", payload: {} }, { confirm: false });
  const ok = await alice.send({ kind: "chat", payload: "fine" }, { confirm: false });
  const ra = new Reader(alice);
  await ra.kind("system/welcome");
  const err = await ra.kind("system/error");
  assert.equal(err.correlation_id, refused);
  assert.equal((err.payload as { error: string }).error, "capability_violation");
  const rb = new Reader(bob);
  assert.equal((await rb.kind("chat")).id, ok);
});

test("the fence takes a rate token; a fence the gateway refuses (rate_limited) still confirms the send before it", async (t) => {
  // A burst of 3, refilled at one every 1,000 s.
  const gw = await startGateway(t, ["--rate", "0.001", "--burst", "3"]);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  assert.equal(await alice.send({ id: "a", kind: "chat" }), "a"); // tokens 1 and 2
  assert.equal(await alice.send({ id: "b", kind: "chat" }), "b"); // token 3; its fence is refused
  await assert.rejects(alice.send({ id: "c", kind: "chat" }), (err: unknown) => {
    assert.ok(err instanceof GatewayError);
    assert.equal(err.code, "rate_limited");
    assert.equal(err.envelope?.correlation_id, "c");
    return true;
  });
  const rb = new Reader(bob);
  assert.equal((await rb.kind("chat")).id, "a");
  assert.equal((await rb.kind("chat")).id, "b");
  assert.equal(await rb.quiet(300), undefined);
  const ra = new Reader(alice);
  assert.equal((await ra.envelope()).kind, "system/welcome");
  assert.equal(await ra.quiet(300), undefined, "the refusals went to the sends (the fence's to nobody)");
});

test("conclude takes the context branch resolved with, or its id", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const alice = await connect(gw.ws, { pod, participant: "alice", filter: { echo: true } });
  t.after(() => alice.close());
  const ctx = await alice.branch("reasoning");
  const id = await alice.conclude(ctx, "done");
  const r = new Reader(alice);
  const conclusion = await r.kind("conclusion");
  assert.deepEqual([conclusion.id, conclusion.context, conclusion.payload], [id, { id: ctx.id }, { summary: "done" }]);
  assert.deepEqual((await r.kind("system/context")).context, { id: ctx.id, type: "reasoning" });
  await assert.rejects(alice.conclude({} as never), TypeError);
});
