// Who may do what, changed while the pod runs (issue 23): a fresh token
// for a connection (refresh), a kick with a ban, capabilities granted and
// revoked; and the close codes that end the client for good.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  connect,
  DisconnectedError,
  GatewayError,
  KickedError,
  Reconnected,
  RefusedError,
  RevokedError,
  TokenExpiredError,
  type Client,
  type StreamItem,
} from "@mcpp/client";

import { podName, Proxy, Reader, secretFile, signHS256, sleep, startGateway, tokenFile, type TokenEntry } from "./gateway.js";

const secret = "a-test-secret-of-more-than-32-bytes-for-hs256";

/** Reads the stream until it throws, and returns what it threw. */
async function endOf(r: Reader, ms: number): Promise<unknown> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      await r.next(Math.max(1, deadline - Date.now()));
    } catch (err) {
      return err;
    }
  }
}

/** The next item that is not presence. */
async function nextNonPresence(r: Reader): Promise<StreamItem> {
  for (;;) {
    const item = await r.next();
    if (item instanceof Reconnected || item.kind !== "system/presence") return item;
  }
}

/** Whether client's send of kind is accepted (true) or refused with capability_violation (false). */
async function sends(client: Client, kind: string): Promise<boolean> {
  try {
    await client.send({ kind });
    return true;
  } catch (err) {
    assert.ok(err instanceof GatewayError, String(err));
    assert.equal(err.code, "capability_violation");
    return false;
  }
}

test("refresh extends a connection past its first token's exp, and later reconnections present the new token; without it the connection ends with TokenExpiredError", async (t) => {
  const gw = await startGateway(t, ["--jwt-secret-file", secretFile(secret)]);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  // Both first tokens expire 2 to 3 s from now (exp is in whole seconds).
  const exp = Math.floor(Date.now() / 1000) + 3;
  const short = (sub: string) => signHS256(secret, { sub, exp, caps: ["chat"] });
  const old = short("alice");
  // alice's token in the URL's query, as a user may give it.
  const alice = await connect(`${proxy.ws}/ws?token=${old}`, { pod, reconnect: { minDelayMs: 10, maxDelayMs: 50 } });
  t.after(() => alice.close());
  const bob = await connect(proxy.ws, { pod, token: short("bob"), reconnect: { minDelayMs: 10, maxDelayMs: 50 } });
  t.after(() => bob.close());
  assert.equal(alice.welcome.you.id, "alice");
  assert.equal(await sends(alice, "tool/run"), false, "the first token allows chat alone");

  // A token of another participant is refused, and the connection keeps its token.
  await assert.rejects(alice.refresh(signHS256(secret, { sub: "mallory", exp: exp + 3600 })), (err: unknown) => {
    assert.ok(err instanceof GatewayError);
    assert.equal(err.code, "auth_violation");
    return true;
  });
  const fresh = signHS256(secret, { sub: "alice", exp: exp + 3600, caps: ["chat", "tool/*"] });
  const refreshed = await alice.refresh(fresh);
  assert.equal(refreshed.participant, "alice");
  assert.deepEqual(refreshed.capabilities, ["chat", "tool/*"]);
  assert.equal(typeof refreshed.expires, "string");
  assert.ok(Date.parse(refreshed.expires as string) >= (exp + 3600) * 1000, `expires ${refreshed.expires}`);
  assert.equal(await sends(alice, "tool/run"), true, "the fresh token's capabilities apply");

  // bob, not refreshed, is closed with 4401 after exp, and stays out.
  const ended = await endOf(new Reader(bob), (exp + 5) * 1000 - Date.now());
  assert.ok(ended instanceof TokenExpiredError, String(ended));
  assert.equal(ended.closeCode, 4401);
  assert.equal(ended.reason, "token expired");
  assert.ok(Date.now() >= exp * 1000, "closed after exp, not before");
  assert.equal(bob.state, "closed");
  await assert.rejects(bob.send({ kind: "chat" }), TokenExpiredError);

  // alice is still there past the first token's exp.
  await sleep(500);
  assert.equal(alice.state, "open");
  await alice.send({ kind: "chat", payload: "still here" });

  // A reconnection presents the fresh token (the expired one would be
  // refused with 401), in the header, with the URL's token dropped.
  const dialed = proxy.accepted;
  assert.equal(dialed, 2);
  proxy.cut();
  const ra = new Reader(alice);
  for (;;) {
    const item = await nextNonPresence(ra);
    if (item instanceof Reconnected) {
      assert.ok(item.cause instanceof DisconnectedError, String(item.cause));
      assert.equal(item.welcome.you.id, "alice");
      break;
    }
  }
  await alice.send({ kind: "tool/run" });
  const again = proxy.upgrades.slice(dialed);
  assert.ok(again.length >= 1);
  for (const head of again) {
    assert.ok(!head.includes(old), `a reconnection presented the old token:\n${head}`);
    assert.ok(!/^GET [^\r\n]*[?&]token=/.test(head), `a reconnection put a token in the query:\n${head}`);
    assert.ok(head.toLowerCase().includes(`\r\nauthorization: bearer ${fresh.toLowerCase()}`), `a reconnection did not present the fresh token:\n${head}`);
  }
  await sleep(200);
  assert.equal(proxy.accepted, dialed + again.length, "bob did not come back");
});

