// What the tests share: a real gateway started on a free loopback port,
// a TCP proxy that cuts every connection through it at once, and readers
// of a client's stream with a deadline.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { TestContext } from "node:test";

import { Reconnected, type Client, type Envelope, type StreamItem } from "@mcpp/client";

/** The package's directory (clients/typescript). */
export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The repository's root, whose cmd/mcpp-gateway the tests build when MCPP_GATEWAY_BIN is not set. */
const repoRoot = resolve(packageDir, "..", "..");

let built: string | undefined;

/** The gateway binary: MCPP_GATEWAY_BIN, or one built from the repository (once per process). */
export function gatewayBinary(): string {
  const bin = process.env["MCPP_GATEWAY_BIN"];
  if (bin) return bin;
  if (built === undefined) {
    const out = join(mkdtempSync(join(tmpdir(), "mcpp-ts-")), "mcpp-gateway");
    execFileSync("go", ["build", "-o", out, "./cmd/mcpp-gateway"], { cwd: repoRoot, stdio: "inherit" });
    built = out;
  }
  return built;
}

/** A gateway the test started. */
export interface Gateway {
  /** ws://127.0.0.1:PORT */
  ws: string;
  /** http://127.0.0.1:PORT */
  http: string;
  port: number;
  /** What the gateway logged, for a failure's message. */
  log(): string;
  /** Sends the gateway process a signal (SIGHUP: read the token file again). */
  signal(sig: NodeJS.Signals): void;
}

/**
 * Starts a gateway with args (flags of mcpp-gateway) and env (variables
 * besides this process's) on a free loopback port, and stops it when the
 * test ends.
 */
export async function startGateway(t: TestContext, args: string[] = [], env: Record<string, string> = {}): Promise<Gateway> {
  const child = spawn(gatewayBinary(), ["--listen", "127.0.0.1:0", ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  t.after(() => stop(child));
  let output = "";
  const port = await new Promise<number>((resolvePort, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway did not say where it listens within 30 s:\n${output}`)), 30_000);
    const read = (chunk: Buffer) => {
      output += chunk.toString("utf8");
      const m = /msg="mcpp-gateway listening" addr=127\.0\.0\.1:(\d+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolvePort(Number(m[1]));
      }
    };
    child.stdout?.on("data", read);
    child.stderr?.on("data", read);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the gateway exited (${code}) before listening:\n${output}`));
    });
  });
  return { ws: `ws://127.0.0.1:${port}`, http: `http://127.0.0.1:${port}`, port, log: () => output, signal: (sig) => child.kill(sig) };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGKILL");
  await exited;
}

/** An entry of a token file. */
export interface TokenEntry {
  token: string;
  participant: string;
  capabilities: string[];
  pods: string[];
}

/** Writes a token file for --tokens (at path, or a new one) and returns its path. */
export function tokenFile(tokens: TokenEntry[], path = join(mkdtempSync(join(tmpdir(), "mcpp-ts-tokens-")), "tokens.json")): string {
  writeFileSync(path, JSON.stringify({ tokens }), { mode: 0o600 });
  return path;
}

/** Writes an HS256 secret for --jwt-secret-file (at least 32 bytes) and returns its path. */
export function secretFile(secret: string): string {
  const path = join(mkdtempSync(join(tmpdir(), "mcpp-ts-secret-")), "secret");
  writeFileSync(path, secret, { mode: 0o600 });
  return path;
}

/**
 * A JWT signed with HS256 by secret (RFC 7519 with RFC 7515's compact
 * form, written by hand: header and claims in base64url JSON, then the
 * HMAC-SHA256 of the two).
 */
export function signHS256(secret: string, claims: Record<string, unknown>): string {
  const part = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const signed = `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}`;
  return `${signed}.${createHmac("sha256", secret).update(signed).digest("base64url")}`;
}

/** A pod name of its own for each test, so that no test sees another's history. */
export function podName(prefix = "pod"): string {
  return `${prefix}-${Math.random().toString(36).slice(2, 10)}`;
}

/**
 * A TCP proxy between clients and the gateway at port, written with
 * node:net: cut() destroys every connection through it at once, as a
 * network that fails would; it can also refuse new connections, or let
 * only the client's bytes through.
 */
