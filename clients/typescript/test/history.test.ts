// The pod's past: joining late with history, and resuming after an id.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, publish } from "@mcpp/client";

import { podName, Reader, startGateway } from "./gateway.js";

/** Publishes n chat envelopes with ids h-0… in pod, over HTTP (nobody sees a join). */
async function fill(http: string, pod: string, n: number): Promise<void> {
  const envs = Array.from({ length: n }, (_, i) => ({ id: `h-${i}`, kind: "chat", payload: { n: i } }));
  const results = await publish(http, { pod, participant: "writer" }, envs);
  assert.deepEqual(results.map((r) => r.id), envs.map((e) => e.id));
}

test("history: 10 replays the last ten after the welcome, then live envelopes follow", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  await fill(gw.http, pod, 15);
  const carol = await connect(gw.ws, { pod, participant: "carol", history: 10 });
  t.after(() => carol.close());
  assert.deepEqual(carol.welcome.history, { replayed: 10, folded: 0, collapsed: 0 });
  const r = new Reader(carol);
  assert.equal((await r.envelope()).kind, "system/welcome");
  for (let i = 5; i < 15; i++) assert.equal((await r.envelope()).id, `h-${i}`);
  await publish(gw.http, { pod, participant: "writer" }, { id: "live", kind: "chat" });
  assert.equal((await r.envelope()).id, "live");
});

test('history: "all" replays everything, folded: a concluded context shows its conclusion and its event', async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  await fill(gw.http, pod, 3);
  await publish(gw.http, { pod, participant: "writer" }, [
    { id: "step", kind: "reasoning/step", context: { id: "r1", type: "reasoning" }, payload: {} },
    { id: "end", kind: "conclusion", context: { id: "r1" }, payload: { summary: "done" } },
  ]);
  const carol = await connect(gw.ws, { pod, participant: "carol", history: "all" });
  t.after(() => carol.close());
  assert.equal(carol.welcome.history?.replayed, 5);
  assert.equal(carol.welcome.history?.folded, 1);
  const r = new Reader(carol);
  await r.kind("system/welcome");
  const ids = [];
  for (let i = 0; i < 5; i++) {
    const env = await r.envelope();
    ids.push(env.kind === "system/context" ? "event" : env.id);
  }
  assert.deepEqual(ids, ["h-0", "h-1", "h-2", "end", "event"]);
});

test("resume: an id replays what came after it; an id the pod does not hold says resumed false", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  await fill(gw.http, pod, 8);
  const dave = await connect(gw.ws, { pod, participant: "dave", resume: "h-4" });
  t.after(() => dave.close());
  assert.deepEqual(dave.welcome.history, { resumed: true, replayed: 3 });
  const r = new Reader(dave);
  await r.kind("system/welcome");
  for (let i = 5; i < 8; i++) assert.equal((await r.envelope()).id, `h-${i}`);

  const eve = await connect(gw.ws, { pod, participant: "eve", resume: "nope" });
  t.after(() => eve.close());
  assert.equal(eve.welcome.history?.resumed, false, "the welcome tells the gap");
});
