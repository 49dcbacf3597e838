// Two agents reason together in a sub-context and conclude it; a third
// participant, who follows only the main conversation and conclusions,
// sees the conclusion and not the steps.
//
//   node examples/reasoning.mjs [ws://127.0.0.1:8080]    (or MCPP_GATEWAY_URL)

import { connect, Reconnected } from "@mcpp/client";

const url = process.argv[2] ?? process.env.MCPP_GATEWAY_URL ?? "ws://127.0.0.1:8080";
const pod = `example-${Date.now().toString(36)}`;

const alice = await connect(url, { pod, participant: "alice" });
const bob = await connect(url, { pod, participant: "bob" });
const lead = await connect(url, { pod, participant: "lead", filter: { contexts: "none", conclusions: true } });

// alice opens a reasoning context; bob answers in it; alice concludes it.
const ctx = await alice.branch("reasoning", { payload: { description: "which cache can we drop?" } });
await alice.send({ kind: "reasoning/step", context: ctx, payload: { text: "the CDN serves 80% of reads" } });
for await (const env of bob) {
  if (env instanceof Reconnected) continue;
  if (env.kind === "reasoning/step" && env.from === "alice") {
    console.log(`bob reads ${env.from}'s step: ${JSON.stringify(env.payload)}`);
    await bob.send({ kind: "reasoning/step", context: { id: ctx.id }, payload: { text: "the query cache and Redis hold the same rows" } });
    break;
  }
}
for await (const env of alice) {
  if (env instanceof Reconnected) continue;
  if (env.kind === "reasoning/step" && env.from === "bob") {
    console.log(`alice reads ${env.from}'s step: ${JSON.stringify(env.payload)}`);
    await alice.conclude(ctx.id, "drop the query cache");
    break;
  }
}

// The lead saw neither step: only the conclusion, and the context's statistics.
for await (const env of lead) {
  if (env instanceof Reconnected || env.kind === "system/welcome" || env.kind === "system/presence") continue;
  if (env.kind === "conclusion") {
    console.log(`lead reads the conclusion of ${env.from}: ${JSON.stringify(env.payload)}`);
  } else if (env.kind === "system/context") {
    const { reason, stats } = /** @type {{reason: string, stats: {messages: number, participants: string[]}}} */ (env.payload);
    console.log(`lead reads: context concluded (${reason}), ${stats.messages} messages from ${stats.participants.join(", ")}`);
    break;
  } else {
    throw new Error(`the lead's filter let through a ${env.kind}`);
  }
}

await Promise.all([alice.close(), bob.close(), lead.close()]);
