"""``controlplane up``'s care of its local agents: restart a crashed one with backoff, say so, and
give up (``up`` exits non-zero) on one that cannot start at all."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from edgeplane_contract.aio import wait_set

__all__ = ["CONFIG_EXIT", "LocalAgent", "supervise"]

CONFIG_EXIT = 2  # edge-agent's exit code for a configuration error: restarting cannot help
QUICK_EXIT_S = 10.0  # an agent that exits sooner than this after its start "did not start"
MAX_QUICK_EXITS = 3
MAX_BACKOFF_S = 30.0


@dataclass(slots=True)
class LocalAgent:
    """One agent process of ``up`` and what its supervision knows of it."""

    name: str
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_exits: int = 0  # in a row
    restarts: int = 0
    restart_at: float | None = None
    env: dict[str, str] = field(default_factory=lambda: {**os.environ, "PYTHONUNBUFFERED": "1"})

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=self.env)
        self.started = time.monotonic()
        self.restart_at = None

    def stop(self, timeout_s: float = 10.0) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout_s)
        if process.poll() is None:
            process.kill()
            process.wait()


def _say(message: str) -> None:
    print(f"controlplane up: {message}", file=sys.stderr, flush=True)


async def supervise(agents: list[LocalAgent], stop: asyncio.Event, *, poll_s: float = 0.5) -> int:
    """Watch the agents until ``stop`` is set (0), or until one cannot start (1).

    A crashed agent is restarted after 1, 2, 4 ... 30 s; one that exits within 10 s of its start
    three times in a row, or at once with a configuration error, cannot start: ``up`` stops.
    """
    while not stop.is_set():
        if await wait_set(stop, poll_s):
            break
        now = time.monotonic()
        for agent in agents:
            if agent.restart_at is not None:
                if now >= agent.restart_at:
                    agent.restarts += 1
                    agent.start()
                    _say(f"agent {agent.name} restarted ({agent.restarts} restart(s) so far)")
                continue
            code = agent.process.poll() if agent.process is not None else None
            if code is None:
                if agent.quick_exits and now - agent.started >= QUICK_EXIT_S:
                    agent.quick_exits = 0  # it has been up long enough: it started
                continue
            quick = now - agent.started < QUICK_EXIT_S
            agent.quick_exits = agent.quick_exits + 1 if quick else 1
            if quick and (code == CONFIG_EXIT or agent.quick_exits >= MAX_QUICK_EXITS):
                why = "a configuration error" if code == CONFIG_EXIT else f"{agent.quick_exits} quick exits"
                _say(f"agent {agent.name} cannot start (exit code {code}, {why}; its message is above)")
                return 1
            delay = min(MAX_BACKOFF_S, 2.0 ** (agent.quick_exits - 1))
            _say(f"agent {agent.name} exited with code {code}; restarting it in {delay:g} s")
            agent.restart_at = now + delay
    return 0
