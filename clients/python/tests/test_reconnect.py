"""Lost connections: the client reconnects and resumes, so that its user
sees every envelope once and in order, and is told when it could not."""

from __future__ import annotations

import asyncio

import pytest
from conftest import Gateway
from helpers import CuttingProxy, next_envelope, next_item, next_of, take

import mcpp


async def test_a_cut_in_the_middle_of_a_burst_loses_nothing(gateway: Gateway, pod: str) -> None:
    total = 2000
    proxy = await CuttingProxy(gateway.addr).start()
    try:
        async with mcpp.connect(proxy.url, pod=pod, participant="alice") as alice, mcpp.connect(
            gateway.url, pod=pod, participant="bob"
        ) as bob:
            # A filter set by request is kept across the reconnection.
            await alice.request("gateway/filter", {"exclude_types": ["noise"]})
            received: list[int] = []
            reconnections: list[mcpp.Reconnected] = []
            sent = 0
            sent_at_cut: list[int] = []

            async def send_burst() -> None:
                nonlocal sent
                for n in range(total):
                    # Unconfirmed: a burst, not one round trip an envelope.
                    await bob.send({"kind": "tick", "payload": {"n": n}}, confirm=False)
                    sent += 1
                    if n % 10 == 9:
                        await asyncio.sleep(0.001)  # a burst, not a single write: the cut falls inside it

            async def receive() -> None:
                async for item in alice:
                    if isinstance(item, mcpp.Reconnected):
                        reconnections.append(item)
                    elif item.kind == "tick":
                        received.append(item.payload["n"])
                        if len(received) % 10 == 0:
                            await asyncio.sleep(0.002)  # slower than bob: envelopes are on their way at the cut
                        if len(received) == 300:
                            assert proxy.cut() == 1  # alice's connection, all at once
                            sent_at_cut.append(sent)
                        if len(received) == total:
                            return

            async with asyncio.timeout(60):
                await asyncio.gather(send_burst(), receive())

            print(f"bob had sent {sent_at_cut[0]} of {total} when alice, at 300, was cut; {len(reconnections)} reconnection(s)")
            assert 300 < sent_at_cut[0] < total  # cut in the middle of the burst, envelopes on their way
            assert received == list(range(total))  # every envelope, once, in order
            assert reconnections and all(r.resumed and not r.gap for r in reconnections), reconnections
            assert isinstance(reconnections[0].cause, mcpp.DisconnectedError)  # no close frame: a cut
            assert reconnections[0].resumed_after is not None
            assert reconnections[0].welcome["history"]["replayed"] > 0  # what was missed came from the history
            assert proxy.accepted == 1 + len(reconnections)
            assert alice.welcome["filter"]["exclude_types"] == ["noise"]  # the new connection's
            assert (await alice.request("gateway/contexts")).kind == "system/contexts"
    finally:
        await proxy.close()


async def test_sends_and_requests_wait_for_the_reconnection(gateway: Gateway, pod: str) -> None:
    proxy = await CuttingProxy(gateway.addr).start()
    try:
        async with mcpp.connect(proxy.url, pod=pod, participant="alice", min_delay=0.2) as alice, mcpp.connect(
            gateway.url, pod=pod, participant="bob"
        ) as bob:
            await alice.send({"kind": "chat", "id": "before"})
            assert (await next_of(bob, "chat")).id == "before"
            proxy.hold = True
            proxy.cut()
            await asyncio.sleep(0.5)  # alice's dials are dropped meanwhile
            proxy.hold = False
            sent = asyncio.create_task(alice.send({"kind": "chat", "id": "after"}))
            answer = await alice.request("gateway/contexts", {"state": "all"})
            assert answer.kind == "system/contexts"
            await sent
            assert (await next_of(bob, "chat")).id == "after"
            reconnected = await next_of_type(alice, mcpp.Reconnected)
            # alice had received no envelope of the pod to resume after.
            assert reconnected.gap and reconnected.resumed_after is None and reconnected.attempts >= 2
            assert reconnected.welcome == alice.welcome
    finally:
        await proxy.close()


