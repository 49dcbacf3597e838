"""The conformance driver (conformance/driver.py) speaks its line protocol
against a real gateway: one answer a request, in order, each error typed."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

from conftest import PACKAGE, PYTHON, Gateway, python_env
from helpers import CuttingProxy

import mcpp


def drive(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lines = "".join(json.dumps(r) + "\n" for r in requests) + "not json\n"
    out = subprocess.run(
        [PYTHON, str(PACKAGE / "conformance" / "driver.py")],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        env=python_env(PYTHONPATH=""),  # the driver finds mcpp in this checkout by itself
        check=True,
    )
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(answers) == len(requests) + 1, out.stderr
    assert answers[-1] == {"ok": False, "error": {"type": "usage", "message": answers[-1]["error"]["message"]}}
    return answers[:-1]


def test_the_driver_speaks_its_protocol(gateway: Gateway, chat_gateway: Gateway, pod: str) -> None:
    a = drive(
        [
            {"op": "send", "envelope": {"kind": "chat"}},  # no client yet
            {"op": "connect", "url": gateway.url, "options": {"pod": "bad pod"}},
            {"op": "connect", "url": gateway.url, "options": {"pod": pod, "participant": "alice", "filter": {"echo": True}}},
            {"op": "next", "timeout_ms": 2000},
            {"op": "send", "envelope": {"kind": "chat", "id": "c1", "payload": {"text": "hi"}}},
            {"op": "next", "timeout_ms": 2000},
            {"op": "request", "kind": "gateway/history", "payload": {"limit": 0}},
            {"op": "request", "kind": "gateway/contexts", "payload": {"state": "all"}},
            {"op": "branch", "type": "reasoning", "payload": {"description": "why"}},
            {"op": "next", "timeout_ms": 2000},
            {"op": "next", "timeout_ms": 200},
            {"op": "publish", "url": gateway.http, "pod": pod, "participant": "ci", "envelopes": [{"kind": "note"}, {"kind": "system/x"}]},
            {"op": "publish", "url": gateway.http, "pod": pod, "envelopes": [{"kind": "note"}]},
            {"op": "close"},
            {"op": "connect", "url": chat_gateway.url, "options": {"pod": pod, "participant": "alice", "history": "all", "resume": "nope"}},
            {"op": "send", "envelope": {"kind": "tool/call", "id": "t1"}},
            {"op": "send", "envelope": {"kind": "tool/call", "id": "t2"}, "confirm": False},
            {"op": "next", "timeout_ms": 2000},
            {"op": "next", "timeout_ms": 2000},
            {"op": "send", "envelope": {"kind": "chat"}, "confirm": "no"},
            {"op": "fly"},
        ]
    )
    assert a[0]["ok"] is False and a[0]["error"]["type"] == "usage"
    assert a[1] == {"ok": False, "error": {"type": "refused", "status": 400, "code": "invalid_pod", "message": a[1]["error"]["message"]}}
    assert a[2]["ok"] is True and a[2]["welcome"]["you"]["id"] == "alice"
    assert a[3]["envelope"]["kind"] == "system/welcome"
    assert a[4] == {"ok": True, "id": "c1"}
    assert a[5]["envelope"]["id"] == "c1" and a[5]["envelope"]["from"] == "alice"
    assert a[6]["ok"] is False and a[6]["error"]["type"] == "gateway" and a[6]["error"]["code"] == "invalid_envelope"
    assert a[7]["answer"]["kind"] == "system/contexts"
    ctx = a[8]["context"]
    assert ctx["type"] == "reasoning" and "parent" not in ctx
    assert a[9]["envelope"]["kind"] == "context/branch" and a[9]["envelope"]["context"] == ctx
    assert a[10] == {"ok": False, "error": {"type": "timeout", "message": a[10]["error"]["message"]}}
    results = a[11]["results"]
    assert "id" in results[0] and results[1]["error"] == "reserved_kind"
    assert a[12]["error"]["type"] == "refused" and a[12]["error"]["code"] == "invalid_participant"
    assert a[13] == {"ok": True}
    assert a[14]["welcome"]["history"]["resumed"] is False
    # Confirmed (the default), the refusal is the send's error; with
    # confirm false, an envelope of the stream.
    assert a[15]["ok"] is False and (a[15]["error"]["type"], a[15]["error"]["code"]) == ("gateway", "capability_violation")
    assert a[16] == {"ok": True, "id": "t2"}
    assert a[17]["envelope"]["kind"] == "system/welcome"
    refusal = a[18]["envelope"]
    assert (refusal["kind"], refusal["correlation_id"], refusal["payload"]["error"]) == ("system/error", "t2", "capability_violation")
    assert a[19]["error"]["type"] == "usage"
    assert a[20]["error"]["type"] == "usage"


async def test_the_driver_tells_reconnections_and_closes(gateway: Gateway, pod: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        PYTHON,
        str(PACKAGE / "conformance" / "driver.py"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=python_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def ask(req: dict[str, Any]) -> dict[str, Any]:
        stdin.write((json.dumps(req) + "\n").encode())
        await stdin.drain()
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(stdout.readline(), 15))
        return answer

    proxy = await CuttingProxy(gateway.addr).start()
    try:
        assert (await ask({"op": "connect", "url": proxy.url, "options": {"pod": pod, "participant": "alice"}}))["ok"] is True
        assert (await ask({"op": "next", "timeout_ms": 2000}))["envelope"]["kind"] == "system/welcome"
        await mcpp.publish(gateway.http, {"kind": "note", "id": "n1"}, pod=pod, participant="ci")
        assert (await ask({"op": "next", "timeout_ms": 2000}))["envelope"]["id"] == "n1"
        proxy.cut()
        await mcpp.publish(gateway.http, {"kind": "note", "id": "n2"}, pod=pod, participant="ci")
        assert await ask({"op": "next", "timeout_ms": 5000}) == {"ok": True, "event": {"type": "reconnected", "resumed": True}}
        assert (await ask({"op": "next", "timeout_ms": 2000}))["envelope"]["id"] == "n2"
        async with mcpp.connect(gateway.url, pod=pod, participant="alice"):
            closed = await ask({"op": "next", "timeout_ms": 5000})
            assert closed["ok"] is False and closed["error"]["type"] == "closed" and closed["error"]["close_code"] == 4000
            assert (await ask({"op": "send", "envelope": {"kind": "chat"}}))["error"]["close_code"] == 4000
        assert await ask({"op": "close"}) == {"ok": True}
    finally:
        stdin.close()
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        await proxy.close()