export class Proxy {
  readonly port: number;
  /** Drops each new connection as soon as it comes. */
  refusing = false;
  /** Drops what the gateway writes: the client's writes get through, and no answer comes back. */
  muted = false;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  /** Connections it has taken, for the tests' checks. */
  accepted = 0;
  /** Connections that came, taken or refused. */
  connections = 0;
  /** The head of each upgrade request taken (request line and headers), in order: what the client presented. */
  readonly upgrades: string[] = [];

  private constructor(server: net.Server, port: number) {
    this.server = server;
    this.port = port;
  }

  static async start(t: TestContext, target: number): Promise<Proxy> {
    let proxy: Proxy | undefined;
    const server = net.createServer((client) => {
      const p = proxy as Proxy;
      p.connections++;
      if (p.refusing) {
        client.destroy();
        return;
      }
      p.accepted++;
      const upstream = net.connect(target, "127.0.0.1");
      for (const s of [client, upstream]) {
        p.sockets.add(s);
        s.on("close", () => p.sockets.delete(s));
        s.on("error", () => {}); // a cut shows as errors on both sides
      }
      let head = "";
      const readHead = (b: Buffer) => {
        head += b.toString("latin1");
        const end = head.indexOf("\r\n\r\n");
        if (end < 0) return;
        client.off("data", readHead);
        p.upgrades.push(head.slice(0, end));
      };
      client.on("data", readHead);
      client.pipe(upstream);
      // Not a pipe: while muted, what the gateway writes is dropped.
      upstream.on("data", (b: Buffer) => {
        if (!p.muted) client.write(b);
      });
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    proxy = new Proxy(server, (server.address() as net.AddressInfo).port);
    t.after(() => proxy?.close());
    return proxy;
  }

  get ws(): string {
    return `ws://127.0.0.1:${this.port}`;
  }

  /** Destroys every connection through the proxy at once; it goes on taking new ones. */
  cut(): number {
    const n = this.sockets.size;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    return n;
  }

  close(): Promise<void> {
    this.cut();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** Reads a client's stream with deadlines. */
export class Reader {
  private readonly it: AsyncIterator<StreamItem>;
  private pending: Promise<IteratorResult<StreamItem>> | undefined;

  constructor(readonly client: Client) {
    this.it = client[Symbol.asyncIterator]();
  }

  /** The next item of the stream, failing after ms. */
  async next(ms = 10_000): Promise<StreamItem> {
    const r = await this.result(ms);
    if (r.done) throw new Error("the stream ended");
    return r.value;
  }

  /** The next result of the stream (done included), failing after ms. */
  async result(ms = 10_000): Promise<IteratorResult<StreamItem>> {
    this.pending ??= this.it.next();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`nothing in the stream within ${ms} ms`)), ms);
    });
    try {
      const r = await Promise.race([this.pending, deadline]);
      this.pending = undefined;
      return r;
    } catch (err) {
      if (!(err instanceof Error && err.message.startsWith("nothing in the stream"))) this.pending = undefined;
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The next envelope that is not presence (a Reconnected fails the test). */
  async envelope(ms = 10_000): Promise<Envelope> {
    for (;;) {
      const item = await this.next(ms);
      if (item instanceof Reconnected) throw new Error(`expected an envelope, got a Reconnected (resumed ${item.resumed})`);
      if (item.kind !== "system/presence") return item;
    }
  }

  /** The next envelope of this kind, skipping the others. */
  async kind(kind: string, ms = 10_000): Promise<Envelope> {
    for (;;) {
      const item = await this.next(ms);
      if (!(item instanceof Reconnected) && item.kind === kind) return item;
    }
  }

  /** Undefined when nothing but presence comes within ms; otherwise what came. */
  async quiet(ms: number): Promise<StreamItem | undefined> {
    const deadline = Date.now() + ms;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) return undefined;
      let item: StreamItem;
      try {
        item = await this.next(left);
      } catch (err) {
        if (err instanceof Error && err.message.startsWith("nothing in the stream")) return undefined;
        throw err;
      }
      if (item instanceof Reconnected || item.kind !== "system/presence") return item;
    }
  }
}

/** Resolves after ms. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
