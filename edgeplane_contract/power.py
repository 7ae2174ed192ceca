"""Per-node-type power model: idle plus dynamic power linear in utilisation, and a sleep state.

Linear-in-utilisation server power is the standard first-order model (Fan, Weber, Barroso,
"Power provisioning for a warehouse-sized computer", ISCA 2007); accelerators add their own
idle and dynamic parts. Default figures are typical public numbers, not measurements of ours:

* ``cpu``: 2-socket 64-vCPU server, ~160 W idle, ~420 W at full load (SPECpower-class hosts);
* ``gpu``: the same host plus 2x A100-SXM4-40GB, ~50 W idle and 400 W TDP each;
* ``dpu``: the same host plus 2x BlueField-2 DPUs, ~30 W idle, ~75 W max each;
* ``edge``: a small edge box (NUC/Jetson class), ~6 W idle, ~30 W max, with a battery option.

``sleep_w``/``wake_s`` describe a suspend-to-RAM low-power state and how long resuming takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from edgeplane_contract.arrays import FloatArray, IntArray
from edgeplane_contract.resources import NODE_TYPES

__all__ = ["DEFAULT_POWER_SPECS", "PowerModel", "PowerSpec"]


@dataclass(frozen=True, slots=True)
class PowerSpec:
    """Power figures of one node type (watts, seconds, watt-hours)."""

    idle_w: float
    max_w: float
    sleep_w: float
    wake_s: float
    gpu_idle_w: float = 0.0
    gpu_max_w: float = 0.0
    dpu_idle_w: float = 0.0
    dpu_max_w: float = 0.0
    battery_wh: float = 0.0

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> PowerSpec:
        known = {f.name for f in fields(cls)}
        unknown = set(body) - known
        if unknown:
            raise ValueError(f"unknown power key {sorted(unknown)[0]!r}")
        return cls(**{k: float(v) for k, v in body.items()})


DEFAULT_POWER_SPECS: dict[str, PowerSpec] = {
    "cpu": PowerSpec(idle_w=160.0, max_w=420.0, sleep_w=12.0, wake_s=45.0),
    "gpu": PowerSpec(idle_w=180.0, max_w=450.0, sleep_w=20.0, wake_s=60.0, gpu_idle_w=50.0, gpu_max_w=400.0),
    "dpu": PowerSpec(idle_w=160.0, max_w=420.0, sleep_w=15.0, wake_s=45.0, dpu_idle_w=30.0, dpu_max_w=75.0),
    "edge": PowerSpec(idle_w=6.0, max_w=30.0, sleep_w=0.5, wake_s=5.0, battery_wh=120.0),
}


class PowerModel:
    """Watts drawn by a node given its utilisation; vectorised over the node table."""

    def __init__(self, specs: Mapping[str, PowerSpec] | None = None) -> None:
        merged = dict(DEFAULT_POWER_SPECS)
        merged.update(specs or {})
        self.specs = merged
        ordered = [merged[t] for t in NODE_TYPES]
        self._idle = np.array([s.idle_w for s in ordered])
        self._cpu_dyn = np.array([s.max_w - s.idle_w for s in ordered])
        self._gpu_idle = np.array([s.gpu_idle_w for s in ordered])
        self._gpu_dyn = np.array([s.gpu_max_w - s.gpu_idle_w for s in ordered])
        self._dpu_idle = np.array([s.dpu_idle_w for s in ordered])
        self._dpu_dyn = np.array([s.dpu_max_w - s.dpu_idle_w for s in ordered])

    def spec(self, node_type: str) -> PowerSpec:
        return self.specs[node_type]

    def node_power(
        self,
        node_type: str,
        *,
        cpu_util: float,
        gpu_units: float = 0.0,
        gpus: int = 0,
        dpus_busy: int = 0,
        dpus: int = 0,
        asleep: bool = False,
    ) -> float:
        """Watts of one node: idle + dynamic by utilisation, or the sleep draw."""
        spec = self.specs[node_type]
        if asleep:
            return spec.sleep_w
        watts = spec.idle_w + (spec.max_w - spec.idle_w) * min(max(cpu_util, 0.0), 1.0)
        watts += gpus * spec.gpu_idle_w + (spec.gpu_max_w - spec.gpu_idle_w) * min(gpu_units, float(gpus))
        watts += dpus * spec.dpu_idle_w + (spec.dpu_max_w - spec.dpu_idle_w) * min(dpus_busy, dpus)
        return watts

    def idle_w(self, node_type: IntArray, gpus: IntArray, dpus: IntArray) -> FloatArray:
        """Idle draw of powered-on nodes (host plus idle accelerators)."""
        result: FloatArray = (
            self._idle[node_type] + gpus * self._gpu_idle[node_type] + dpus * self._dpu_idle[node_type]
        )
        return result

    def max_w(self, node_type: IntArray, gpus: IntArray, dpus: IntArray) -> FloatArray:
        result: FloatArray = self.idle_w(node_type, gpus, dpus) + self._cpu_dyn[node_type]
        result = result + gpus * self._gpu_dyn[node_type] + dpus * self._dpu_dyn[node_type]
        return result

    def dynamic_w(
        self, node_type: IntArray, cpu_util_delta: FloatArray, gpu_units_delta: FloatArray, dpus_delta: int
    ) -> FloatArray:
        """Extra watts from adding load (linear model, so it does not depend on current load)."""
        result: FloatArray = (
            self._cpu_dyn[node_type] * cpu_util_delta
            + self._gpu_dyn[node_type] * gpu_units_delta
            + self._dpu_dyn[node_type] * dpus_delta
        )
        return result