async def next_of_type(client: mcpp.Client, cls: type[mcpp.Reconnected]) -> mcpp.Reconnected:
    async with asyncio.timeout(10):
        async for item in client:
            if isinstance(item, cls):
                return item
    raise AssertionError("the stream ended")


async def test_sends_the_gateway_took_but_never_confirmed_are_written_again(gateway: Gateway, pod: str) -> None:
    """The connection is lost after the gateway took the envelopes, before
    their confirmation came: they are written again on the next
    connection, and the gateway's duplicate_id says the first copy got
    through. Each is relayed once, and each send returns its id."""
    proxy = await CuttingProxy(gateway.addr).start()
    try:
        async with mcpp.connect(proxy.url, pod=pod, participant="alice", min_delay=0.01) as alice, mcpp.connect(
            gateway.url, pod=pod, participant="bob"
        ) as bob:
            proxy.muted = True
            sends = asyncio.gather(*(alice.send({"id": f"d-{n}", "kind": "count", "payload": n}) for n in range(50)))
            assert [e.id for e in await take(bob, "count", 50)] == [f"d-{n}" for n in range(50)]
            proxy.cut()
            proxy.muted = False
            async with asyncio.timeout(10):
                assert await sends == [f"d-{n}" for n in range(50)]
            with pytest.raises(TimeoutError):
                await next_of(bob, "count", timeout=0.3)  # relayed once
            # The duplicate_id answers went to the sends, not to the stream.
            assert not [e for e in await drain(alice) if isinstance(e, mcpp.Envelope) and e.kind == "system/error"]
    finally:
        await proxy.close()


async def drain(client: mcpp.Client, quiet: float = 0.3) -> list[mcpp.Envelope | mcpp.Reconnected]:
    """Everything in the client's stream until it is quiet for ``quiet`` seconds."""
    out: list[mcpp.Envelope | mcpp.Reconnected] = []
    while True:
        try:
            out.append(await next_item(client, quiet))
        except TimeoutError:
            return out


async def test_without_history_an_unconfirmed_send_is_not_written_again(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory, pod: str) -> None:
    """Without history the gateway cannot recognise a second copy, so a
    send whose connection is lost before its confirmation raises
    DisconnectedError rather than risk relaying it twice."""
    gw = Gateway(gateway_bin, tmp_path_factory.mktemp("nohistory") / "gateway.log", "--history", "0")
    proxy = await CuttingProxy(gw.addr).start()
    try:
        async with mcpp.connect(proxy.url, pod=pod, participant="alice", min_delay=0.01) as alice:
            proxy.muted = True
            sent = asyncio.create_task(alice.send({"kind": "chat", "payload": 1}))
            await asyncio.sleep(0.1)
            proxy.cut()
            with pytest.raises(mcpp.DisconnectedError, match="may or may not have been relayed.*no history"):
                await asyncio.wait_for(sent, 10)
            # The client itself goes on, on its next connection.
            proxy.muted = False
            assert await alice.send({"kind": "chat", "payload": 2})
    finally:
        await proxy.close()
        gw.stop()


