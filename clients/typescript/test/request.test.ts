// Requests to the gateway: answers matched by correlation_id while the
// pod's envelopes stream in, refusals as GatewayErrors.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, GatewayError, type Envelope } from "@mcpp/client";

import { podName, Reader, startGateway } from "./gateway.js";

test("gateway/contexts, gateway/history and gateway/filter are answered to their request while envelopes stream", async (t) => {
  const gw = await startGateway(t, ["--rate", "10000", "--burst", "10000", "--context-rate", "10000", "--context-burst", "10000"]);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");

  // alice streams 600 envelopes, some in a context, while bob asks.
  const total = 600;
  const sending = (async () => {
    for (let n = 0; n < total; n += 50) {
      await Promise.all(Array.from({ length: 50 }, (_, i) =>
        alice.send({ kind: "step", context: { id: "r1", type: "reasoning" }, payload: { n: n + i } })));
    }
  })();
  const asked: Promise<Envelope>[] = [];
  for (let i = 0; i < 10; i++) {
    asked.push(bob.request("gateway/contexts", { state: "all" }));
    asked.push(bob.request("gateway/history", { limit: 5 }));
    asked.push(bob.request("gateway/filter", {}));
  }
  const received: number[] = [];
  while (received.length < total) {
    const env = await r.envelope();
    assert.equal(env.kind, "step", "answers to requests are not in the stream");
    received.push((env.payload as { n: number }).n);
  }
  await sending;
  assert.deepEqual(received, Array.from({ length: total }, (_, n) => n));

  const answers = await Promise.all(asked);
  const ids = new Set<string>();
  answers.forEach((ans, i) => {
    assert.equal(ans.kind, ["system/contexts", "system/history", "system/filter"][i % 3]);
    assert.equal(ans.from, "system:gateway");
    assert.equal(typeof ans.correlation_id, "string");
    ids.add(ans.correlation_id as string);
  });
  assert.equal(ids.size, answers.length, "each answer answers its own request");
  const contexts = (answers[0]?.payload as { contexts: { id: string; type: string }[] }).contexts;
  assert.deepEqual(contexts.map((c) => [c.id, c.type]), [["r1", "reasoning"]]);
  const history = answers[1]?.payload as { envelopes: Envelope[]; more: boolean };
  assert.ok(history.envelopes.length > 0 && history.envelopes.length <= 5);
  assert.equal(typeof history.more, "boolean");
});

test("gateway/filter changes what arrives, and the answer is the filter in effect", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const ans = await bob.request("gateway/filter", { contexts: "none" });
  assert.equal(ans.kind, "system/filter");
  assert.equal((ans.payload as { contexts: string }).contexts, "none");

  await alice.send({ kind: "step", context: { id: "r1", type: "reasoning" }, payload: 1 });
  await alice.send({ kind: "chat", payload: 2 });
  const r = new Reader(bob);
  await r.kind("system/welcome");
  const env = await r.envelope();
  assert.deepEqual([env.kind, env.payload], ["chat", 2]);
});

test("a refused request is a GatewayError with the gateway's code; kinds the client does not know are the gateway's to judge", async (t) => {
  const gw = await startGateway(t);
  const alice = await connect(gw.ws, { pod: podName() });
  t.after(() => alice.close());
  await assert.rejects(alice.request("gateway/nope", {}), (err: unknown) => {
    assert.ok(err instanceof GatewayError);
    assert.equal(err.code, "unknown_request");
    return true;
  });
  await assert.rejects(alice.request("gateway/history", { limit: 0 }), { name: "GatewayError", code: "invalid_envelope" });
  await assert.rejects(alice.request("gateway/filter", { routing: 3 }), { name: "GatewayError", code: "invalid_filter" });
  await assert.rejects(alice.request("chat", {}), TypeError);
});

test("a request's signal stops the wait", async (t) => {
  const gw = await startGateway(t);
  const alice = await connect(gw.ws, { pod: podName() });
  t.after(() => alice.close());
  const stop = new AbortController();
  stop.abort(new Error("changed my mind"));
  await assert.rejects(alice.request("gateway/contexts", {}, { signal: stop.signal }), /changed my mind/);
  // The client is none the worse.
  assert.equal((await alice.request("gateway/contexts", {})).kind, "system/contexts");
});
