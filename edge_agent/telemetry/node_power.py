"""The node's draw in watts for each heartbeat, and how it was had.

In order of trust:

1. ``battery``: on battery, the battery's own discharge reading (the whole machine's draw);
2. ``rapl``: the CPU packages' energy counters (Linux powercap, ``/sys/class/powercap/*-rapl:N``
   ``energy_uj``; Intel and AMD) over the time since the last reading, plus the GPUs' NVML power;
   the rest of the machine (disks, fans, the power supply's loss) is not in it;
3. ``model``: the node type's power model (``edgeplane_contract.power``: idle plus dynamic power
   linear in the measured CPU use; GPUs by their NVML reading where given, else the model's).

The counters are readable by root only on most kernels; a reader that cannot read them says so
once and the model is used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgeplane_contract.messages import GpuTelemetry
from edgeplane_contract.power import PowerModel

from edge_agent.telemetry.power import PowerState

__all__ = ["DEFAULT_POWERCAP_PATH", "NodePower", "RaplReader"]

log = logging.getLogger("edgeplane.agent.power")

DEFAULT_POWERCAP_PATH = "/sys/class/powercap"


@dataclass(slots=True)
class _Zone:
    energy: Path
    wrap_uj: float
    last_uj: float | None = None


class RaplReader:
    """Watts of the CPU packages from the powercap energy counters (top-level zones only: the
    sub-zones, core and uncore, are parts of their package). None before the second reading,
    and for good once a counter cannot be read."""

    def __init__(
        self, root: str | Path = DEFAULT_POWERCAP_PATH, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.clock = clock
        self._zones: list[_Zone] = []
        self._last_t: float | None = None
        self.broken = False
        try:
            names = sorted(p for p in Path(root).iterdir() if p.name.count(":") == 1 and "rapl" in p.name)
        except OSError:
            names = []
        for zone in names:
            try:
                wrap = float((zone / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                wrap = 0.0
            self._zones.append(_Zone(zone / "energy_uj", wrap))

    @property
    def available(self) -> bool:
        return bool(self._zones) and not self.broken

    def watts(self) -> float | None:
        if not self.available:
            return None
        now = self.clock()
        joules = 0.0
        complete = True
        try:
            for zone in self._zones:
                value = float(zone.energy.read_text())
                if zone.last_uj is None:
                    complete = False
                else:
                    delta = value - zone.last_uj
                    if delta < 0:  # the counter wrapped
                        delta += zone.wrap_uj
                    joules += max(delta, 0.0) / 1e6
                zone.last_uj = value
        except (OSError, ValueError) as exc:
            self.broken = True
            log.info("RAPL energy counters unreadable (%s): node power from the power model", exc)
            return None
        last, self._last_t = self._last_t, now
        if not complete or last is None or now <= last:
            return None
        return joules / (now - last)


class NodePower:
    """``(watts, method)`` for a heartbeat (see the module's doc for the order)."""

    def __init__(
        self, node_type: str, rapl: RaplReader | None = None, model: PowerModel | None = None
    ) -> None:
        self.node_type = node_type
        self.rapl = rapl
        self.model = model or PowerModel()

    def read(self, power: PowerState, cpu_percent: float, gpus: list[GpuTelemetry]) -> tuple[float, str]:
        if power.source == "battery" and power.power_w is not None:
            return power.power_w, "battery"
        measured_gpus = [g.power_w for g in gpus if g.power_w is not None]
        package = self.rapl.watts() if self.rapl is not None else None
        if package is not None:
            return package + sum(measured_gpus), "rapl"
        spec = self.model.spec(self.node_type)
        watts = spec.idle_w + (spec.max_w - spec.idle_w) * min(max(cpu_percent / 100.0, 0.0), 1.0)
        if gpus and len(measured_gpus) == len(gpus):
            watts += sum(measured_gpus)
        else:
            for gpu in gpus:
                util = min(max(gpu.utilization_percent / 100.0, 0.0), 1.0)
                watts += spec.gpu_idle_w + (spec.gpu_max_w - spec.gpu_idle_w) * util
        return watts, "model"
