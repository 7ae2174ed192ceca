"""The node's CPU load while each placement runs: what the hub learns interference from.

One :class:`LoadSampler` for the whole agent reads the node's CPU busy fraction at a bounded
cadence (every ``interval_s``, only while some placement runs) and adds the time since the
previous reading to the bin of that fraction (``RuntimeObservation.BINS`` equal bins of [0, 1]) of
every placement it tracks, counting only the part of the interval each one was running.

The executor calls :meth:`LoadSampler.begin` when a placement's process starts (again at each
local restart: only the final run counts, since a restart runs the command from the start),
:meth:`LoadSampler.finish` when it succeeded (the observation for its Succeeded report) and
:meth:`LoadSampler.drop` when it ended otherwise. The accumulators live in memory only: an agent
that restarts has none for work started before, so it sends no observation rather than a partial
one (a placement's process never outlives its agent, and a resumed one starts a new run).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edgeplane_contract.messages import RuntimeObservation

from edge_agent.telemetry.system import CpuBusyReader, CpuPressureReader

__all__ = ["DEFAULT_SAMPLE_INTERVAL_S", "LoadSampler"]

log = logging.getLogger("edgeplane.agent.load")

DEFAULT_SAMPLE_INTERVAL_S = 1.0
# A busy fraction over less than this is mostly the counters' tick (10 ms) rounding: at a finish
# that close to the last reading, the rest of the run is put in the last reading's bin.
_MIN_READING_S = 0.2


@dataclass(slots=True)
class _Run:
    """One placement's current run: when it started and its seconds per load bin."""

    started: float
    seconds: list[float] = field(default_factory=lambda: [0.0] * RuntimeObservation.BINS)
    pressure_sum: float = 0.0
    pressure_n: int = 0


def _bin(fraction: float) -> int:
    return min(RuntimeObservation.BINS - 1, max(0, int(fraction * RuntimeObservation.BINS)))


class LoadSampler:
    """Seconds per CPU-load bin of each running placement; see the module docstring."""

    def __init__(
        self,
        busy: CpuBusyReader,
        *,
        pressure: CpuPressureReader | None = None,
        interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.busy = busy
        self.pressure = pressure
        self.interval_s = interval_s
        self._clock = clock
        self._runs: dict[str, _Run] = {}
        self._last_t: float | None = None  # when the busy reader's baseline was taken
        self._last_fraction: float | None = None
        self._wake = asyncio.Event()
        self.errors = 0  # readings that failed (logged once each; the run's time is then not binned)

    def __contains__(self, placement_id: str) -> bool:
        return placement_id in self._runs

    def begin(self, placement_id: str) -> None:
        """A run of ``placement_id`` starts now (a restart starts a new run: its bins are reset)."""
        now = self._clock()
        if not self._runs:
            # A fresh baseline: after an idle spell the next reading would otherwise average
            # the time before this run into its first interval.
            self._read(now)
            self._last_fraction = None
        self._runs[placement_id] = _Run(started=now)
        self._wake.set()

    def drop(self, placement_id: str) -> None:
        """The placement ended without success: its run says nothing about slowdown."""
        self._runs.pop(placement_id, None)

    def finish(self, placement_id: str) -> RuntimeObservation | None:
        """The placement succeeded: its final run's observation (None: this agent did not see the
        whole run, or it lasted no measurable time)."""
        run = self._runs.get(placement_id)
        if run is None:
            return None
        now = self._clock()
        last_t = self._last_t if self._last_t is not None else run.started
        if now - last_t >= _MIN_READING_S or self._last_fraction is None:
            self.sample(now)
        elif self._last_fraction is not None:
            run.seconds[_bin(self._last_fraction)] += now - max(last_t, run.started)
        del self._runs[placement_id]
        pressure = run.pressure_sum / run.pressure_n if run.pressure_n else None
        observation = RuntimeObservation(
            runtime_s=now - run.started, load_seconds=run.seconds, cpu_pressure=pressure
        )
        why = observation.invalid()
        if why is not None:  # e.g. a run shorter than the clock's resolution
            log.debug("no load observation for %s: %s", placement_id, why)
            return None
        return observation

    def _read(self, now: float) -> float | None:
        try:
            fraction = self.busy.busy_fraction()
        except Exception as exc:  # a reader failing must not end the agent's sampling
            self.errors += 1
            log.warning("CPU busy reading failed: %s", exc)
            fraction = None
        self._last_t = now
        return fraction

    def sample(self, now: float | None = None) -> None:
        """Read the busy fraction since the last reading and bin that interval for every run."""
        now = self._clock() if now is None else now
        last_t = self._last_t
        fraction = self._read(now)
        if fraction is None or last_t is None:
            return
        self._last_fraction = fraction
        index = _bin(fraction)
        pressure = self.pressure.some_avg10() if self.pressure is not None else None
        for run in self._runs.values():
            overlap = now - max(last_t, run.started)
            if overlap > 0:
                run.seconds[index] += overlap
            if pressure is not None:
                run.pressure_sum += pressure
                run.pressure_n += 1

    async def loop(self) -> None:
        """Sample every ``interval_s`` while some placement runs; sleep while none does."""
        while True:
            if not self._runs:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self.interval_s)
            if self._runs:
                self.sample()
