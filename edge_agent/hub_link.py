"""The agent's link to the hub: the NATS connection, when the hub was last heard, and how every
handler answers a request or drops a malformed message."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from edgeplane_contract.messages import encode
from edgeplane_contract.transport import DEFAULT_MAX_PAYLOAD, connect_nats

from edge_agent.config import AgentConfig

__all__ = ["HUB_CONTACT_FILE", "HubLink"]

log = logging.getLogger("edgeplane.agent")

# When the hub last answered (wall-clock seconds): a restarted agent's autonomy window counts from it.
HUB_CONTACT_FILE = "hub_contact"


class HubLink:
    """The NATS connection (None until :meth:`connect`) and the on-disk note of the last hub contact."""

    def __init__(self, config: AgentConfig, counters: Counter[str]) -> None:
        self.config = config
        self.counters = counters
        self.nc: NATS | None = None
        self._contact_file = Path(config.work_dir) / HUB_CONTACT_FILE
        self._contact_written = 0.0

    async def connect(self, stop: asyncio.Event, on_reconnected: Callable[[], Awaitable[None]]) -> NATS:
        """Connect, retried with backoff until it works or ``stop`` is set; nats-py reconnects after."""
        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.2, max=5.0), retry=retry_if_exception_type(Exception)
        ):
            with attempt:
                if stop.is_set():
                    raise asyncio.CancelledError
                self.nc = await connect_nats(
                    self.config.nats_url,
                    name=f"edge-agent-{self.config.name}",
                    connect_within_s=5.0,
                    on_reconnected=on_reconnected,
                    seed=self.config.nats_seed or None,
                    inbox_prefix=self.config.inbox_prefix or None,
                    tls=self.config.nats_tls.context() if self.config.nats_tls else None,
                )
                return self.nc
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.close(), timeout=2)

    def connected(self) -> bool:
        """Whether the agent is connected to NATS (and so, as far as it can tell, to the hub)."""
        nc = self.nc
        return nc is not None and nc.is_connected

    def max_payload(self) -> int:
        """The largest message the connection carries (what the server announced, else its default)."""
        nc = self.nc
        return nc.max_payload if nc is not None and nc.max_payload > 0 else DEFAULT_MAX_PAYLOAD

    async def reply(self, msg: Msg, message: Any) -> None:
        """Answer a request with a contract message (best effort: the asker may be gone)."""
        if not msg.reply:
            return
        with contextlib.suppress(Exception):
            await msg.respond(encode(message))

    async def respond(self, msg: Msg, payload: bytes) -> None:
        """Answer a request with ready bytes (best effort: the asker may be gone)."""
        if not msg.reply:
            return
        with contextlib.suppress(Exception):
            await msg.respond(payload)

    def malformed(self, kind: str, exc: Exception) -> None:
        """Count and log a message that does not decode; it is dropped."""
        self.counters["malformed_messages"] += 1
        log.warning("dropped malformed %s: %s", kind, exc)

    def heard_hub(self) -> None:
        """Note that the hub answered (at most every few seconds on disk): the autonomy window of a
        later restart counts from here."""
        now = time.time()
        if now - self._contact_written < 5.0:
            return
        self._contact_written = now
        with contextlib.suppress(OSError):
            tmp = self._contact_file.with_name(self._contact_file.name + ".tmp")
            tmp.write_text(f"{now:.3f}\n", encoding="utf-8")
            os.replace(tmp, self._contact_file)

    def last_hub_contact(self) -> float | None:
        """When the hub was last heard (wall-clock seconds), by this run or an earlier one."""
        try:
            return float(self._contact_file.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None
