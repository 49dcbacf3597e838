// A participant that joins late catches up with `history`: the last
// envelopes of the pod, folded (a concluded context shows only its
// conclusion), then live ones.
//
//   node examples/late-joiner.mjs [ws://127.0.0.1:8080]    (or MCPP_GATEWAY_URL)

import { connect, Reconnected } from "@mcpp/client";

const url = process.argv[2] ?? process.env.MCPP_GATEWAY_URL ?? "ws://127.0.0.1:8080";
const pod = `example-${Date.now().toString(36)}`;

// alice works alone for a while: a question, a reasoning context, its conclusion.
const alice = await connect(url, { pod, participant: "alice" });
await alice.send({ kind: "chat", payload: { text: "which cache can we drop?" } });
const ctx = await alice.branch("reasoning");
await alice.send({ kind: "reasoning/step", context: ctx, payload: { text: "the CDN serves 80% of reads" } });
await alice.conclude(ctx.id, "drop the query cache");

// carol joins later, asking for the last 10 envelopes.
const carol = await connect(url, { pod, participant: "carol", history: 10 });
const { replayed, folded } = carol.welcome.history ?? { replayed: 0, folded: 0 };
console.log(`carol joins: ${replayed} envelopes of history follow, ${folded} folded away`);
await alice.send({ kind: "chat", payload: { text: "carol, welcome" } });

for await (const env of carol) {
  if (env instanceof Reconnected || env.kind === "system/welcome") continue;
  const what = env.kind === "system/context" ? "context concluded" : JSON.stringify(env.payload);
  console.log(`carol reads ${env.from} ${env.kind}: ${what}`);
  if (env.kind === "chat" && /** @type {{text: string}} */ (env.payload).text === "carol, welcome") break;
}
await Promise.all([alice.close(), carol.close()]);
