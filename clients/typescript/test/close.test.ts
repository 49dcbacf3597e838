// Ending: close() leaves the pod; a connection replaced by another of the
// same participant (4000) ends the client for good, without a fight.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ClientClosedError, ClosedError, connect } from "@mcpp/client";

import { podName, Proxy, Reader, sleep, startGateway } from "./gateway.js";

test("a second connection of the same participant replaces the first: close 4000 ends it, and it does not reconnect", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const first = await connect(gw.ws, { pod, participant: "alice", reconnect: { minDelayMs: 10 } });
  t.after(() => first.close());
  const watcher = await connect(gw.ws, { pod, participant: "watcher" });
  t.after(() => watcher.close());
  const r1 = new Reader(first);
  await r1.kind("system/welcome");
  await watcher.send({ kind: "chat", payload: "before" });
  assert.equal((await r1.kind("chat")).payload, "before");

  const second = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => second.close());
  // What first received comes out, then the close that ended it.
  await assert.rejects(r1.next(), (err: unknown) => {
    assert.ok(err instanceof ClosedError);
    assert.equal(err.closeCode, 4000);
    return true;
  });
  assert.equal(first.state, "closed");
  await assert.rejects(first.send({ kind: "chat" }), { name: "ClosedError", closeCode: 4000 });
  await assert.rejects(first.request("gateway/contexts"), { name: "ClosedError", closeCode: 4000 });

  // The second connection keeps the participant: the first never came back for it.
  await sleep(300);
  const r2 = new Reader(second);
  await r2.kind("system/welcome");
  await watcher.send({ kind: "chat", payload: "after" });
  assert.equal((await r2.kind("chat")).payload, "after");
  assert.equal(second.state, "open");
  await first.close(); // closing an ended client is harmless
});

test("close() ends the stream once what was received is taken, and what waits rejects with ClientClosedError", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const rb = new Reader(bob);
  await alice.send({ kind: "chat", payload: 1 });
  await alice.close();
  assert.equal(alice.state, "closed");
  await assert.rejects(alice.send({ kind: "chat" }), ClientClosedError);

  // bob sees alice's envelope, then her leave.
  assert.equal((await rb.kind("chat")).payload, 1);
  const leave = await rb.kind("system/presence");
  assert.deepEqual(leave.payload, { event: "leave", participant: { id: "alice", capabilities: ["*"] } });

  // alice's stream: the welcome (and bob's join, if it came first), then done.
  const kinds = [];
  for await (const item of alice) kinds.push("kind" in item ? item.kind : item.type);
  assert.deepEqual(kinds.filter((k) => k !== "system/presence"), ["system/welcome"]);
});

test("close() while reconnecting stops it, and rejects what waited for the connection", async (t) => {
  const gw = await startGateway(t);
  const proxy = await Proxy.start(t, gw.port);
  const alice = await connect(proxy.ws, { pod: podName(), reconnect: { minDelayMs: 20, maxDelayMs: 50 } });
  proxy.refusing = true;
  proxy.cut();
  await sleep(50);
  assert.equal(alice.state, "reconnecting");
  const sent = alice.send({ kind: "chat" });
  const asked = alice.request("gateway/contexts");
  await alice.close();
  await assert.rejects(sent, ClientClosedError);
  await assert.rejects(asked, ClientClosedError);
  await sleep(200); // a dial begun before close() may still reach the proxy
  const before = proxy.connections;
  proxy.refusing = false;
  await sleep(300);
  assert.equal(proxy.connections, before, "no dial after close()");
});

test("breaking out of the loop does not close the client", async (t) => {
  const gw = await startGateway(t);
  const alice = await connect(gw.ws, { pod: podName(), filter: { echo: true } });
  t.after(() => alice.close());
  for await (const item of alice) {
    assert.ok("kind" in item && item.kind === "system/welcome");
    break;
  }
  await alice.send({ kind: "chat", payload: "still here" });
  for await (const item of alice) {
    assert.ok("kind" in item);
    assert.deepEqual([item.kind, item.payload], ["chat", "still here"]);
    break;
  }
});
