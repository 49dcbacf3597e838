// Reconnecting: a cut TCP connection in the middle of a burst, and the
// user still receives every envelope once, in order; a gap told when the
// gateway cannot resume; sends and requests carried over a cut.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, DisconnectedError, Reconnected, type Envelope } from "@mcpp/client";

import { podName, Proxy, Reader, sleep, startGateway } from "./gateway.js";

const fast = { minDelayMs: 20, maxDelayMs: 200 };
const unlimited = ["--rate", "100000", "--burst", "100000"];

test("cut in the middle of a 2,000-envelope burst: every envelope arrives once, in order, and the client resumed", async (t) => {
  const gw = await startGateway(t, [...unlimited, "--history", "5000"]);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const bob = await connect(proxy.ws, { pod, participant: "bob", reconnect: fast });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());

  const total = 2000;
  const sending = (async () => {
    for (let n = 0; n < total; n += 100) {
      await Promise.all(Array.from({ length: 100 }, (_, i) => alice.send({ id: `e-${n + i}`, kind: "count", payload: { n: n + i } })));
      await sleep(10); // a burst long enough for the cuts to fall in it
    }
  })();

  const r = new Reader(bob);
  const got: number[] = [];
  const reconnections: Reconnected[] = [];
  const cutAt = new Set([300, 1100]);
  while (got.length < total) {
    const item = await r.next(20_000);
    if (item instanceof Reconnected) {
      reconnections.push(item);
      continue;
    }
    if (item.kind !== "count") continue;
    got.push((item.payload as { n: number }).n);
    if (cutAt.has(got.length)) assert.ok(proxy.cut() > 0, "the proxy held the client's connection");
  }
  await sending;
  assert.equal(got.length, total);
  assert.deepEqual(got, Array.from({ length: total }, (_, n) => n), "every envelope once, in order");
  assert.equal(reconnections.length, 2);
  for (const rc of reconnections) {
    assert.equal(rc.resumed, true);
    assert.equal(rc.gap, false);
    assert.match(rc.resumedAfter ?? "", /^e-\d+$/);
    assert.ok(rc.cause instanceof DisconnectedError);
    assert.equal(rc.welcome.history?.resumed, true);
  }
  // The sender went on while bob was away: what it sent then came as the
  // resume's replay.
  assert.ok(reconnections.some((rc) => (rc.welcome.history?.replayed ?? 0) > 0), "a cut fell in the middle of the burst");
  assert.equal(await r.quiet(300), undefined, "nothing after the last envelope");
});

test("a reconnection the gateway cannot resume (no history) is a Reconnected with resumed false", async (t) => {
  const gw = await startGateway(t, ["--history", "0"]);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const bob = await connect(proxy.ws, { pod, participant: "bob", reconnect: fast });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");
  await alice.send({ kind: "chat", payload: 1 });
  assert.deepEqual((await r.kind("chat")).payload, 1);

  proxy.cut();
  const item = await r.next();
  assert.ok(item instanceof Reconnected, `got ${JSON.stringify(item)}`);
  assert.equal(item.resumed, false);
  assert.equal(item.gap, true);
  assert.equal(item.welcome.you.id, "bob");
  await alice.send({ kind: "chat", payload: 2 });
  assert.deepEqual((await r.kind("chat")).payload, 2);
});

test("a reconnection after an expired resume point is a gap too", async (t) => {
  const gw = await startGateway(t, ["--history", "5"]);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const bob = await connect(proxy.ws, { pod, participant: "bob", reconnect: fast });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const r = new Reader(bob);
  await alice.send({ kind: "chat", payload: 0 });
  await r.kind("chat");

  // While bob cannot reconnect, more than the history holds goes by.
  proxy.refusing = true;
  proxy.cut();
  for (let n = 1; n <= 10; n++) await alice.send({ kind: "chat", payload: n });
  proxy.refusing = false;
  const item = await r.next();
  assert.ok(item instanceof Reconnected);
  assert.equal(item.resumed, false);
});

test("sends and requests made while the connection is down wait for the next one, and arrive once", async (t) => {
  const gw = await startGateway(t);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const alice = await connect(proxy.ws, { pod, participant: "alice", reconnect: fast });
  t.after(() => alice.close());
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const rb = new Reader(bob);
  await rb.kind("system/welcome");

  proxy.refusing = true;
  proxy.cut();
  await sleep(50);
  assert.equal(alice.state, "reconnecting");
  const sent = alice.send({ kind: "chat", payload: "while down" });
  const answered = alice.request("gateway/contexts", {});
  await sleep(200);
  proxy.refusing = false;
  const id = await sent;
  assert.equal((await answered).kind, "system/contexts");
  assert.equal(alice.state, "open");
  const env = await rb.kind("chat");
  assert.deepEqual([env.id, env.payload], [id, "while down"]);
  assert.equal(await rb.quiet(300), undefined, "sent once");
});

