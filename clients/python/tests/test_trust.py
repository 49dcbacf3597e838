"""Who may do what, changed while the pod runs (issue 23): a fresh token
for a connection (refresh), a kick with a ban, capabilities granted and
revoked; and the close codes that end the client for good."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import JWT_SECRET, Gateway
from helpers import CuttingProxy, next_of, sign_hs256

import mcpp


async def sends(client: mcpp.Client, kind: str) -> bool:
    """Whether the gateway accepts an envelope of ``kind`` from client
    (True) or refuses it with capability_violation (False)."""
    try:
        await client.send({"kind": kind})
        return True
    except mcpp.GatewayError as err:
        assert err.code == "capability_violation", err
        return False


async def end_of(client: mcpp.Client, timeout: float) -> BaseException:
    """Reads the stream until it raises, and returns what it raised."""
    try:
        async with asyncio.timeout(timeout):
            async for _ in client:
                pass
    except mcpp.MCPPError as err:
        return err
    raise AssertionError("the stream ended without an error")


def rfc3339(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


async def test_refresh_extends_the_connection_past_exp(trust_gateway: Gateway, pod: str) -> None:
    proxy = await CuttingProxy(trust_gateway.addr).start()
    try:
        # Both first tokens expire 2 to 3 s from now (exp is in whole seconds).
        exp = int(time.time()) + 3
        old = sign_hs256(JWT_SECRET, {"sub": "alice", "exp": exp, "caps": ["chat"]})
        # alice's token in the URL's query, as a user may give it.
        alice = await mcpp.connect(f"{proxy.url}/ws?token={old}", pod=pod, min_delay=0.01, max_delay=0.05)
        bob = await mcpp.connect(
            proxy.url, pod=pod, token=sign_hs256(JWT_SECRET, {"sub": "bob", "exp": exp}), min_delay=0.01, max_delay=0.05
        )
        async with alice, bob:
            assert alice.id == "alice"
            assert not await sends(alice, "tool/run")  # the first token allows chat alone

            # A token of another participant is refused; the connection keeps its token.
            with pytest.raises(mcpp.GatewayError) as refused:
                await alice.refresh(sign_hs256(JWT_SECRET, {"sub": "mallory", "exp": exp + 3600}))
            assert refused.value.code == "auth_violation"
            fresh = sign_hs256(JWT_SECRET, {"sub": "alice", "exp": exp + 3600, "caps": ["chat", "tool/*"]})
            answer = await alice.refresh(fresh)
            assert answer["participant"] == "alice"
            assert answer["capabilities"] == ["chat", "tool/*"]
            assert rfc3339(answer["expires"]) >= exp + 3600
            assert await sends(alice, "tool/run")  # the fresh token's capabilities apply

            # bob, not refreshed, is closed with 4401 after exp, and stays out.
            ended = await end_of(bob, exp + 5 - time.time())
            assert isinstance(ended, mcpp.TokenExpiredError), ended
            assert (ended.code, ended.reason) == (4401, "token expired")
            assert time.time() >= exp  # closed after exp, not before
            with pytest.raises(mcpp.TokenExpiredError):
                await bob.send({"kind": "chat"})

            # alice is still there past the first token's exp.
            await asyncio.sleep(0.5)
            await alice.send({"kind": "chat", "payload": "still here"})

            # A reconnection presents the fresh token (the expired one would
            # be refused with 401), in the header, the URL's token dropped.
            dialed = proxy.accepted
            assert dialed == 2
            proxy.cut()
            while True:
                item = await asyncio.wait_for(anext(aiter(alice)), 10)
                if isinstance(item, mcpp.Reconnected):
                    assert isinstance(item.cause, mcpp.DisconnectedError), item.cause
                    assert item.welcome["you"]["id"] == "alice"
                    break
            await alice.send({"kind": "tool/run"})
            again = proxy.upgrades[dialed:]
            assert again
            for head in again:
                assert old not in head, head
                assert "token=" not in head.split("\r\n")[0], head
                assert f"\r\nauthorization: bearer {fresh.lower()}" in head.lower(), head
            await asyncio.sleep(0.2)
            assert proxy.accepted == dialed + len(again)  # bob did not come back
    finally:
        await proxy.close()


async def test_kick_with_a_ban(trust_gateway: Gateway, pod: str) -> None:
    proxy = await CuttingProxy(trust_gateway.addr).start()
    try:
        mod = await mcpp.connect(trust_gateway.url, pod=pod, token="mod-token")
        bob = await mcpp.connect(proxy.url, pod=pod, token="bob-token", min_delay=0.01, max_delay=0.05)
        async with mod, bob:
            # Kicking needs the gateway/kick capability.
            with pytest.raises(mcpp.GatewayError) as refused:
                await bob.kick("mod")
            assert refused.value.code == "capability_violation"
            with pytest.raises(mcpp.GatewayError) as refused:
                await mod.kick("bob", ban_ms=-1)
            assert refused.value.code == "invalid_envelope"

            before = time.time()
            answer = await mod.kick("bob", reason="looping", ban_ms=60_000)
            assert answer["participant"] == "bob" and answer["connections"] == 1
            assert rfc3339(answer["banned_until"]) >= before + 59

            ended = await end_of(bob, 5)
            assert isinstance(ended, mcpp.KickedError), ended
            assert (ended.code, ended.reason) == (4410, "kicked by mod: looping")
            with pytest.raises(mcpp.KickedError):
                await bob.send({"kind": "chat"})

            # Everyone saw it leave, with why.
            while True:
                env = await next_of(mod, "system/presence")
                if env.payload["event"] == "leave" and env.payload["participant"]["id"] == "bob":
                    assert env.payload["reason"] == "kicked by mod: looping"
                    break
            await asyncio.sleep(0.3)
            assert proxy.accepted == 1  # the kicked client did not dial again
            # The ban holds: a new client of bob's is refused.
            with pytest.raises(mcpp.RefusedError) as banned:
                await mcpp.connect(trust_gateway.url, pod=pod, token="bob-token")
            assert (banned.value.status, banned.value.code) == (403, "forbidden")
    finally:
        await proxy.close()


async def test_grant_then_revoke(trust_gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(trust_gateway.url, pod=pod, token="granter-token") as granter, mcpp.connect(
        trust_gateway.url, pod=pod, token="bob-token"
    ) as bob:
        assert not await sends(bob, "tool/run")  # not before the grant
        with pytest.raises(mcpp.GatewayError) as refused:
            await bob.grant("bob", ["*"])
        assert refused.value.code == "capability_violation"
        with pytest.raises(mcpp.GatewayError) as refused:
            await granter.grant("bob", ["tool/*"], context="no-such-context")
        assert refused.value.code == "invalid_context"
        with pytest.raises(ValueError):
            await granter.revoke("bob")  # neither grant_id nor capabilities

        granted = await granter.grant("bob", ["tool/*"], reason="to run the build")
        assert granted["event"] == "granted"
        assert (granted["recipient"], granted["grantor"], granted["capabilities"]) == ("bob", "granter", ["tool/*"])
        # bob receives the grant itself, from the granter.
        g = await next_of(bob, "capability/grant")
        assert (g.id, g.from_, g.to) == (granted["grant_id"], "granter", ["bob"])
        assert g.payload == {"recipient": "bob", "capabilities": ["tool/*"], "reason": "to run the build"}
        assert await sends(bob, "tool/run")  # the grant lets bob run tools

        # Only a grant in force can be revoked.
        with pytest.raises(mcpp.GatewayError) as refused:
            await granter.revoke("bob", grant_id="no-such-grant")
        assert refused.value.code == "invalid_envelope"
        revoked = await granter.revoke("bob", grant_id=granted["grant_id"], reason="done")
        assert (revoked["event"], revoked["grant_id"]) == ("revoked", granted["grant_id"])
        # bob is told, then may no longer run tools.
        while True:
            told = await next_of(bob, "system/capability")
            if told.payload["event"] == "revoked":
                assert told.payload["grant_id"] == granted["grant_id"]
                break
        assert not await sends(bob, "tool/run")
        assert await sends(bob, "chat")  # the token's own capabilities still hold


async def test_a_revoked_token_ends_the_client(gateway_bin: str, tmp_path: Path, pod: str) -> None:
    def write(*participants: str) -> None:
        entries = [{"token": f"{p}-t", "participant": p, "capabilities": ["chat"], "pods": ["*"]} for p in participants]
        tokens.write_text(json.dumps({"tokens": entries}))

    tokens = tmp_path / "tokens.json"
    write("alice", "bob")
    tokens.chmod(0o600)
    gw = Gateway(gateway_bin, tmp_path / "gateway.log", "--tokens", str(tokens))
    proxy = await CuttingProxy(gw.addr).start()
    try:
        alice = await mcpp.connect(gw.url, pod=pod, token="alice-t")
        bob = await mcpp.connect(proxy.url, pod=pod, token="bob-t", min_delay=0.01, max_delay=0.05)
        async with alice, bob:
            write("alice")
            gw.proc.send_signal(signal.SIGHUP)
            ended = await end_of(bob, 5)
            assert isinstance(ended, mcpp.RevokedError), ended
            assert (ended.code, ended.reason) == (4403, "revoked")
            await asyncio.sleep(0.3)
            assert proxy.accepted == 1  # the revoked client did not dial again
            await alice.send({"kind": "chat", "payload": "unaffected"})
    finally:
        await proxy.close()
        gw.stop()
