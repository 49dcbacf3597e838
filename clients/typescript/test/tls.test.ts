// A gateway serving TLS (--tls-cert, --tls-key) whose certificate a
// private CA signed: the client trusts it with `ca` (for wss:// and for
// https:// publishes), or with NODE_EXTRA_CA_CERTS for the whole process,
// and refuses it otherwise. The CA and the certificate, for 127.0.0.1, are
// made by the test with the openssl command.

import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";

import { connect, DisconnectedError, publish, Reconnected } from "@mcpp/client";

import { packageDir, podName, Reader, startGateway } from "./gateway.js";

const run = promisify(execFile);

/** What openssl req reads: a CA's extensions and a server certificate's for 127.0.0.1. */
const OPENSSL_CONFIG = `[req]
distinguished_name = dn
prompt = no
[dn]
CN = mcpp test
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
`;

/** A CA of the test's own, and a certificate it signed for 127.0.0.1, as files. */
interface TestCA {
  /** The CA's certificate (PEM file). */
  caFile: string;
  /** The CA's certificate, PEM. */
  caPEM: string;
  /** The gateway's certificate and key (PEM files). */
  cert: string;
  key: string;
}

/** Makes a CA and a certificate for 127.0.0.1 with openssl (OpenSSL 3: req -CA). */
function makeCA(): TestCA {
  const dir = mkdtempSync(join(tmpdir(), "mcpp-ts-tls-"));
  const config = join(dir, "openssl.cnf");
  writeFileSync(config, OPENSSL_CONFIG);
  const p = (name: string) => join(dir, name);
  const newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"];
  try {
    execFileSync("openssl", ["req", "-x509", "-config", config, "-extensions", "ca", ...newKey, "-keyout", p("ca.key"), "-out", p("ca.pem"), "-subj", "/CN=mcpp-ts-test-ca"], { stdio: "pipe" });
    execFileSync("openssl", ["req", "-x509", "-config", config, "-extensions", "leaf", ...newKey, "-keyout", p("key.pem"), "-out", p("cert.pem"), "-subj", "/CN=127.0.0.1", "-CA", p("ca.pem"), "-CAkey", p("ca.key")], { stdio: "pipe" });
  } catch (err) {
    const e = err as { stderr?: Buffer; message: string };
    throw new Error(`the TLS tests make their CA with the openssl command (OpenSSL 3): ${e.message}\n${e.stderr?.toString() ?? ""}`);
  }
  return { caFile: p("ca.pem"), caPEM: readFileSync(p("ca.pem"), "utf8"), cert: p("cert.pem"), key: p("key.pem") };
}

/** A TLS gateway with a certificate of a new CA; its wss:// and https:// URLs. */
async function tlsGateway(t: TestContext): Promise<{ ca: TestCA; wss: string; https: string }> {
  const ca = makeCA();
  const gw = await startGateway(t, ["--tls-cert", ca.cert, "--tls-key", ca.key]);
  return { ca, wss: `wss://127.0.0.1:${gw.port}`, https: `https://127.0.0.1:${gw.port}` };
}

test("over wss:// with ca (a PEM string or a Buffer) the client joins and talks; without it the certificate is refused", async (t) => {
  const { ca, wss } = await tlsGateway(t);
  const pod = podName("tls");
  const bob = await connect(wss, { pod, participant: "bob", ca: ca.caPEM, reconnect: false });
  t.after(() => bob.close());
  const alice = await connect(`${wss}/ws`, { pod, participant: "alice", ca: readFileSync(ca.caFile), reconnect: false });
  t.after(() => alice.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");
  await alice.send({ kind: "chat", payload: { text: "over TLS" } });
  const got = await r.envelope();
  assert.deepEqual([got.from, got.kind, got.payload], ["alice", "chat", { text: "over TLS" }]);

  await assert.rejects(connect(wss, { pod, participant: "eve", reconnect: false }), (err: unknown) => {
    assert.ok(err instanceof DisconnectedError, String(err));
    assert.match(err.message, /certificate/);
    return true;
  });
  // Another CA is no better than none.
  await assert.rejects(connect(wss, { pod, participant: "eve", reconnect: false, ca: makeCA().caPEM }), /certificate/);
  // Plain ws:// on the TLS port is not served.
  await assert.rejects(connect(wss.replace("wss:", "ws:"), { pod, participant: "eve", reconnect: false, timeoutMs: 5_000 }));
  assert.ok(!((await r.quiet(200)) instanceof Reconnected));
});

test("publish over https:// with ca reaches the pod; without it the certificate is refused", async (t) => {
  const { ca, wss, https } = await tlsGateway(t);
  const pod = podName("tls");
  const bob = await connect(wss, { pod, participant: "bob", ca: ca.caPEM });
  t.after(() => bob.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");

  const [one] = await publish(https, { pod, participant: "ci", ca: ca.caPEM }, { kind: "chat", payload: { text: "posted" } });
  assert.ok(one !== undefined && one.error === undefined, JSON.stringify(one));
  const got = await r.envelope();
  assert.deepEqual([got.from, got.payload], ["ci", { text: "posted" }]);
  // The wss:// URL and a Buffer do too.
  const [two] = await publish(wss, { pod, participant: "ci", ca: readFileSync(ca.caFile) }, { kind: "chat", payload: 2 });
  assert.ok(two !== undefined && two.error === undefined, JSON.stringify(two));

  await assert.rejects(publish(https, { pod, participant: "ci" }, { kind: "chat" }), (err: unknown) => {
    assert.ok(err instanceof DisconnectedError, String(err));
    assert.match(err.message, /certificate/);
    return true;
  });
  await assert.rejects(publish(https, { pod, participant: "ci", ca: makeCA().caPEM }, { kind: "chat" }), /certificate/);
});

test("NODE_EXTRA_CA_CERTS: a Node process started with the CA in it trusts the gateway without ca", async (t) => {
  const { ca, wss, https } = await tlsGateway(t);
  const pod = podName("tls");
  const index = pathToFileURL(join(packageDir, "dist", "index.js")).href;
  const script = `
    import { connect, publish } from ${JSON.stringify(index)};
    const c = await connect(${JSON.stringify(wss)}, { pod: ${JSON.stringify(pod)}, participant: "extra", reconnect: false });
    const [r] = await publish(${JSON.stringify(https)}, { pod: ${JSON.stringify(pod)}, participant: "extra" }, { kind: "chat" });
    await c.close();
    console.log(c.welcome.you.id, r.error ?? "published");
  `;
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env["NODE_EXTRA_CA_CERTS"];
  const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], { env: { ...env, NODE_EXTRA_CA_CERTS: ca.caFile }, timeout: 30_000 });
  assert.equal(stdout.trim(), "extra published");

  // The same process without it refuses the certificate.
  await assert.rejects(run(process.execPath, ["--input-type=module", "-e", script], { env, timeout: 30_000 }), /certificate/);
});

test("ca is for Node's ws connections: with a standard WebSocket it is a TypeError", async () => {
  const ca = makeCA();
  const NoSocket = class {
    constructor() {
      throw new Error("never constructed");
    }
  } as unknown as new (url: string) => never;
  await assert.rejects(connect("wss://127.0.0.1:1", { pod: "lab", ca: ca.caPEM, WebSocket: NoSocket }), TypeError);
  await assert.rejects(connect("wss://127.0.0.1:1", { pod: "lab", ca: 42 as unknown as string }), TypeError);
});
