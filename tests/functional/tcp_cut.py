"""A loopback TCP relay a test can cut and heal: one client's connection to a server dropped
(and refused) while everyone else's stays up, e.g. the hub's NATS connection alone."""

from __future__ import annotations

import asyncio
import contextlib

from controlplane.natsd import free_port


class CuttableRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.cut_off = False

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> CuttableRelay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), timeout=5)
        except (OSError, TimeoutError):
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while not self.cut_off:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        writer.close()
        self._writers.discard(writer)

    def cut(self) -> None:
        """Drop every relayed connection now and refuse new ones until heal()."""
        self.cut_off = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def heal(self) -> None:
        self.cut_off = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), timeout=5)
