// Joining a pod: the welcome, the URL forms, the filter, and refused
// upgrades as typed errors, on Node's ws and on a standard WebSocket.

import assert from "node:assert/strict";
import { test } from "node:test";

import { WebSocket as WS } from "ws";

import { connect, DisconnectedError, publish, Reconnected, RefusedError, type StandardWebSocketConstructor } from "@mcpp/client";

import { podName, Proxy, Reader, startGateway, tokenFile } from "./gateway.js";

test("the welcome is client.welcome and the first envelope of the stream", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());

  assert.equal(alice.welcome.you.id, "alice");
  assert.equal(alice.welcome.pod, pod);
  assert.deepEqual(alice.welcome.participants.map((p) => p.id), ["bob"]);
  assert.equal(alice.welcome.limits.max_message_bytes, 1048576);
  assert.equal(alice.state, "open");

  const first = await new Reader(alice).envelope();
  assert.equal(first.kind, "system/welcome");
  assert.equal(first.from, "system:gateway");
  assert.deepEqual(first.payload, alice.welcome);
});

test("the gateway's URL may be ws:// with or without /ws, or http://", async (t) => {
  const gw = await startGateway(t);
  for (const url of [gw.ws, `${gw.ws}/`, `${gw.ws}/ws`, gw.http]) {
    const c = await connect(url, { pod: podName(), participant: "alice" });
    assert.equal(c.welcome.you.id, "alice", url);
    await c.close();
  }
});

test("the filter takes the query's names, lists as arrays or comma-separated", async (t) => {
  const gw = await startGateway(t);
  const a = await connect(gw.ws, { pod: podName(), filter: { contexts: "none", types: ["reasoning", "plan"], subtree: true } });
  t.after(() => a.close());
  assert.equal(a.welcome.filter.contexts, "none");
  assert.deepEqual(a.welcome.filter.types, ["reasoning", "plan"]);
  assert.equal(a.welcome.filter.subtree, true);

  const b = await connect(gw.ws, { pod: podName(), filter: { main: false, ids: "r1,r2", echo: true } });
  t.after(() => b.close());
  assert.equal(b.welcome.filter.main, false);
  assert.deepEqual(b.welcome.filter.ids, ["r1", "r2"]);
  assert.equal(b.welcome.filter.echo, true);
});

test("a refused upgrade is a RefusedError with the HTTP status and the gateway's code", async (t) => {
  const gw = await startGateway(t);
  await assert.rejects(connect(gw.ws, { pod: "no spaces" }), (err: unknown) => {
    assert.ok(err instanceof RefusedError);
    assert.equal(err.status, 400);
    assert.equal(err.code, "invalid_pod");
    assert.equal(err.temporary, false);
    return true;
  });
  await assert.rejects(connect(gw.ws, { pod: podName(), filter: { routing: "sideways" as "all" } }), {
    name: "RefusedError", status: 400, code: "invalid_filter",
  });
  await assert.rejects(connect(gw.ws, { pod: podName(), participant: "bad id!" }), {
    name: "RefusedError", status: 400, code: "invalid_participant",
  });
});

test("with a token file: the token names the participant, a bad one is 401 unauthorized, another pod 403", async (t) => {
  const tokens = tokenFile([{ token: "s3cr3t", participant: "alice", capabilities: ["*"], pods: ["lab-*"] }]);
  const gw = await startGateway(t, ["--tokens", tokens]);
  const c = await connect(gw.ws, { pod: "lab-1", token: "s3cr3t" });
  t.after(() => c.close());
  assert.equal(c.welcome.you.id, "alice");

  await assert.rejects(connect(gw.ws, { pod: "lab-1", token: "wrong" }), { name: "RefusedError", status: 401, code: "unauthorized" });
  await assert.rejects(connect(gw.ws, { pod: "lab-1" }), { name: "RefusedError", status: 401, code: "unauthorized" });
  await assert.rejects(connect(gw.ws, { pod: "other", token: "s3cr3t" }), { name: "RefusedError", status: 403, code: "forbidden" });
});

test("a standard WebSocket, as in a browser: the token travels in the query, and a refusal is still told", async (t) => {
  const tokens = tokenFile([{ token: "s3cr3t", participant: "alice", capabilities: ["*"], pods: ["*"] }]);
  const gw = await startGateway(t, ["--tokens", tokens]);
  // ws's WebSocket has the standard interface (addEventListener, send,
  // close), which is all the client uses of one it is given.
  const c = await connect(gw.ws, { pod: podName(), token: "s3cr3t", WebSocket: WS });
  t.after(() => c.close());
  assert.equal(c.welcome.you.id, "alice");
  assert.ok((await c.send({ kind: "chat", payload: {} })).length > 0);

  await assert.rejects(connect(gw.ws, { pod: podName(), token: "wrong", WebSocket: WS }), {
    name: "RefusedError", status: 401, code: "unauthorized",
  });
});

test("the platform's own WebSocket (Node's standard one, as a browser's): join, refusal, cut and resume", async (t) => {
  const Std = (globalThis as { WebSocket?: StandardWebSocketConstructor }).WebSocket;
  assert.ok(Std, "Node's standard WebSocket: Node 22, or Node 20 with --experimental-websocket (test/run.mjs passes it)");
  const tokens = tokenFile([
    { token: "s3cr3t", participant: "alice", capabilities: ["*"], pods: ["*"] },
    { token: "ci-token", participant: "ci", capabilities: ["*"], pods: ["*"] },
  ]);
  const gw = await startGateway(t, ["--tokens", tokens]);
  await assert.rejects(connect(gw.ws, { pod: podName(), token: "wrong", WebSocket: Std }), {
    name: "RefusedError", status: 401, code: "unauthorized",
  });

  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const c = await connect(proxy.ws, { pod, token: "s3cr3t", WebSocket: Std, reconnect: { minDelayMs: 20 } });
  t.after(() => c.close());
  const r = new Reader(c);
  await r.kind("system/welcome");
  await publish(gw.http, { pod, token: "ci-token" }, { id: "one", kind: "chat" });
  assert.equal((await r.kind("chat")).id, "one");
  proxy.cut();
  await publish(gw.http, { pod, token: "ci-token" }, { id: "two", kind: "chat" });
  const item = await r.next();
  assert.ok(item instanceof Reconnected);
  assert.equal(item.resumed, true);
  assert.equal((await r.kind("chat")).id, "two");
});

test("a gateway that is not there is a DisconnectedError", async (t) => {
  const gw = await startGateway(t);
  const port = gw.port;
  // A port that was just free: the gateway listens on another.
  const net = await import("node:net");
  const free = await new Promise<number>((r) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => r(p));
    });
  });
  assert.notEqual(free, port);
  await assert.rejects(connect(`ws://127.0.0.1:${free}`, { pod: podName() }), (err: unknown) => err instanceof DisconnectedError);
});

test("bad options are TypeErrors", async () => {
  await assert.rejects(connect("ws://127.0.0.1:1", {} as { pod: string }), TypeError);
  await assert.rejects(connect("ftp://127.0.0.1:1", { pod: "lab" }), TypeError);
  await assert.rejects(connect("not a url", { pod: "lab" }), TypeError);
  await assert.rejects(connect("ws://127.0.0.1:1", { pod: "lab", history: -1 }), TypeError);
  await assert.rejects(connect("ws://127.0.0.1:1", { pod: "lab", filter: { types: [1] as unknown as string[] } }), TypeError);
});
