"""A TCP link that a test or a bench can cut and heal: a relay on a loopback port that forwards each
connection to one address. ``cut()`` drops every connection through it and refuses new ones (as a
WAN link that goes down: the far end sees its connection reset and its reconnects fail);
``heal()`` lets them through again."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["Link"]


class Link:
    """A relay ``address`` -> ``target`` (start with :meth:`open`)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.up = True
        self.server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0

    @classmethod
    async def open(cls, target: tuple[str, int]) -> Link:
        link = cls(target)
        link.server = await asyncio.start_server(link._accept, "127.0.0.1", 0)
        return link

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return host, port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.close()
            return
        try:
            far_reader, far_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), 5)
        except (OSError, TimeoutError):
            writer.close()
            return
        self.connections += 1
        self._writers |= {writer, far_writer}
        for source, sink in ((reader, far_writer), (far_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while self.up:
                data = await source.read(65536)
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            self._writers.discard(sink)
            sink.close()

    def cut(self) -> None:
        """Every connection through the link is dropped; new ones are refused until :meth:`heal`."""
        self.up = False
        for writer in list(self._writers):
            transport = writer.transport
            with contextlib.suppress(Exception):
                transport.abort()
        self._writers.clear()

    def heal(self) -> None:
        self.up = True

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
