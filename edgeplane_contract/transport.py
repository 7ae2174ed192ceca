"""The NATS connection both sides open: ``connect_nats`` and the payload-size constants.

The hub (``controlplane.bus.hub_bus``) connects once per cluster, an agent once to its cluster's
server; both go through :func:`connect_nats`, so both retry, reconnect and report a refusal of
their credentials alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client as NATS

from edgeplane_contract.errors import EdgeplaneError
from edgeplane_contract.urls import mask_url

__all__ = ["DEFAULT_MAX_PAYLOAD", "PAYLOAD_MARGIN", "NatsUnavailableError", "connect_nats"]

# Hub and agent both connect through here: the lines name the NATS connection, not a side.
log = logging.getLogger("edgeplane.nats")

# A refusal the server repeats at every reconnect is logged at most this often.
REPEAT_S = 60.0

# nats-server's default max_payload; what the hub assumes before it has connected.
DEFAULT_MAX_PAYLOAD = 1 << 20
# Room left for what the API cannot know when it checks a message's size (ids, GPU indices).
PAYLOAD_MARGIN = 4096


class NatsUnavailableError(EdgeplaneError, ConnectionError):
    """The first connection failed: no server answered in time, or the server refused this client."""

    code = "unavailable"
    http_status = 503


def _is_refusal(text: str) -> bool:
    text = text.lower()
    return "authorization violation" in text or "authentication" in text


async def connect_nats(
    url: str,
    *,
    name: str,
    connect_within_s: float = 30.0,
    on_reconnected: Callable[[], Awaitable[None]] | None = None,
    on_disconnected: Callable[[], Awaitable[None]] | None = None,
    seed: str | None = None,
    inbox_prefix: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> NATS:
    """Connect within ``connect_within_s`` (nats-py retries meanwhile), then let nats-py reconnect
    forever. Raises NatsUnavailableError when no server answered in time, and at once when the
    server refuses this client's credentials (retrying would not help).

    ``url``: one server, or several comma-separated (servers of one cluster: nats-py connects
    to one and fails over to the others). ``seed``: the nkey seed to authenticate with (None:
    anonymous); ``inbox_prefix``: where the
    replies to this connection's requests arrive (a node's permissions allow only its own);
    ``tls``: the client context for a ``tls://`` server.
    """
    where = mask_url(url)
    refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    said: dict[str, float] = {}

    async def _error(exc: Exception) -> None:
        # The server refusing us (unknown key, a subject we may not use) is a configuration
        # problem someone must see; the rest (reconnects, timeouts) is routine. A refused
        # reconnect repeats every half second: said once a minute, not each time.
        text = str(exc)
        if _is_refusal(text) and not refused.done():
            refused.set_result(text)
        if "violation" not in text.lower():
            log.debug("nats %s: %s", where, exc)
            return
        now = time.monotonic()
        if now - said.get(text, -REPEAT_S) >= REPEAT_S:
            said[text] = now
            hint = (
                " (this client's key is not, or no longer, in the server's configuration: a revoked "
                "node must enrol again)"
                if "authorization" in text.lower()
                else ""
            )
            log.warning("nats %s: %s%s", where, exc, hint)

    async def _reconnected() -> None:
        log.info("nats %s: reconnected", where)
        if on_reconnected is not None:
            await on_reconnected()

    async def _disconnected() -> None:
        # nats-py calls this on our own close() too (the status is CLOSED by then): that is a
        # clean stop, not something an operator must look at.
        if nc.is_closed:
            log.debug("nats %s: closed", where)
        else:
            log.warning("nats %s: disconnected", where)
        if on_disconnected is not None:
            await on_disconnected()

    nc = NATS()
    connecting = asyncio.ensure_future(
        nc.connect(
            servers=[u.strip() for u in url.split(",") if u.strip()],
            name=name,
            connect_timeout=2,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,  # type: ignore[arg-type]  # seconds; nats-py annotates int
            ping_interval=5,
            max_outstanding_pings=2,
            error_cb=_error,
            reconnected_cb=_reconnected,
            disconnected_cb=_disconnected,
            nkeys_seed_str=seed,
            inbox_prefix=inbox_prefix or "_INBOX",
            tls=tls,
        )
    )
    waiting: set[asyncio.Future[Any]] = {connecting, refused}
    done, _ = await asyncio.wait(waiting, timeout=connect_within_s, return_when=asyncio.FIRST_COMPLETED)
    if connecting in done and connecting.exception() is None:
        return nc
    connecting.cancel()
    with contextlib.suppress(BaseException):
        await connecting
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), timeout=2)
    if refused.done():
        raise NatsUnavailableError(
            f"NATS at {where} refused this client: {refused.result()} (check its credentials: the "
            "hub's --nats-seed must be in the server's configuration, an agent must be enrolled)"
        )
    if connecting in done:
        error = connecting.exception()
        raise NatsUnavailableError(f"cannot connect to NATS at {where}: {error}") from error
    raise NatsUnavailableError(f"no NATS server answered at {where} within {connect_within_s:g} s")
