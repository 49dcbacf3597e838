"""What the tests share: real gateways, started on free loopback ports, and
a way to run ``async def`` tests without a plugin.

The gateway is MCPP_GATEWAY_BIN when it is set (``go test ./clients``
sets it), or else built once from the repository's root with
``go build -o <tmp> ./cmd/mcpp-gateway``. Each gateway logs the address it
listens on (``--listen 127.0.0.1:0`` picks a free port), which is how the
tests find it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent  # clients/python
REPO = PACKAGE.parent.parent

# No test may hang CI: each async test runs under this many seconds.
TEST_TIMEOUT = 90.0


@pytest.hookimpl(tryfirst=True)  # type: ignore[misc]  # pytest's decorators are untyped
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs an ``async def`` test in a fresh event loop (asyncio.run),
    bounded by TEST_TIMEOUT: Debian 12 has no pytest-asyncio that matches
    its pytest for certain, and this is all the tests need of one."""
    func = pyfuncitem.obj
    if not inspect.iscoroutinefunction(func):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(asyncio.wait_for(func(**args), TEST_TIMEOUT))
    return True


class Gateway:
    """One mcpp-gateway process, listening on a free loopback port."""

    def __init__(self, binary: str, log: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._log_file = open(log, "wb")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", *args],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env else None,
        )
        self.addr = self._wait_addr()

    def _wait_addr(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            m = re.search(r"addr=(127\.0\.0\.1:\d+)", text)
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"mcpp-gateway exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"mcpp-gateway did not say where it listens within 60s:\n{self.log.read_text(errors='replace')}")

    @property
    def url(self) -> str:
        """ws://HOST:PORT, as a user would give it."""
        return f"ws://{self.addr}"

    @property
    def http(self) -> str:
        return f"http://{self.addr}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()


@pytest.fixture(scope="session")
def gateway_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    binary = os.environ.get("MCPP_GATEWAY_BIN")
    if binary:
        return binary
    out = tmp_path_factory.mktemp("bin") / "mcpp-gateway"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/mcpp-gateway"], cwd=REPO, check=True)
    return str(out)


def _start(binary: str, tmp_path_factory: pytest.TempPathFactory, name: str, *args: str) -> Gateway:
    log = tmp_path_factory.mktemp(name) / "gateway.log"
    return Gateway(binary, log, *args)


@pytest.fixture(scope="session")
def gateway(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """An open gateway whose rates do not slow a burst of thousands, and
    whose history keeps them all (so a resume finds its envelope)."""
    g = _start(gateway_bin, tmp_path_factory, "open", "--rate", "100000", "--burst", "100000", "--history", "10000")
    yield g
    g.stop()


@pytest.fixture(scope="session")
def traced_gateway(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """An open gateway that traces, its spans on its standard output (its
    log): OTEL_TRACES_EXPORTER=console."""
    log = tmp_path_factory.mktemp("traced") / "gateway.log"
    g = Gateway(gateway_bin, log, env={"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "50"})
    yield g
    g.stop()


@pytest.fixture(scope="session")
def chat_gateway(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """An open gateway whose participants may send chat alone."""
    g = _start(gateway_bin, tmp_path_factory, "chat", "--default-capabilities", "chat")
    yield g
    g.stop()


@pytest.fixture(scope="session")
def tight_gateway(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway whose participants may send 3 messages (a burst of 3,
    refilled at one every 1,000 s)."""
    g = _start(gateway_bin, tmp_path_factory, "tight", "--rate", "0.001", "--burst", "3")
    yield g
    g.stop()


@pytest.fixture(scope="session")
def short_history_gateway(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway that keeps 5 entries per pod: an envelope falls out of its
    history after 5 more."""
    g = _start(gateway_bin, tmp_path_factory, "short", "--history", "5", "--rate", "100000", "--burst", "100000")
    yield g
    g.stop()


TOKENS = {
    "alice-token": {"participant": "alice", "capabilities": ["*"], "pods": ["*"]},
    "bot-token": {"participant": "bot", "capabilities": ["chat"], "pods": ["lab-*"]},
}


@pytest.fixture(scope="session")
def token_gateway(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway with a token file (TOKENS)."""
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"token": t, **e} for t, e in TOKENS.items()]}))
    path.chmod(0o600)
    g = _start(gateway_bin, tmp_path_factory, "tokens", "--tokens", str(path))
    yield g
    g.stop()


# The HS256 secret of trust_gateway's JWTs (at least 32 bytes).
JWT_SECRET = "a-test-secret-of-more-than-32-bytes-for-hs256"

TRUST_TOKENS = {
    "mod-token": {"participant": "mod", "capabilities": ["chat", "gateway/kick"], "pods": ["*"]},
    # The granter holds what it grants: a grant never gives more than its grantor holds.
    "granter-token": {"participant": "granter", "capabilities": ["chat", "capability/grant", "tool/*"], "pods": ["*"]},
    "bob-token": {"participant": "bob", "capabilities": ["chat"], "pods": ["*"]},
}


@pytest.fixture(scope="session")
def trust_gateway(gateway_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway with a token file (TRUST_TOKENS: a moderator that may
    kick, a participant that may grant, and bob, who may chat) that also
    takes HS256 JWTs signed with JWT_SECRET."""
    d = tmp_path_factory.mktemp("trust")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"token": t, **e} for t, e in TRUST_TOKENS.items()]}))
    secret = d / "secret"
    secret.write_text(JWT_SECRET)
    for f in (tokens, secret):
        f.chmod(0o600)
    g = _start(gateway_bin, tmp_path_factory, "trust", "--tokens", str(tokens), "--jwt-secret-file", str(secret))
    yield g
    g.stop()


@pytest.fixture
def pod(request: pytest.FixtureRequest) -> str:
    """A pod of the test's own: a name no other test uses."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:48]
    return f"{name}-{uuid.uuid4().hex[:8]}"


def python_env(**extra: str) -> dict[str, Any]:
    """The environment for a script that imports mcpp from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE / "src"), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


PYTHON = sys.executable
