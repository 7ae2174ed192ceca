"""The agent's NATS identity: enrolment with a join token, and its credentials file.

``edge-agent run --join-file FILE --hub URL`` (or ``--join -``: the token on stdin; ``--join TOKEN``
also works, but a command line is readable by every process on the machine in ``/proc``) makes
an nkey here (the seed never leaves this machine),
sends its public key with the token to the hub's ``POST /v1/join``, and keeps what the hub
answers with the seed in ``<work_dir>/credentials.json`` (0600); later starts reuse that file.
A ``--join-file`` is removed once the join succeeded (its token is spent).
``--credentials FILE`` takes a file made by ``controlplane agent-credentials create`` instead.
The file's format is the contract's (:mod:`edgeplane_contract.enrolment`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from edgeplane_contract.credentials import new_user_seed, public_key_of
from edgeplane_contract.enrolment import AgentCredentials
from edgeplane_contract.errors import ConfigError, EdgeplaneError

__all__ = ["JoinError", "join", "read_join_token", "remove_join_file"]

log = logging.getLogger("edgeplane.agent")

_MAX_TOKEN_CHARS = 4096  # a join token is ~60; more is not a token file


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
            hub_public_key=str(reply.get("hub_public_key") or ""),
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


def read_join_token(flag: str | None, file: str | None, *, env: str | None, stdin: TextIO) -> str | None:
    """The join token from ``--join`` (``-``: the first line of ``stdin``), ``--join-file`` or
    the environment (``EDGEPLANE_JOIN_TOKEN``, used when neither flag is given); None: no join.
    Raises ConfigError naming the flag for both flags, an unreadable file or an empty token."""
    if flag is not None and file is not None:
        raise ConfigError("<command line>", "--join-file", "give --join or --join-file, not both")
    if file is not None:
        try:
            with open(file, encoding="utf-8") as handle:
                text, where = handle.read(_MAX_TOKEN_CHARS + 1), "--join-file"
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(file, "--join-file", f"cannot read the join token: {exc}") from None
    elif flag == "-":
        text, where = stdin.readline(_MAX_TOKEN_CHARS + 1), "--join"
    elif flag is not None:
        text, where = flag, "--join"
    elif env:
        text, where = env, "EDGEPLANE_JOIN_TOKEN"
    else:
        return None
    token = text.strip()
    if not token or len(token) > _MAX_TOKEN_CHARS or any(c.isspace() for c in token):
        # The value itself is never echoed: it may be a secret that is merely malformed.
        raise ConfigError("<command line>", where, "no join token there (empty, or not one token)")
    return token


def remove_join_file(file: str) -> None:
    """Remove a spent ``--join-file``; a failure is logged (the token is single-use anyway)."""
    try:
        os.unlink(Path(file))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove the spent join token file %s: %s", file, exc.strerror or exc)