test("kick with a ban: the kicked client ends with KickedError and does not reconnect; the kicker gets the answer", async (t) => {
  const gw = await startGateway(t, ["--tokens", tokenFile([
    { token: "mod-t", participant: "mod", capabilities: ["chat", "gateway/kick"], pods: ["*"] },
    { token: "bob-t", participant: "bob", capabilities: ["chat"], pods: ["*"] },
  ])]);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const mod = await connect(gw.ws, { pod, token: "mod-t" });
  t.after(() => mod.close());
  const bob = await connect(proxy.ws, { pod, token: "bob-t", reconnect: { minDelayMs: 10, maxDelayMs: 50 } });
  t.after(() => bob.close());
  const rm = new Reader(mod);

  // Kicking needs the gateway/kick capability.
  await assert.rejects(bob.kick({ participant: "mod" }), (err: unknown) => {
    assert.ok(err instanceof GatewayError);
    assert.equal(err.code, "capability_violation");
    return true;
  });
  await assert.rejects(mod.kick({ participant: "bob", ban_ms: -1 }), { name: "GatewayError", code: "invalid_envelope" });

  const before = Date.now();
  const kicked = await mod.kick({ participant: "bob", reason: "looping", ban_ms: 60_000 });
  assert.equal(kicked.participant, "bob");
  assert.equal(kicked.connections, 1);
  assert.ok(Date.parse(kicked.banned_until as string) >= before + 59_000, `banned_until ${kicked.banned_until}`);

  const ended = await endOf(new Reader(bob), 5000);
  assert.ok(ended instanceof KickedError, String(ended));
  assert.equal(ended.closeCode, 4410);
  assert.equal(ended.reason, "kicked by mod: looping");
  assert.equal(bob.state, "closed");
  await assert.rejects(bob.send({ kind: "chat" }), KickedError);

  // Everyone saw it leave, with why.
  for (;;) {
    const env = await rm.kind("system/presence");
    const p = env.payload as { event: string; participant: { id: string }; reason?: string };
    if (p.event === "leave" && p.participant.id === "bob") {
      assert.equal(p.reason, "kicked by mod: looping");
      break;
    }
  }
  await sleep(300);
  assert.equal(proxy.accepted, 1, "the kicked client did not dial again");
  // The ban holds: a new client of bob's is refused.
  await assert.rejects(connect(gw.ws, { pod, token: "bob-t" }), (err: unknown) => {
    assert.ok(err instanceof RefusedError);
    assert.equal(err.status, 403);
    assert.equal(err.code, "forbidden");
    return true;
  });
});

