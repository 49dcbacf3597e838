"""Two agents reason together in a sub-context, then conclude it.

The planner opens a ``reasoning`` context, thinks out loud in it, the
critic answers in the same context, and the planner concludes it: every
participant whose filter admits the context then receives the conclusion
and a ``system/context`` event with its statistics.

    python3 examples/reasoning.py [ws://127.0.0.1:8080]   (or MCPP_URL)
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import mcpp


async def next_in(client: mcpp.Client, kind: str) -> mcpp.Envelope:
    """The next envelope of this kind (presence and the rest pass by)."""
    async for item in client:
        if isinstance(item, mcpp.Envelope) and item.kind == kind:
            return item
    raise RuntimeError(f"the client ended before a {kind}")


async def main(url: str, pod: str) -> None:
    async with mcpp.connect(url, pod=pod, participant="planner") as planner, mcpp.connect(
        url, pod=pod, participant="critic"
    ) as critic:
        ctx = await planner.branch("reasoning", payload={"description": "choose a plan"})
        await planner.send({"kind": "reasoning/step", "context": ctx, "payload": {"text": "A costs 10, B costs 7"}})

        step = await next_in(critic, "reasoning/step")
        print(f"critic read in {step.context_id}: {step.payload['text']}")
        await critic.send({"kind": "reasoning/step", "context": ctx, "to": ["planner"], "payload": {"text": "B, unless A is faster"}})

        reply = await next_in(planner, "reasoning/step")
        print(f"planner read from {reply.from_}: {reply.payload['text']}")
        await planner.conclude(ctx, {"summary": "plan B"})

        conclusion = await next_in(critic, "conclusion")
        event = await next_in(critic, "system/context")
        stats = event.payload["stats"]
        print(f"concluded: {conclusion.payload['summary']} ({event.payload['reason']}, {stats['messages']} messages from {', '.join(stats['participants'])})")


if __name__ == "__main__":
    gateway = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MCPP_URL", "ws://127.0.0.1:8080")
    asyncio.run(main(gateway, f"example-{uuid.uuid4().hex[:8]}"))
