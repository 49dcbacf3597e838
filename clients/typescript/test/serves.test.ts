// serves: a participant that answers MCP requests says so when it joins
// (serves ["mcp"]), and its identity shows it to those present, to later
// joiners, and again after it reconnects.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, Reconnected, RefusedError, SERVES_MCP, type Identity } from "@mcpp/client";

import { podName, Proxy, Reader, startGateway } from "./gateway.js";

const fast = { minDelayMs: 20, maxDelayMs: 200 };

/** The identity in the next presence event of `event` about participant id. */
async function presenceOf(r: Reader, event: "join" | "leave", id: string): Promise<Identity> {
  for (;;) {
    const env = await r.kind("system/presence");
    const p = env.payload as { event: string; participant: Identity };
    if (p.event === event && p.participant.id === id) return p.participant;
  }
}

test("serves [\"mcp\"] shows in the participant's identity: in presence events, in a later joiner's welcome, and after a reconnection", async (t) => {
  const gw = await startGateway(t);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const ra = new Reader(alice);
  const files = await connect(proxy.ws, { pod, participant: "files", serves: [SERVES_MCP], reconnect: fast });
  t.after(() => files.close());

  assert.deepEqual(files.welcome.you.serves, ["mcp"]);
  assert.equal(alice.welcome.you.serves, undefined, "a plain participant carries no serves");
  assert.deepEqual((await presenceOf(ra, "join", "files")).serves, ["mcp"]);

  const carol = await connect(gw.ws, { pod, participant: "carol" });
  t.after(() => carol.close());
  const listed = new Map(carol.welcome.participants.map((p) => [p.id, p]));
  assert.deepEqual([...listed.keys()].sort(), ["alice", "files"]);
  assert.deepEqual(listed.get("files")?.serves, ["mcp"]);
  assert.equal(listed.get("alice")?.serves, undefined);

  // The reconnection says so again: the new welcome, and the join the
  // others see, still carry serves.
  assert.ok(proxy.cut() > 0, "the proxy held files' connection");
  const rf = new Reader(files);
  for (;;) {
    const item = await rf.next();
    if (!(item instanceof Reconnected)) continue;
    assert.deepEqual(item.welcome.you.serves, ["mcp"]);
    break;
  }
  assert.deepEqual((await presenceOf(ra, "join", "files")).serves, ["mcp"], "the join after the reconnection");
});

test("serves must be a list of strings (TypeError); a value the gateway does not know is its 400 invalid_filter", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  await assert.rejects(connect(gw.ws, { pod, participant: "files", serves: "mcp" as unknown as string[] }), TypeError);
  await assert.rejects(connect(gw.ws, { pod, participant: "files", observe: "1" as unknown as boolean }), TypeError);
  await assert.rejects(connect(gw.ws, { pod, participant: "files", serves: ["tools"] }), (err: unknown) => {
    assert.ok(err instanceof RefusedError, String(err));
    assert.equal(err.status, 400);
    assert.equal(err.code, "invalid_filter");
    return true;
  });
});
