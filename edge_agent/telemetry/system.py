"""CPU and memory readings through psutil."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

import psutil

__all__ = ["PsutilSystemReader", "SystemReader", "SystemSample"]


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
