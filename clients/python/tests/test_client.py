"""Joining, sending, receiving and asking, against a real gateway."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import TOKENS, Gateway
from helpers import next_envelope, next_item, next_of, take

import mcpp


async def test_welcome(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice") as alice:
        assert alice.id == "alice"
        assert alice.welcome["you"] == {"id": "alice", "capabilities": ["*"]}
        assert alice.welcome["pod"] == pod
        assert alice.welcome["participants"] == []
        assert alice.welcome["limits"]["history"] == 10000
        first = await next_item(alice)
        assert isinstance(first, mcpp.Envelope)
        assert first.kind == "system/welcome" and first.from_ == "system:gateway"
        assert first.payload == alice.welcome  # the stream's first item is the welcome itself

        # /ws given or not, and http:// for ws://, reach the same pod.
        bob = await mcpp.connect(gateway.url + "/ws", pod=pod, participant="bob")
        try:
            assert [p["id"] for p in bob.welcome["participants"]] == ["alice"]
            joined = await next_of(alice, "system/presence")
            assert joined.payload == {"event": "join", "participant": {"id": "bob", "capabilities": ["*"]}}
        finally:
            await bob.close()
        left = await next_of(alice, "system/presence")
        assert left.payload["event"] == "leave" and left.payload["participant"]["id"] == "bob"

        async with mcpp.connect(gateway.http, pod=pod) as anonymous:
            assert anonymous.id.startswith("anon-")  # the gateway made one up


async def test_close_and_async_with(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice") as alice:
        await next_item(alice)  # the welcome
    # Left the pod: the stream ends, and nothing can be sent.
    with pytest.raises(mcpp.ClientClosedError):
        await alice.send({"kind": "chat"})
    with pytest.raises(mcpp.ClientClosedError):
        await alice.request("gateway/contexts")
    assert [item async for item in alice] == []
    await alice.close()  # twice is fine

    client = await mcpp.connect(gateway.url, pod=pod, participant="carol")
    async with client:  # a Client is its own context manager too
        assert client.id == "carol"
    with pytest.raises(mcpp.ClientClosedError):
        await client.send({"kind": "chat"})


async def test_send_with_and_without_id(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice") as alice, mcpp.connect(
        gateway.url, pod=pod, participant="bob"
    ) as bob:
        env = {"kind": "chat", "payload": {"text": "hello"}, "to": ["alice"]}
        filled = await bob.send(env)
        assert env["id"] == filled  # written into the envelope, so that sending it again carries it
        assert len(filled) == 36 and filled.count("-") == 4  # a UUID
        chosen = await bob.send({"id": "my-own-id", "kind": "note", "payload": [1, 2]})
        assert chosen == "my-own-id"

        first, second = await take(alice, "chat", 1) + await take(alice, "note", 1)
        assert (first.id, first.from_, first.to, first.payload) == (filled, "bob", ["alice"], {"text": "hello"})
        assert (second.id, second.payload) == ("my-own-id", [1, 2])
        assert first.protocol == "mcpp/v0.1" and first.ts  # filled in by the gateway

        # An Envelope from the stream is sent as it is; its id is now taken.
        again = dict(second)
        again.pop("from"), again.pop("ts"), again.pop("protocol")
        with pytest.raises(mcpp.GatewayError) as refused:
            await bob.send(again, confirm=True)
        assert refused.value.code == "duplicate_id" and refused.value.refused_id == "my-own-id"

        with pytest.raises(ValueError):
            await bob.send({"payload": {}})  # no kind
        with pytest.raises(TypeError):
            await bob.send("chat")  # type: ignore[arg-type]


async def test_requests_match_their_answers_while_envelopes_stream(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice") as alice, mcpp.connect(
        gateway.url, pod=pod, participant="bob"
    ) as bob:
        await bob.send({"kind": "chat", "id": "first", "context": {"id": "r1", "type": "reasoning"}})
        await next_of(alice, "chat")

        async def flood() -> None:
            for i in range(300):
                await bob.send({"kind": "tick", "payload": {"n": i}})

        flooding = asyncio.create_task(flood())
        contexts, history, filtered = await asyncio.gather(
            alice.request("gateway/contexts", {"state": "all"}),
            alice.request("gateway/history", {"context": "r1"}),
            alice.request("gateway/filter", {"exclude_types": ["noise"]}),
        )
        await flooding
        assert contexts.kind == "system/contexts" and contexts.to == ["alice"]
        assert [c["id"] for c in contexts.payload["contexts"]] == ["r1"]
        assert history.kind == "system/history"
        assert [e["id"] for e in history.payload["envelopes"]] == ["first"]
        assert filtered.kind == "system/filter" and filtered.payload["exclude_types"] == ["noise"]
        ids = {contexts.correlation_id, history.correlation_id, filtered.correlation_id}
        assert len(ids) == 3 and all(isinstance(i, str) for i in ids)

        # The ticks all came, in order, and the answers went to their
        # requests, not to the stream.
        got = []
        async with asyncio.timeout(20):
            async for item in alice:
                assert isinstance(item, mcpp.Envelope)
                assert item.kind not in ("system/contexts", "system/history", "system/filter"), item
                if item.kind == "tick":
                    got.append(item.payload["n"])
                    if len(got) == 300:
                        break
        assert got == list(range(300))

        # The filter is in effect: a context of an excluded type is not received.
        await bob.send({"kind": "note", "context": {"id": "n1", "type": "noise"}})
        await bob.send({"kind": "note", "id": "after-noise"})
        assert (await next_of(alice, "note")).id == "after-noise"


async def test_refused_requests_raise_the_gateways_code(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice") as alice:
        with pytest.raises(mcpp.GatewayError) as refused:
            await alice.request("gateway/history", {"limit": 0})
        assert refused.value.code == "invalid_envelope" and not refused.value.retryable
        assert refused.value.envelope is not None and refused.value.envelope.kind == "system/error"
        # A request the client does not know goes out as it is; the gateway answers.
        with pytest.raises(mcpp.GatewayError) as unknown:
            await alice.request("gateway/nope", {"x": 1})
        assert unknown.value.code == "unknown_request"
        with pytest.raises(mcpp.GatewayError) as bad_filter:
            await alice.request("gateway/filter", {"contexts": "sometimes"})
        assert bad_filter.value.code == "invalid_filter"
        with pytest.raises(ValueError):
            await alice.request("chat", {})
        # None of them reached the stream.
        assert (await next_envelope(alice)).kind == "system/welcome"
        with pytest.raises(TimeoutError):
            await next_item(alice, timeout=0.3)


async def test_a_refused_upgrade_is_a_typed_error(gateway: Gateway) -> None:
    with pytest.raises(mcpp.RefusedError) as refused:
        await mcpp.connect(gateway.url, pod="no spaces allowed", participant="alice")
    assert (refused.value.status, refused.value.code) == (400, "invalid_pod")
    assert "pod" in refused.value.message and not refused.value.temporary
    with pytest.raises(mcpp.RefusedError) as bad_id:
        await mcpp.connect(gateway.url, pod="lab", participant="has space")
    assert (bad_id.value.status, bad_id.value.code) == (400, "invalid_participant")
    with pytest.raises(mcpp.RefusedError) as bad_filter:
        await mcpp.connect(gateway.url, pod="lab", filter={"routing": "sideways"})
    assert (bad_filter.value.status, bad_filter.value.code) == (400, "invalid_filter")
    with pytest.raises(ValueError):
        mcpp.connect(gateway.url, pod="lab", filter={"contxts": "none"})  # a typo the gateway would ignore
    with pytest.raises(ValueError):
        mcpp.connect(gateway.url, pod="lab", history=-1)
    with pytest.raises(ValueError):
        mcpp.connect("tcp://127.0.0.1:1", pod="lab")


async def test_tokens(token_gateway: Gateway) -> None:
    with pytest.raises(mcpp.RefusedError) as refused:
        await mcpp.connect(token_gateway.url, pod="lab", token="wrong")
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")
    with pytest.raises(mcpp.RefusedError) as no_token:
        await mcpp.connect(token_gateway.url, pod="lab")
    assert (no_token.value.status, no_token.value.code) == (401, "unauthorized")
    with pytest.raises(mcpp.RefusedError) as forbidden:
        await mcpp.connect(token_gateway.url, pod="elsewhere", token="bot-token")
    assert (forbidden.value.status, forbidden.value.code) == (403, "forbidden")
    async with mcpp.connect(token_gateway.url, pod="lab-1", token="bot-token", participant="ignored") as bot:
        assert bot.id == "bot"  # the token names the participant
        assert bot.welcome["you"]["capabilities"] == TOKENS["bot-token"]["capabilities"]


async def test_a_system_error_is_a_typed_error(chat_gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(chat_gateway.url, pod=pod, participant="alice") as alice:
        with pytest.raises(mcpp.GatewayError) as refused:
            await alice.send({"id": "t1", "kind": "tool/call", "payload": {}})
        err = refused.value
        assert err.code == "capability_violation" and err.refused_id == "t1"
        assert err.payload["attempted_kind"] == "tool/call" and err.payload["your_capabilities"] == ["chat"]
        assert await alice.send({"kind": "chat"})  # allowed: returns its id

        # With confirm=False, send returns once written, and the refusal
        # comes in the stream, after the fact.
        assert await alice.send({"id": "t2", "kind": "tool/call"}, confirm=False) == "t2"
        env = await next_of(alice, "system/error")
        assert env.correlation_id == "t2"  # t1's refusal went to its send, not to the stream
        assert mcpp.GatewayError.from_envelope(env).code == "capability_violation"


async def test_sends_in_flight_together_share_one_fence(gateway: Gateway, pod: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each send is confirmed by the answer to a request written after it;
    the sends in flight together wait for the same one."""
    fences = 0
    real = mcpp.Client._fence_round_trip

    async def counted(self: mcpp.Client, conn: Any) -> None:
        nonlocal fences
        fences += 1
        await real(self, conn)

    monkeypatch.setattr(mcpp.Client, "_fence_round_trip", counted)
    async with mcpp.connect(gateway.url, pod=pod, participant="alice") as alice, mcpp.connect(
        gateway.url, pod=pod, participant="bob"
    ) as bob:
        ids = await asyncio.gather(*(alice.send({"kind": "tick", "payload": {"n": n}}) for n in range(100)))
        # The first fence may leave before the last sends are written;
        # those share the next. One fence a send would be 100.
        assert 1 <= fences <= 3, fences
        got = await take(bob, "tick", 100)
        assert [e.id for e in got] == list(ids) and [e.payload["n"] for e in got] == list(range(100))
        await alice.send({"kind": "tick"})
        assert fences <= 4


