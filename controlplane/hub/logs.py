"""Asking a node for a bounded chunk of a log (the agent keeps logs; the hub keeps none)."""

from __future__ import annotations

import uuid

from nats.errors import NoRespondersError

from edgeplane_contract.codec import MessageError, decode, encode
from edgeplane_contract.logs import LogChunkV1, LogRequestV1

from controlplane.bus.hub_bus import HubBus
from controlplane.errors import UnavailableError

__all__ = ["LogSource"]


class LogSource:
    """One log on one node: a placement's output or a function instance's stderr."""

    def __init__(self, bus: HubBus, *, cluster: str, node: str, source: str, log_id: str) -> None:
        self.bus = bus
        self.cluster = cluster
        self.node = node
        self.source = source
        self.log_id = log_id

    async def chunk(
        self, *, offset: int = 0, max_bytes: int, tail_lines: int | None = None, deadline_s: float = 5.0
    ) -> LogChunkV1:
        """The node's answer; UnavailableError when it gives none (down, partitioned, too old an
        agent) or a garbled one."""
        request = LogRequestV1(
            request_id=uuid.uuid4().hex,
            source=self.source,
            id=self.log_id,
            offset=offset,
            max_bytes=max_bytes,
            tail_lines=tail_lines,
        )
        subject = self.bus.subjects(self.cluster).logs(self.node)
        try:
            data = await self.bus.request(self.cluster, subject, encode(request), deadline_s=deadline_s)
            chunk = decode(data, LogChunkV1)
        except NoRespondersError:
            raise UnavailableError(f"node {self.node!r} is not listening (down or partitioned)") from None
        except (TimeoutError, ConnectionError) as exc:
            why = f"node {self.node!r} did not answer within {deadline_s:g} s: {exc}"
            raise UnavailableError(why) from None
        except MessageError as exc:
            raise UnavailableError(f"node {self.node!r} answered garbled: {exc}") from None
        if chunk.request_id != request.request_id:
            raise UnavailableError(f"node {self.node!r} answered another request")
        return chunk
