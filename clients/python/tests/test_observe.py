"""observe: a connection that watches the pod without being present. It
receives what the pod's members receive, and nobody hears of it: no
presence event, no place in a welcome, before or after it reconnects.
Without the gateway/observe capability the gateway refuses it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Gateway
from helpers import CuttingProxy, next_item, next_of

import mcpp

TOKENS = [
    {"token": "watch-t", "participant": "watch", "capabilities": ["chat", "gateway/observe"], "pods": ["*"]},
    {"token": "alice-t", "participant": "alice", "capabilities": ["chat"], "pods": ["*"]},
    {"token": "bob-t", "participant": "bob", "capabilities": ["chat"], "pods": ["*"]},
    # May chat, and so may join visibly, but may not observe.
    {"token": "carol-t", "participant": "carol", "capabilities": ["chat"], "pods": ["*"]},
]


@pytest.fixture
def observe_gateway(gateway_bin: str, tmp_path: Path) -> Iterator[Gateway]:
    """A gateway with a token file (TOKENS) where watch alone may observe."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": TOKENS}))
    tokens.chmod(0o600)
    g = Gateway(gateway_bin, tmp_path / "gateway.log", "--tokens", str(tokens))
    yield g
    g.stop()


async def up_to(client: mcpp.Client, eid: str) -> list[mcpp.Envelope]:
    """What the client receives up to the envelope whose id is ``eid``
    (included)."""
    seen: list[mcpp.Envelope] = []
    while True:
        item = await next_item(client)
        assert isinstance(item, mcpp.Envelope), f"a present participant's connection stayed up: {item}"
        seen.append(item)
        if item.id == eid:
            return seen


def ids(welcome: dict[str, object]) -> list[str]:
    participants = welcome["participants"]
    assert isinstance(participants, list)
    return sorted(p["id"] for p in participants)


async def test_an_observer_is_never_announced_and_needs_the_capability(observe_gateway: Gateway, pod: str) -> None:
    gw = observe_gateway
    proxy = await CuttingProxy(gw.addr).start()
    try:
        alice = await mcpp.connect(gw.url, pod=pod, token="alice-t")
        async with alice:
            # Without the capability: refused, never turned into a visible join.
            with pytest.raises(mcpp.RefusedError) as refused:
                await mcpp.connect(gw.url, pod=pod, token="carol-t", observe=True)
            assert (refused.value.status, refused.value.code) == (403, "forbidden")

            watch = await mcpp.connect(proxy.url, pod=pod, token="watch-t", observe=True, min_delay=0.01, max_delay=0.05)
            async with watch:
                assert watch.id == "watch"
                assert ids(watch.welcome) == ["alice"]  # the observer's welcome lists the pod, not itself
                await alice.send({"id": "hello", "kind": "chat", "payload": {"text": "hi"}})
                assert (await next_of(watch, "chat")).id == "hello"

                bob = await mcpp.connect(gw.url, pod=pod, token="bob-t")
                async with bob:
                    assert ids(bob.welcome) == ["alice"]  # a later welcome does not list the observer

                    # Reconnected, it watches still: its new welcome does not
                    # list it, and nobody hears of it coming back.
                    assert proxy.cut() == 1
                    while True:
                        item = await next_item(watch)
                        if isinstance(item, mcpp.Reconnected):
                            assert item.resumed
                            assert ids(item.welcome) == ["alice", "bob"]
                            break
                    await alice.send({"id": "again", "kind": "chat", "payload": {"text": "still watching?"}})
                    assert (await next_of(watch, "chat")).id == "again"
                    await watch.close()

                    await bob.send({"id": "end-bob", "kind": "chat", "payload": {"text": "end"}})
                    await alice.send({"id": "end-alice", "kind": "chat", "payload": {"text": "end"}})
                    heard = await up_to(alice, "end-bob") + await up_to(bob, "end-alice")
                    assert any(e.kind == "system/presence" for e in heard)  # alice heard bob join: presence reaches her
                    for env in heard:
                        text = json.dumps(env)
                        assert '"watch"' not in text, f"heard of the observer: {text}"
                        assert '"carol"' not in text, f"heard of the refused observer: {text}"
    finally:
        await proxy.close()
