"""The conformance driver of the Python client: clients/conformance_test.go
drives it with the same scenarios as the TypeScript client's driver, and
its header comment is the protocol both speak.

It reads one JSON request per line on stdin and writes exactly one JSON
answer per line on stdout for each, flushed at once, in order. It holds
at most one client at a time (the current one): ``connect`` closes the
one it had. Every answer has ``ok``; a failure is
``{"ok": false, "error": {"type", "code"?, "status"?, "close_code"?, "message"?}}``
with type ``refused``, ``gateway``, ``closed``, ``timeout`` or ``usage``.
stderr is for humans.

    /usr/bin/python3 clients/python/conformance/driver.py
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import mcpp  # noqa: E402  (imported from this checkout, above)

CONNECT_OPTIONS = ("pod", "participant", "token", "filter", "history", "fold", "resume")


class Usage(Exception):
    """A request the driver cannot carry out as written."""


def failure(exc: BaseException) -> dict[str, Any]:
    """The ``error`` object of an answer for what an op raised."""
    if isinstance(exc, Usage | ValueError | TypeError | KeyError):
        return {"type": "usage", "message": str(exc)}
    if isinstance(exc, TimeoutError):
        return {"type": "timeout", "message": str(exc) or "timed out"}
    if isinstance(exc, mcpp.RefusedError):
        out: dict[str, Any] = {"type": "refused", "status": exc.status, "message": exc.message}
        if exc.code:
            out["code"] = exc.code
        return out
    if isinstance(exc, mcpp.GatewayError):
        return {"type": "gateway", "code": exc.code, "message": exc.message}
    if isinstance(exc, mcpp.ClosedError):
        return {"type": "closed", "close_code": exc.code, "message": str(exc)}
    # The client ended otherwise: closed by the user, a connection lost for
    # good, or a gateway that could not be reached.
    return {"type": "closed", "message": str(exc) or type(exc).__name__}


class Driver:
    def __init__(self) -> None:
        self.client: mcpp.Client | None = None

    def current(self) -> mcpp.Client:
        if self.client is None:
            raise Usage("no client: connect first")
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()

    async def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "connect":
            options = req.get("options") or {}
            if not isinstance(options, dict):
                raise Usage("options is an object")
            unknown = set(options) - set(CONNECT_OPTIONS)
            if unknown:
                raise Usage(f"unknown options {sorted(unknown)}")
            await self.close()
            self.client = await mcpp.connect(req["url"], **options)
            return {"ok": True, "welcome": self.client.welcome}
        if op == "send":
            # "confirm" is passed only when given, so that the default
            # (confirmed: a refusal is the answer's error) is what runs.
            if "confirm" not in req:
                return {"ok": True, "id": await self.current().send(req["envelope"])}
            if not isinstance(req["confirm"], bool):
                raise Usage("confirm is true or false")
            return {"ok": True, "id": await self.current().send(req["envelope"], confirm=req["confirm"])}
        if op == "request":
            answer = await self.current().request(req["kind"], req.get("payload"))
            return {"ok": True, "answer": dict(answer)}
        if op == "next":
            client = self.current()
            timeout = float(req.get("timeout_ms", 5000)) / 1000
            try:
                item = await asyncio.wait_for(anext(aiter(client)), timeout)
            except StopAsyncIteration:
                return {"ok": False, "error": {"type": "closed", "message": "the client was closed"}}
            if isinstance(item, mcpp.Reconnected):
                return {"ok": True, "event": {"type": "reconnected", "resumed": item.resumed}}
            return {"ok": True, "envelope": dict(item)}
        if op == "branch":
            ctx = await self.current().branch(req.get("type", "reasoning"), req.get("parent"), req.get("payload"))
            return {"ok": True, "context": dict(ctx)}
        if op == "conclude":
            return {"ok": True, "id": await self.current().conclude(req["context"], req.get("payload"))}
        if op == "publish":
            results = await mcpp.publish(
                req["url"], req.get("envelopes", []), pod=req["pod"], participant=req.get("participant"), token=req.get("token")
            )
            return {"ok": True, "results": results}
        if op == "close":
            await self.close()
            return {"ok": True}
        raise Usage(f"unknown op {op!r}")


async def main() -> None:
    driver = Driver()
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            if not line.strip():
                continue
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise Usage("a request is a JSON object")
                answer = await driver.handle(req)
            except Exception as exc:
                print(f"driver: {line.strip()[:200]}: {exc!r}", file=sys.stderr)
                answer = {"ok": False, "error": failure(exc)}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        await driver.close()


if __name__ == "__main__":
    asyncio.run(main())
