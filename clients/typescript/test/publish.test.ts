// Publishing over HTTP without joining.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, DisconnectedError, GatewayError, publish, Reconnected, RefusedError, resultError } from "@mcpp/client";

import { podName, Reader, startGateway, tokenFile } from "./gateway.js";

test("publish relays envelopes as the participant, without a join, one result each", async (t) => {
  const gw = await startGateway(t);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");

  const [one] = await publish(gw.http, { pod, participant: "ci" }, { kind: "build/done", payload: { ok: true } });
  assert.match(one?.id ?? "", /^[0-9a-f-]{36}$/);
  const got = await r.next();
  assert.ok(!(got instanceof Reconnected));
  assert.deepEqual([got.id, got.from, got.kind, got.payload], [one?.id, "ci", "build/done", { ok: true }], "no presence came first");

  // Several at once, from the /ws URL: each judged on its own, in order.
  const results = await publish(`${gw.ws}/ws`, { pod, participant: "ci" }, [
    { id: "p1", kind: "chat", payload: 1 },
    { id: "p2", kind: "system/x" },
    { id: "p3", kind: "gateway/contexts", payload: {} },
    { id: "p1", kind: "chat", payload: "again" },
  ]);
  assert.deepEqual(results[0], { id: "p1" });
  assert.equal(resultError(results[0]!), undefined);
  assert.equal(results[1]?.error, "reserved_kind");
  const refused = resultError(results[1]!);
  assert.ok(refused instanceof GatewayError);
  assert.equal(refused.code, "reserved_kind");
  assert.equal(refused.envelope?.correlation_id, "p2");
  assert.deepEqual(results[2]?.answer, { contexts: [] });
  assert.equal(results[3]?.error, "duplicate_id");
  assert.deepEqual((await r.envelope()).id, "p1");
  assert.equal(await r.quiet(200), undefined);
});

test("a publish request refused as a whole is a RefusedError with its status and code", async (t) => {
  const gw = await startGateway(t);
  await assert.rejects(publish(gw.http, { pod: "bad pod" , participant: "ci" }, { kind: "chat" }), { name: "RefusedError", status: 400, code: "invalid_pod" });
  await assert.rejects(publish(gw.http, { pod: podName() }, { kind: "chat" }), (err: unknown) => {
    assert.ok(err instanceof RefusedError);
    assert.deepEqual([err.status, err.code], [400, "invalid_participant"]);
    return true;
  });

  const tokens = tokenFile([{ token: "s3cr3t", participant: "ci", capabilities: ["chat"], pods: ["*"] }]);
  const locked = await startGateway(t, ["--tokens", tokens]);
  await assert.rejects(publish(locked.http, { pod: podName(), token: "wrong" }, { kind: "chat" }), { name: "RefusedError", status: 401, code: "unauthorized" });
  const [res] = await publish(locked.http, { pod: podName(), token: "s3cr3t" }, { kind: "tool/x" });
  assert.equal(resultError(res!)?.code, "capability_violation");
});

test("a gateway that cannot be reached is a DisconnectedError; no envelope is a TypeError", async (t) => {
  const gw = await startGateway(t);
  await assert.rejects(publish("http://127.0.0.1:1", { pod: "lab", participant: "ci" }, { kind: "chat" }), DisconnectedError);
  await assert.rejects(publish(gw.http, { pod: "lab", participant: "ci" }, []), TypeError);
  await assert.rejects(publish(gw.http, { participant: "ci" } as unknown as { pod: string }, { kind: "chat" }), TypeError);
});
