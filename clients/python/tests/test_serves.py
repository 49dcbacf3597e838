"""serves: a participant that answers MCP requests says so when it joins
(``serves=["mcp"]``), and its identity shows it to those present, to later
joiners, and again after it reconnects."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Gateway
from helpers import CuttingProxy, next_item, next_of

import mcpp


async def presence_of(client: mcpp.Client, event: str, participant: str) -> dict[str, Any]:
    """The identity in the client's next presence event of ``event`` about
    ``participant``."""
    while True:
        env = await next_of(client, "system/presence")
        if env.payload["event"] == event and env.payload["participant"]["id"] == participant:
            identity: dict[str, Any] = env.payload["participant"]
            return identity


async def test_serves_shows_in_presence_in_a_later_welcome_and_after_a_reconnection(gateway: Gateway, pod: str) -> None:
    proxy = await CuttingProxy(gateway.addr).start()
    try:
        alice = await mcpp.connect(gateway.url, pod=pod, participant="alice")
        files = await mcpp.connect(
            proxy.url, pod=pod, participant="files", serves=[mcpp.SERVES_MCP], min_delay=0.01, max_delay=0.05
        )
        async with alice, files:
            assert files.welcome["you"]["serves"] == ["mcp"]
            assert "serves" not in alice.welcome["you"]  # a plain participant carries none
            assert (await presence_of(alice, "join", "files"))["serves"] == ["mcp"]

            async with mcpp.connect(gateway.url, pod=pod, participant="carol") as carol:
                listed = {p["id"]: p for p in carol.welcome["participants"]}
                assert sorted(listed) == ["alice", "files"]
                assert listed["files"]["serves"] == ["mcp"]
                assert "serves" not in listed["alice"]

            # The reconnection says so again: the new welcome, and the join
            # the others see, still carry serves.
            assert proxy.cut() == 1
            while True:
                item = await next_item(files)
                if isinstance(item, mcpp.Reconnected):
                    assert item.welcome["you"]["serves"] == ["mcp"]
                    break
            assert (await presence_of(alice, "join", "files"))["serves"] == ["mcp"]  # after the reconnection
    finally:
        await proxy.close()


async def test_serves_must_be_a_list_and_the_gateway_judges_its_values(gateway: Gateway, pod: str) -> None:
    with pytest.raises(ValueError):
        mcpp.connect(gateway.url, pod=pod, participant="files", serves="mcp")
    with pytest.raises(ValueError):
        mcpp.connect(gateway.url, pod=pod, participant="files", observe="1")  # type: ignore[arg-type]
    with pytest.raises(mcpp.RefusedError) as refused:
        await mcpp.connect(gateway.url, pod=pod, participant="files", serves=["tools"])
    assert (refused.value.status, refused.value.code) == (400, "invalid_filter")