test("envelopes cut off before they reached the gateway are written again on the next connection", async (t) => {
  const gw = await startGateway(t, unlimited);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const alice = await connect(proxy.ws, { pod, participant: "alice", reconnect: fast });
  t.after(() => alice.close());
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());

  // The cut comes before the proxy has passed the writes on.
  const sends = Array.from({ length: 200 }, (_, n) => alice.send({ id: `s-${n}`, kind: "count", payload: n }));
  proxy.cut();
  assert.deepEqual(await Promise.all(sends), Array.from({ length: 200 }, (_, n) => `s-${n}`));
  const rb = new Reader(bob);
  for (let n = 0; n < 200; n++) assert.equal((await rb.kind("count")).id, `s-${n}`);
  assert.equal(await rb.quiet(300), undefined);
});

test("envelopes the gateway took but never confirmed are written again, and duplicate_id says the first copy got through", async (t) => {
  const gw = await startGateway(t, unlimited);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const alice = await connect(proxy.ws, { pod, participant: "alice", reconnect: fast });
  t.after(() => alice.close());
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const rb = new Reader(bob);

  // The gateway takes and relays them, but its confirmation never
  // reaches alice before the cut.
  proxy.muted = true;
  const sends = Array.from({ length: 50 }, (_, n) => alice.send({ id: `d-${n}`, kind: "count", payload: n }));
  for (let n = 0; n < 50; n++) assert.equal((await rb.kind("count")).id, `d-${n}`);
  proxy.cut();
  proxy.muted = false;
  assert.deepEqual(await Promise.all(sends), Array.from({ length: 50 }, (_, n) => `d-${n}`));
  assert.equal(await rb.quiet(300), undefined, "relayed once");
});

test("without history the gateway cannot recognise a second copy: an unconfirmed send rejects with a DisconnectedError", async (t) => {
  const gw = await startGateway(t, ["--history", "0"]);
  const proxy = await Proxy.start(t, gw.port);
  const alice = await connect(proxy.ws, { pod: podName(), participant: "alice", reconnect: fast });
  t.after(() => alice.close());
  proxy.muted = true;
  const sent = alice.send({ kind: "chat", payload: 1 });
  await sleep(100);
  proxy.cut();
  await assert.rejects(sent, (err: unknown) => err instanceof DisconnectedError && /may or may not have been relayed/.test(err.message));
});

test("giving up after reconnect.maxAttempts ends the stream with a DisconnectedError", async (t) => {
  const gw = await startGateway(t);
  const proxy = await Proxy.start(t, gw.port);
  const bob = await connect(proxy.ws, { pod: podName(), reconnect: { ...fast, maxAttempts: 2 } });
  t.after(() => bob.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");
  proxy.refusing = true;
  proxy.cut();
  await assert.rejects(r.next(), (err: unknown) => err instanceof DisconnectedError && /gave up reconnecting after 2 attempts/.test(err.message));
  assert.equal(bob.state, "closed");
  await assert.rejects(bob.send({ kind: "chat" }), DisconnectedError);
});

test("reconnect: false ends the client when its connection is lost", async (t) => {
  const gw = await startGateway(t);
  const proxy = await Proxy.start(t, gw.port);
  const bob = await connect(proxy.ws, { pod: podName(), reconnect: false });
  t.after(() => bob.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");
  proxy.cut();
  await assert.rejects(r.next(), DisconnectedError);
  assert.equal(bob.state, "closed");
});

test("a filter changed with gateway/filter is kept across a reconnection", async (t) => {
  const gw = await startGateway(t);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const bob = await connect(proxy.ws, { pod, participant: "bob", reconnect: fast });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  await bob.request("gateway/filter", { contexts: "none" });
  const r = new Reader(bob);
  await alice.send({ kind: "chat", payload: "before" });
  assert.equal((await r.kind("chat")).payload, "before");
  proxy.cut();
  const item = await r.next();
  assert.ok(item instanceof Reconnected);
  assert.equal(item.welcome.filter.contexts, "none");
  await alice.send({ kind: "step", context: { id: "r1", type: "reasoning" }, payload: "hidden" });
  await alice.send({ kind: "chat", payload: "after" });
  const env: Envelope = await r.envelope();
  assert.deepEqual([env.kind, env.payload], ["chat", "after"]);
});

test("a system/context event received before a cut is not handed out again when the resume replays it", async (t) => {
  const gw = await startGateway(t);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const bob = await connect(proxy.ws, { pod, participant: "bob", reconnect: fast });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const ctx = await alice.branch("reasoning");
  const conclusion = await alice.conclude(ctx.id, "done");
  const r = new Reader(bob);
  assert.equal((await r.kind("conclusion")).id, conclusion);
  const event = await r.kind("system/context");

  proxy.cut();
  const item = await r.next();
  assert.ok(item instanceof Reconnected);
  assert.equal(item.resumed, true);
  assert.equal(item.resumedAfter, conclusion, "the resume point is the last pod envelope");
  assert.equal(item.welcome.history?.replayed, 1, "the gateway replays the event after it");
  await alice.send({ kind: "chat", payload: "after" });
  const next = await r.envelope();
  assert.notEqual(next.id, event.id, "the event came once");
  assert.deepEqual([next.kind, next.payload], ["chat", "after"]);
});