test("grant lets the recipient send a kind it could not, and revoke takes it back", async (t) => {
  const gw = await startGateway(t, ["--tokens", tokenFile([
    // alice holds what she grants: a grant never gives more than its grantor holds.
    { token: "alice-t", participant: "alice", capabilities: ["chat", "capability/grant", "tool/*"], pods: ["*"] },
    { token: "bob-t", participant: "bob", capabilities: ["chat"], pods: ["*"] },
  ])]);
  const pod = podName();
  const alice = await connect(gw.ws, { pod, token: "alice-t" });
  t.after(() => alice.close());
  const bob = await connect(gw.ws, { pod, token: "bob-t" });
  t.after(() => bob.close());
  const rb = new Reader(bob);

  assert.equal(await sends(bob, "tool/run"), false, "bob may not run tools before the grant");
  await assert.rejects(bob.grant({ recipient: "bob", capabilities: ["*"] }), { name: "GatewayError", code: "capability_violation" });
  await assert.rejects(alice.grant({ recipient: "bob", capabilities: ["tool/*"], context: "no-such-context" }), { name: "GatewayError", code: "invalid_context" });
  await assert.rejects(alice.grant({ recipient: "", capabilities: ["tool/*"] }), TypeError);

  const granted = await alice.grant({ recipient: "bob", capabilities: ["tool/*"], reason: "to run the build" });
  assert.equal(granted.event, "granted");
  assert.equal(granted.recipient, "bob");
  assert.equal(granted.grantor, "alice");
  assert.deepEqual(granted.capabilities, ["tool/*"]);
  assert.equal(typeof granted.grant_id, "string");
  // bob receives the grant itself, from alice.
  const g = await rb.kind("capability/grant");
  assert.equal(g.id, granted.grant_id);
  assert.equal(g.from, "alice");
  assert.deepEqual(g.to, ["bob"]);
  assert.deepEqual(g.payload, { recipient: "bob", capabilities: ["tool/*"], reason: "to run the build" });
  assert.equal(await sends(bob, "tool/run"), true, "the grant lets bob run tools");

  // Only a grant in force can be revoked.
  await assert.rejects(alice.revoke({ recipient: "bob", grant_id: "no-such-grant" }), { name: "GatewayError", code: "invalid_envelope" });
  const revoked = await alice.revoke({ recipient: "bob", grant_id: granted.grant_id, reason: "done" });
  assert.equal(revoked.event, "revoked");
  assert.equal(revoked.grant_id, granted.grant_id);
  // bob is told, then may no longer run tools.
  for (;;) {
    const env = await rb.kind("system/capability");
    const ev = env.payload as { event: string; grant_id: string };
    if (ev.event === "revoked") {
      assert.equal(ev.grant_id, granted.grant_id);
      break;
    }
  }
  assert.equal(await sends(bob, "tool/run"), false, "the revoked grant no longer holds");
  assert.equal(await sends(bob, "chat"), true, "the token's own capabilities still do");
});

test("a token revoked from the token file ends the client with RevokedError, and it does not reconnect", async (t) => {
  const alice: TokenEntry = { token: "alice-t", participant: "alice", capabilities: ["chat"], pods: ["*"] };
  const bob: TokenEntry = { token: "bob-t", participant: "bob", capabilities: ["chat"], pods: ["*"] };
  const file = tokenFile([alice, bob]);
  const gw = await startGateway(t, ["--tokens", file]);
  const proxy = await Proxy.start(t, gw.port);
  const pod = podName();
  const a = await connect(gw.ws, { pod, token: "alice-t" });
  t.after(() => a.close());
  const b = await connect(proxy.ws, { pod, token: "bob-t", reconnect: { minDelayMs: 10, maxDelayMs: 50 } });
  t.after(() => b.close());

  tokenFile([alice], file);
  gw.signal("SIGHUP");
  const ended = await endOf(new Reader(b), 5000);
  assert.ok(ended instanceof RevokedError, String(ended));
  assert.equal(ended.closeCode, 4403);
  assert.equal(ended.reason, "revoked");
  assert.equal(b.state, "closed");
  await sleep(300);
  assert.equal(proxy.accepted, 1, "the revoked client did not dial again");
  await a.send({ kind: "chat", payload: "unaffected" });
});