async def test_a_refused_fence_still_confirms(tight_gateway: Gateway, pod: str) -> None:
    """The fence takes a rate token like any message. When the gateway
    refuses the fence itself (rate_limited), that answer still comes after
    its judgement of the envelope before it: the send is confirmed."""
    async with mcpp.connect(tight_gateway.url, pod=pod, participant="alice") as alice, mcpp.connect(
        tight_gateway.url, pod=pod, participant="bob"
    ) as bob:
        assert await alice.send({"kind": "chat", "id": "a"}) == "a"  # tokens 1 and 2 of 3
        assert await alice.send({"kind": "chat", "id": "b"}) == "b"  # token 3; its fence is refused
        with pytest.raises(mcpp.GatewayError) as limited:
            await alice.send({"kind": "chat", "id": "c"})  # no token left
        assert limited.value.code == "rate_limited" and limited.value.refused_id == "c" and limited.value.retryable
        assert [e.id for e in await take(bob, "chat", 2)] == ["a", "b"]
        with pytest.raises(TimeoutError):
            await next_of(bob, "chat", timeout=0.3)
        # The refusals went to the sends (the fence's to nobody), not to the stream.
        assert (await next_envelope(alice)).kind == "system/welcome"
        with pytest.raises(TimeoutError):
            await next_of(alice, "system/error", timeout=0.3)


