"""Sub-contexts (branch, conclude) and joining with the pod's history."""

from __future__ import annotations

import pytest
from conftest import Gateway
from helpers import next_envelope, next_item, next_of, take

import mcpp


async def test_branch_and_conclude(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice") as alice, mcpp.connect(
        gateway.url, pod=pod, participant="bob"
    ) as bob:
        task = await bob.branch("task")
        ctx = await bob.branch("reasoning", parent=task["id"], payload={"description": "compare the plans"})
        assert ctx["type"] == "reasoning" and ctx["parent"] == task["id"] and len(ctx["id"]) == 36
        await bob.send({"kind": "reasoning/step", "context": ctx, "payload": {"text": "B is cheaper"}})
        conclusion = await bob.conclude(ctx, {"summary": "plan B"})

        opened = await next_of(alice, "context/branch")
        assert opened.context == {"id": task["id"], "type": "task"}
        opened = await next_of(alice, "context/branch")
        assert opened.context == dict(ctx) and opened.payload == {"description": "compare the plans"}
        step = await next_of(alice, "reasoning/step")
        assert step.context_id == ctx["id"]
        concluded = await next_item(alice)
        assert isinstance(concluded, mcpp.Envelope)
        assert (concluded.kind, concluded.id, concluded.payload) == ("conclusion", conclusion, {"summary": "plan B"})
        event = await next_item(alice)  # the event follows the envelope that caused it
        assert isinstance(event, mcpp.Envelope) and event.kind == "system/context"
        assert event.context == {"id": ctx["id"], "type": "reasoning", "parent": task["id"]}
        assert event.payload["event"] == "concluded" and event.payload["reason"] == "conclusion"
        assert event.payload["stats"]["messages"] == 3 and event.payload["stats"]["participants"] == ["bob"]
        assert event.payload["stats"]["depth"] == 2

        [info] = (await alice.request("gateway/contexts", {"id": ctx["id"], "state": "all"})).payload["contexts"]
        assert info["state"] == "concluded" and info["creator"] == "bob"


@pytest.mark.parametrize("history", [10, "all"])
async def test_a_late_joiner_catches_up(gateway: Gateway, pod: str, history: int | str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="bob") as bob:
        for n in range(15):
            await bob.send({"kind": "tick", "id": f"t{n}"})
        await bob.request("gateway/contexts")  # all handled
    async with mcpp.connect(gateway.url, pod=pod, participant="carol", history=history) as carol:
        expect = 10 if history == 10 else 15
        assert carol.welcome["history"] == {"replayed": expect, "folded": 0, "collapsed": 0}
        assert (await next_envelope(carol)).kind == "system/welcome"
        got = [e.id for e in await take(carol, "tick", expect)]
        assert got == [f"t{n}" for n in range(15 - expect, 15)]


async def test_history_is_folded_unless_told(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="bob") as bob:
        ctx = await bob.branch("reasoning")
        await bob.send({"kind": "reasoning/step", "context": ctx})
        await bob.conclude(ctx, {"summary": "done"})
        await bob.request("gateway/contexts")
    async with mcpp.connect(gateway.url, pod=pod, participant="carol", history="all") as folded:
        assert folded.welcome["history"]["folded"] == 2  # the branch and the step
    async with mcpp.connect(gateway.url, pod=pod, participant="dave", history="all", fold=False) as whole:
        assert whole.welcome["history"] == {"replayed": 4, "folded": 0, "collapsed": 0}
