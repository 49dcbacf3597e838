// observe: a connection that watches the pod without being present. It
// receives what the pod's members receive, and nobody hears of it: no
// presence event, no place in a welcome, before or after it reconnects.
// Without the gateway/observe capability the gateway refuses it.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, Reconnected, RefusedError, type Envelope, type Welcome } from "@mcpp/client";

import { podName, Proxy, Reader, startGateway, tokenFile } from "./gateway.js";

const fast = { minDelayMs: 20, maxDelayMs: 200 };

/** What r receives up to the chat whose id is `id` (included). */
async function upTo(r: Reader, id: string): Promise<Envelope[]> {
  const seen: Envelope[] = [];
  for (;;) {
    const item = await r.next();
    assert.ok(!(item instanceof Reconnected), "a present participant's connection stayed up");
    seen.push(item);
    if (item.id === id) return seen;
  }
}

function ids(w: Welcome): string[] {
  return w.participants.map((p) => p.id).sort();
}

test("an observer receives what another sends and is never announced, before or after it reconnects; without gateway/observe it is refused", async (t) => {
  const gw = await startGateway(t, ["--tokens", tokenFile([
    { token: "watch-t", participant: "watch", capabilities: ["chat", "gateway/observe"], pods: ["*"] },
    { token: "alice-t", participant: "alice", capabilities: ["chat"], pods: ["*"] },
    { token: "bob-t", participant: "bob", capabilities: ["chat"], pods: ["*"] },
    // May chat, and so may join visibly, but may not observe.
    { token: "carol-t", participant: "carol", capabilities: ["chat"], pods: ["*"] },
  ])]);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const alice = await connect(gw.ws, { pod, token: "alice-t" });
  t.after(() => alice.close());
  const ra = new Reader(alice);

  // Without the capability: refused, never turned into a visible join.
  await assert.rejects(connect(gw.ws, { pod, token: "carol-t", observe: true }), (err: unknown) => {
    assert.ok(err instanceof RefusedError, String(err));
    assert.equal(err.status, 403);
    assert.equal(err.code, "forbidden");
    return true;
  });

  const watch = await connect(proxy.ws, { pod, token: "watch-t", observe: true, reconnect: fast });
  t.after(() => watch.close());
  const rw = new Reader(watch);
  assert.equal(watch.welcome.you.id, "watch");
  assert.deepEqual(ids(watch.welcome), ["alice"], "the observer's welcome lists the pod, not itself");

  await alice.send({ id: "hello", kind: "chat", payload: { text: "hi" } });
  assert.equal((await rw.kind("chat")).id, "hello");

  const bob = await connect(gw.ws, { pod, token: "bob-t" });
  t.after(() => bob.close());
  const rb = new Reader(bob);
  assert.deepEqual(ids(bob.welcome), ["alice"], "a later welcome does not list the observer");

  // Reconnected, it watches still: its new welcome does not list it, and
  // nobody hears of it coming back.
  assert.ok(proxy.cut() > 0, "the proxy held the observer's connection");
  for (;;) {
    const item = await rw.next();
    if (!(item instanceof Reconnected)) continue;
    assert.equal(item.resumed, true);
    assert.deepEqual(ids(item.welcome), ["alice", "bob"]);
    break;
  }
  await alice.send({ id: "again", kind: "chat", payload: { text: "still watching?" } });
  assert.equal((await rw.kind("chat")).id, "again");
  await watch.close();

  await bob.send({ id: "end-bob", kind: "chat", payload: { text: "end" } });
  await alice.send({ id: "end-alice", kind: "chat", payload: { text: "end" } });
  const heard = [...(await upTo(ra, "end-bob")), ...(await upTo(rb, "end-alice"))];
  assert.ok(heard.some((e) => e.kind === "system/presence"), "alice heard bob join: presence reaches her");
  for (const e of heard) {
    const text = JSON.stringify(e);
    assert.ok(!text.includes(`"watch"`), `heard of the observer: ${text}`);
    assert.ok(!text.includes(`"carol"`), `heard of the refused observer: ${text}`);
  }
});
