// Sub-contexts: branch and conclude, and the system/context event that
// the conclusion brings.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, type ContextObject } from "@mcpp/client";

import { podName, Reader, startGateway } from "./gateway.js";

test("branch opens a context, conclude ends it, and everyone admitted gets the system/context event", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  // carol sees the main context and conclusions only: the fold, live.
  const carol = await connect(gw.ws, { pod, participant: "carol", filter: { contexts: "none", conclusions: true } });
  t.after(() => carol.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());

  const ctx = await alice.branch("reasoning", { payload: { description: "which cache can we drop?" } });
  assert.equal(ctx.type, "reasoning");
  assert.match(ctx.id, /^[0-9a-f-]{36}$/);
  assert.equal(ctx.parent, undefined);
  await alice.send({ kind: "reasoning/step", context: ctx, payload: { text: "the CDN serves most reads" } });
  const inner: ContextObject = await alice.branch("plan", { parent: ctx.id });
  assert.equal(inner.parent, ctx.id);
  const conclusion = await alice.conclude(ctx.id, "drop the query cache");

  const rb = new Reader(bob);
  await rb.kind("system/welcome");
  const seen = [];
  for (;;) {
    const env = await rb.envelope();
    seen.push(env);
    if (env.kind === "system/context" && (env.context as ContextObject).id === ctx.id) break;
  }
  assert.deepEqual(seen.map((e) => e.kind), [
    "context/branch", "reasoning/step", "context/branch", "conclusion",
    // The nested context concludes with its parent; both events follow the conclusion.
    ...seen.slice(4).map(() => "system/context"),
  ]);
  assert.deepEqual(seen[0]?.payload, { description: "which cache can we drop?" });
  assert.deepEqual(seen[3]?.payload, { summary: "drop the query cache" });
  assert.equal(seen[3]?.id, conclusion);
  const event = seen[seen.length - 1]!;
  assert.equal(event.from, "system:gateway");
  assert.deepEqual(event.context, { id: ctx.id, type: "reasoning" });
  const payload = event.payload as { event: string; reason: string; stats: { messages: number; participants: string[] } };
  assert.equal(payload.event, "concluded");
  assert.equal(payload.reason, "conclusion");
  assert.equal(payload.stats.messages, 3);
  assert.deepEqual(payload.stats.participants, ["alice"]);

  const rc = new Reader(carol);
  await rc.kind("system/welcome");
  assert.equal((await rc.envelope()).id, conclusion, "carol's filter shows the conclusion, not the steps");
  assert.equal((await rc.envelope()).kind, "system/context");

  const answer = await alice.request("gateway/contexts", { state: "concluded" });
  const listed = (answer.payload as { contexts: { id: string; reason: string }[] }).contexts;
  assert.deepEqual(listed.map((c) => [c.id, c.reason]).sort(), [[ctx.id, "conclusion"], [inner.id, "parent_concluded"]].sort());
});
