"""A participant that joins late catches up with ``history``.

An agent works in the pod: a chat, a reasoning context it concludes, a
note. Then a late joiner connects with ``history="all"`` and reads the
pod's past, folded: the concluded context shows as its conclusion and its
``system/context`` event, its steps are left out (the welcome counts
them in ``history.folded``). Then it receives what comes live, with no
gap and no duplicate.

    python3 examples/late_joiner.py [ws://127.0.0.1:8080]   (or MCPP_URL)
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import mcpp


async def main(url: str, pod: str) -> None:
    async with mcpp.connect(url, pod=pod, participant="worker") as worker:
        await worker.send({"kind": "chat", "payload": {"text": "starting"}})
        ctx = await worker.branch("reasoning")
        for n in range(3):
            await worker.send({"kind": "reasoning/step", "context": ctx, "payload": {"n": n}})
        await worker.conclude(ctx, {"summary": "three steps, one answer"})
        await worker.send({"kind": "note", "payload": {"text": "done"}})
        await worker.request("gateway/contexts")  # the gateway has handled all of the above

        async with mcpp.connect(url, pod=pod, participant="late", history="all") as late:
            info = late.welcome["history"]
            print(f"replayed {info['replayed']}, folded {info['folded']}")
            await worker.send({"kind": "chat", "payload": {"text": "welcome, late"}})
            async for item in late:
                if not isinstance(item, mcpp.Envelope) or item.kind in ("system/welcome", "system/presence"):
                    continue
                print(f"{item.from_:>14}  {item.kind:<16} {item.payload}")
                if item.kind == "chat" and item.payload["text"] == "welcome, late":
                    break


if __name__ == "__main__":
    gateway = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MCPP_URL", "ws://127.0.0.1:8080")
    asyncio.run(main(gateway, f"example-{uuid.uuid4().hex[:8]}"))