async def test_a_gap_is_told(short_history_gateway: Gateway, pod: str) -> None:
    """When the envelope to resume after has left the history, the stream
    says so with Reconnected(resumed=False), and goes on."""
    gw = short_history_gateway
    proxy = await CuttingProxy(gw.addr).start()
    try:
        async with mcpp.connect(proxy.url, pod=pod, participant="alice") as alice, mcpp.connect(
            gw.url, pod=pod, participant="bob"
        ) as bob:
            await bob.send({"kind": "tick", "id": "t0"})
            assert (await next_of(alice, "tick")).id == "t0"
            proxy.hold = True
            proxy.cut()
            for n in range(1, 11):  # the history keeps 5: t0 falls out
                await bob.send({"kind": "tick", "id": f"t{n}"})
            await bob.request("gateway/contexts")  # every tick handled before alice returns
            proxy.hold = False
            reconnected = await next_of_type(alice, mcpp.Reconnected)
            assert not reconnected.resumed and reconnected.gap and reconnected.resumed_after == "t0"
            assert reconnected.welcome["history"] == {"resumed": False, "replayed": 0}
            await bob.send({"kind": "tick", "id": "t11"})
            assert (await next_of(alice, "tick")).id == "t11"  # live again
    finally:
        await proxy.close()


async def test_resume_and_a_resume_that_finds_nothing(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="bob") as bob:
        for n in range(10):
            await bob.send({"kind": "tick", "id": f"t{n}", "payload": {"n": n}})
        await bob.request("gateway/contexts")
    async with mcpp.connect(gateway.url, pod=pod, participant="alice", resume="t6") as alice:
        assert alice.welcome["history"] == {"resumed": True, "replayed": 3}
        assert [e.id for e in await take(alice, "tick", 3)] == ["t7", "t8", "t9"]
    async with mcpp.connect(gateway.url, pod=pod, participant="alice", resume="no-such-id") as again:
        # The user is told: the welcome says the gateway could not resume.
        assert again.welcome["history"]["resumed"] is False
        assert (await next_envelope(again)).kind == "system/welcome"
        with pytest.raises(TimeoutError):
            await next_of(again, "tick", timeout=0.3)


async def test_replaced_ends_the_client_without_a_fight(gateway: Gateway, pod: str) -> None:
    """4000: another connection took the participant id. The old client
    ends with ClosedError(4000) and does not reconnect, or the two would
    replace each other forever."""
    first = await mcpp.connect(gateway.url, pod=pod, participant="alice")
    try:
        async with mcpp.connect(gateway.url, pod=pod, participant="alice") as second, mcpp.connect(
            gateway.url, pod=pod, participant="bob"
        ) as bob:
            with pytest.raises(mcpp.ClosedError) as closed:
                async with asyncio.timeout(10):
                    async for _ in first:
                        pass
            assert closed.value.code == mcpp.CLOSE_REPLACED and closed.value.replaced
            with pytest.raises(mcpp.ClosedError):
                await first.send({"kind": "chat"})
            await asyncio.sleep(1)  # were first to reconnect, second would be replaced now
            await bob.send({"kind": "chat", "id": "still-here"})
            assert (await next_of(second, "chat")).id == "still-here"
            with pytest.raises(TimeoutError):
                await next_of(second, "system/welcome", timeout=0.5)  # no replacement of its own
    finally:
        await first.close()


async def test_without_reconnect_a_cut_ends_the_client(gateway: Gateway, pod: str) -> None:
    proxy = await CuttingProxy(gateway.addr).start()
    try:
        async with mcpp.connect(proxy.url, pod=pod, participant="alice", reconnect=False) as alice:
            assert (await next_envelope(alice)).kind == "system/welcome"
            proxy.cut()
            with pytest.raises(mcpp.DisconnectedError):
                await next_item(alice)
            with pytest.raises(mcpp.DisconnectedError):
                await alice.request("gateway/contexts")
    finally:
        await proxy.close()


async def test_giving_up_after_max_attempts(gateway: Gateway, pod: str) -> None:
    proxy = await CuttingProxy(gateway.addr).start()
    try:
        async with mcpp.connect(proxy.url, pod=pod, participant="alice", max_attempts=3, min_delay=0.01, max_delay=0.05) as alice:
            await next_item(alice)
            proxy.hold = True
            proxy.cut()
            with pytest.raises(mcpp.DisconnectedError) as gave_up:
                await next_item(alice)
            assert "after 3 attempts" in str(gave_up.value)
    finally:
        await proxy.close()
