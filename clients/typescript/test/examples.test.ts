// The examples run against a real gateway, so that they cannot rot.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { packageDir, startGateway } from "./gateway.js";

const run = promisify(execFile);

async function example(name: string, url: string, how: "argument" | "env"): Promise<string> {
  const args = [join(packageDir, "examples", name)];
  const env = { ...process.env };
  if (how === "argument") args.push(url);
  else env["MCPP_GATEWAY_URL"] = url;
  const { stdout } = await run(process.execPath, args, { cwd: packageDir, env, timeout: 30_000 });
  return stdout;
}

test("examples/reasoning.mjs: two agents reason in a sub-context and conclude it", async (t) => {
  const gw = await startGateway(t);
  const out = await example("reasoning.mjs", gw.ws, "argument");
  assert.deepEqual(out.trim().split("\n"), [
    `bob reads alice's step: {"text":"the CDN serves 80% of reads"}`,
    `alice reads bob's step: {"text":"the query cache and Redis hold the same rows"}`,
    `lead reads the conclusion of alice: {"summary":"drop the query cache"}`,
    `lead reads: context concluded (conclusion), 4 messages from alice, bob`,
  ]);
});

test("examples/late-joiner.mjs: a late joiner catches up with history, folded", async (t) => {
  const gw = await startGateway(t);
  const out = await example("late-joiner.mjs", gw.ws, "env");
  assert.deepEqual(out.trim().split("\n"), [
    "carol joins: 3 envelopes of history follow, 2 folded away",
    `carol reads alice chat: {"text":"which cache can we drop?"}`,
    `carol reads alice conclusion: {"summary":"drop the query cache"}`,
    "carol reads system:gateway system/context: context concluded",
    `carol reads alice chat: {"text":"carol, welcome"}`,
  ]);
});
