"""The agent's NATS identity: enrolment with a join token, and its credentials file.

``edge-agent run --join TOKEN --hub URL`` makes an nkey here (the seed never leaves this machine),
sends its public key with the token to the hub's ``POST /v1/join``, and keeps what the hub
answers with the seed in ``<work_dir>/credentials.json`` (0600); later starts reuse that file.
``--credentials FILE`` takes a file made by ``controlplane agent-credentials create`` instead.
The file's format is the contract's (:mod:`edgeplane_contract.enrolment`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

import aiohttp

from edgeplane_contract.credentials import new_user_seed, public_key_of
from edgeplane_contract.enrolment import AgentCredentials
from edgeplane_contract.errors import EdgeplaneError

__all__ = ["JoinError", "join"]


class JoinError(EdgeplaneError):
    """The hub refused the join, or could not be reached; the message says which and why."""

    code = "join"


async def join(
    hub_url: str,
    token: str,
    *,
    node: str,
    cluster: str | None = None,
    timeout_s: float = 30.0,
    ssl_context: ssl.SSLContext | None = None,
) -> AgentCredentials:
    """Enrol with the hub; the new credentials (not saved). Raises JoinError with the reason.

    A hub that cannot be reached yet is retried until ``timeout_s``; a refusal is final (a join
    token is single-use: asking again would not help).
    """
    seed = new_user_seed()
    body: dict[str, Any] = {"token": token, "node": node, "public_key": public_key_of(seed)}
    if cluster is not None:
        body["cluster"] = cluster
    url = hub_url.rstrip("/") + "/v1/join"
    deadline = time.monotonic() + timeout_s
    delay = 0.2
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while True:
            try:
                async with session.post(url, json=body, ssl=ssl_context or True) as response:
                    reply = await _json(response)
                    if response.status != 201:
                        raise JoinError(f"the hub refused the join ({response.status}): {_reason(reply)}")
                    break
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                if isinstance(exc, aiohttp.ClientSSLError) or time.monotonic() + delay > deadline:
                    raise JoinError(
                        f"cannot reach the hub at {hub_url}: {str(exc) or type(exc).__name__}"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
    try:
        return AgentCredentials(
            node=str(reply["node"]),
            cluster=str(reply["cluster"]),
            seed=seed,
            nats_url=str(reply["nats_url"]),
            subject_prefix=str(reply["subject_prefix"]),
            inbox_prefix=str(reply["inbox_prefix"]),
        )
    except (KeyError, TypeError):
        raise JoinError(f"the hub's answer is not a join reply: {str(reply)[:200]}") from None


async def _json(response: aiohttp.ClientResponse) -> Any:
    try:
        return await response.json(content_type=None)
    except ValueError:
        return {"error": {"message": (await response.text())[:200]}}


def _reason(reply: Any) -> str:
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        return str(reply["error"].get("message", reply))
    return str(reply)[:200]
