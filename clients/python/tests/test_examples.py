"""The examples run against a real gateway, as a user would run them."""

from __future__ import annotations

import subprocess

from conftest import PACKAGE, PYTHON, Gateway, python_env


def run_example(name: str, *args: str, **env: str) -> str:
    out = subprocess.run(
        [PYTHON, str(PACKAGE / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=python_env(**env),
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_two_agents_reason_and_conclude(gateway: Gateway) -> None:
    out = run_example("reasoning.py", gateway.url)
    assert "critic read in" in out and "A costs 10, B costs 7" in out
    assert "planner read from critic: B, unless A is faster" in out
    assert "concluded: plan B (conclusion, 4 messages from planner, critic)" in out


def test_a_late_joiner_catches_up(gateway: Gateway) -> None:
    out = run_example("late_joiner.py", MCPP_URL=gateway.url)  # the gateway from the environment
    lines = out.splitlines()
    assert lines[0] == "replayed 4, folded 4"  # the branch and the three steps are folded
    kinds = [line.split()[1] for line in lines[1:]]
    assert kinds == ["chat", "conclusion", "system/context", "note", "chat"]
    assert "welcome, late" in lines[-1]
