"""CPU and memory readings through psutil; the CPU's busy fraction between two readings, and its
pressure (PSI) where the kernel has it, for the load profile of running placements."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

__all__ = [
    "DEFAULT_CPU_PRESSURE_PATH",
    "CpuBusyReader",
    "CpuPressureReader",
    "ProcPressureReader",
    "PsutilBusyReader",
    "PsutilSystemReader",
    "SystemReader",
    "SystemSample",
]

DEFAULT_CPU_PRESSURE_PATH = "/proc/pressure/cpu"


@dataclass(slots=True)
class SystemSample:
    cpu_count: float
    cpu_percent: float
    memory_total_bytes: int
    memory_used_bytes: int
    load_1m: float


class SystemReader(Protocol):
    def read(self) -> SystemSample: ...


class PsutilSystemReader:
    """Reads the host's CPU and memory; the first CPU sample primes psutil's counter."""

    def __init__(self) -> None:
        psutil.cpu_percent(interval=None)

    def read(self) -> SystemSample:
        memory = psutil.virtual_memory()
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
        return SystemSample(
            cpu_count=float(psutil.cpu_count(logical=True) or 1),
            cpu_percent=float(psutil.cpu_percent(interval=None)),
            memory_total_bytes=int(memory.total),
            memory_used_bytes=int(memory.total - memory.available),
            load_1m=float(load),
        )


class CpuBusyReader(Protocol):
    def busy_fraction(self) -> float | None:
        """The node's CPU busy fraction in [0, 1] since the previous call (None on the first)."""


class PsutilBusyReader:
    """The busy fraction from ``/proc/stat`` counters (psutil's ``cpu_times``), with a baseline of
    its own: ``psutil.cpu_percent(interval=None)`` keeps one per process, which the heartbeat's
    reading would reset under this one."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    @staticmethod
    def _times() -> tuple[float, float]:
        times = psutil.cpu_times()
        # Waiting for I/O is idle time to the CPU (Linux counts it apart from idle).
        idle = times.idle + getattr(times, "iowait", 0.0)
        return idle, sum(times)

    def busy_fraction(self) -> float | None:
        idle, total = self._times()
        last, self._last = self._last, (idle, total)
        if last is None:
            return None
        d_total = total - last[1]
        if d_total <= 0:  # no tick between the readings: nothing measured
            return None
        return min(1.0, max(0.0, 1.0 - (idle - last[0]) / d_total))


class CpuPressureReader(Protocol):
    def some_avg10(self) -> float | None:
        """The share of the last 10 s some task waited for a CPU, in [0, 1] (None: no PSI)."""


class ProcPressureReader:
    """Reads ``some avg10=`` of a PSI file (``/proc/pressure/cpu``); None where it is missing."""

    def __init__(self, path: str | Path = DEFAULT_CPU_PRESSURE_PATH) -> None:
        self.path = Path(path)

    def some_avg10(self) -> float | None:
        try:
            text = self.path.read_text(encoding="ascii", errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            fields = line.split()
            if not fields or fields[0] != "some":
                continue
            for item in fields[1:]:
                key, _, value = item.partition("=")
                if key == "avg10":
                    try:
                        share = float(value) / 100.0
                    except ValueError:
                        return None
                    return min(1.0, max(0.0, share)) if share == share else None  # NaN: unreadable
        return None


class RecentSystemReader:
    """A :class:`SystemReader` that reads its inner one at most every ``max_age_s`` and answers
    the last sample in between: for readers that want the node's capacity on every decision
    (each bid read ``/proc/meminfo`` and ``/proc/stat``: a third of a local decision's time)."""

    def __init__(self, inner: SystemReader, *, max_age_s: float = 1.0) -> None:
        self.inner = inner
        self.max_age_s = max_age_s
        self._sample: SystemSample | None = None
        self._read_at = 0.0

    def read(self) -> SystemSample:
        now = time.monotonic()
        if self._sample is None or now - self._read_at > self.max_age_s:
            self._sample, self._read_at = self.inner.read(), now
        return self._sample
