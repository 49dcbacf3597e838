// npm test: runs the compiled tests (build/test) with Node's test runner,
// against a gateway built once here unless MCPP_GATEWAY_BIN names one.

import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const packageDir = resolve(here, "..");
const env = { ...process.env };
let tmp;
if (!env.MCPP_GATEWAY_BIN) {
  tmp = mkdtempSync(join(tmpdir(), "mcpp-ts-gateway-"));
  env.MCPP_GATEWAY_BIN = join(tmp, "mcpp-gateway");
  console.log(`building the gateway: go build -o ${env.MCPP_GATEWAY_BIN} ./cmd/mcpp-gateway`);
  execFileSync("go", ["build", "-o", env.MCPP_GATEWAY_BIN, "./cmd/mcpp-gateway"], { cwd: resolve(packageDir, "..", ".."), stdio: "inherit" });
}
const testDir = join(packageDir, "build", "test");
const files = readdirSync(testDir).filter((f) => f.endsWith(".test.js")).sort().map((f) => join(testDir, f));
// Node's own standard WebSocket (what a browser has) is global from Node
// 22 on; Node 20 has it behind a flag, which the test files inherit.
const flags = typeof WebSocket === "undefined" && process.allowedNodeEnvironmentFlags.has("--experimental-websocket") ? ["--experimental-websocket"] : [];
const r = spawnSync(process.execPath, ["--test", "--test-concurrency=2", ...flags, ...process.argv.slice(2), ...files], { cwd: packageDir, env, stdio: "inherit" });
if (tmp) rmSync(tmp, { recursive: true, force: true });
process.exit(r.status ?? 1);