async def test_filter_takes_lists_and_the_wires_strings(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, filter={"contexts": "none", "types": ["reasoning", "plan"], "echo": True}) as a:
        f = a.welcome["filter"]
        assert (f["contexts"], f["types"], f["echo"]) == ("none", ["reasoning", "plan"], True)
    async with mcpp.connect(gateway.url, pod=pod, filter={"main": False, "ids": "r1,r2", "subtree": "1"}) as b:
        f = b.welcome["filter"]
        assert (f["main"], f["ids"], f["subtree"]) == (False, ["r1", "r2"], True)


async def test_batches_come_out_one_envelope_at_a_time(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice", filter={"batch": True}) as alice, mcpp.connect(
        gateway.url, pod=pod, participant="bob"
    ) as bob:
        assert alice.welcome["filter"]["batch"] is True
        for i in range(200):
            await bob.send({"kind": "tick", "payload": {"n": i}})
        got = [e.payload["n"] for e in await take(alice, "tick", 200)]
        assert got == list(range(200))


async def test_envelopes_are_dicts_that_read_as_attributes(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice", filter={"echo": True}) as alice:
        sent = {"kind": "note", "to": ["alice"], "correlation_id": ["a", "b"], "context": "task-1/plan", "x-extra": 7, "payload": None}
        await alice.send(sent)
        env = await next_of(alice, "note")
        assert isinstance(env, dict)
        assert env["from"] == env.from_ == "alice"
        assert env.correlation_id == ["a", "b"] and env.context == "task-1/plan" and env.context_id == "task-1/plan"
        assert env["x-extra"] == 7 and env.payload is None and env.lifecycle is None
        assert not env.is_system
        plain = env.to_dict()
        assert type(plain) is dict and plain == env
        assert json.loads(json.dumps(env)) == plain  # writes back as it came
