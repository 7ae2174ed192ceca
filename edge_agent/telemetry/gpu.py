"""GPU and MIG telemetry through NVML (pynvml). No GPU or no driver is normal: an empty list."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from edgeplane_contract.messages import GpuTelemetry

__all__ = ["GpuReader", "NvmlGpuReader", "StaticGpuReader"]

log = logging.getLogger("edgeplane.agent.gpu")


class GpuReader(Protocol):
    def read(self) -> list[GpuTelemetry]: ...


class StaticGpuReader:
    """A fixed GPU inventory (tests, or nodes whose GPUs are described in the agent config)."""

    def __init__(self, gpus: list[GpuTelemetry]) -> None:
        self.gpus = gpus

    def read(self) -> list[GpuTelemetry]:
        return list(self.gpus)


class NvmlGpuReader:
    """Reads GPUs and their MIG devices; remembers when NVML is unavailable and stops asking."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self.available = False
        self.error: str | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.available = True
        except Exception as exc:  # no driver, no library, no GPU: all mean "no GPUs here"
            self.error = str(exc) or type(exc).__name__
            log.info("no NVIDIA GPUs visible (%s)", self.error)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None
            self.available = False

    def read(self) -> list[GpuTelemetry]:
        if not self.available:
            return []
        nv = self._nvml
        gpus: list[GpuTelemetry] = []
        try:
            count = nv.nvmlDeviceGetCount()
        except Exception as exc:
            log.warning("NVML device count failed: %s", exc)
            return []
        for index in range(count):
            try:
                gpus.append(self._read_device(nv, index))
            except Exception as exc:
                log.warning("NVML read of GPU %d failed: %s", index, exc)
        return gpus

    @staticmethod
    def _read_device(nv: Any, index: int) -> GpuTelemetry:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        name = nv.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        uuid = nv.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        memory = nv.nvmlDeviceGetMemoryInfo(handle)
        gpu = GpuTelemetry(
            index=index,
            name=name,
            uuid=uuid,
            memory_total_bytes=int(memory.total),
            memory_used_bytes=int(memory.used),
        )
        try:
            gpu.utilization_percent = float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:  # not supported in MIG mode
            pass
        try:
            gpu.power_w = nv.nvmlDeviceGetPowerUsage(handle) / 1000.0
        except Exception:
            pass
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
            gpu.mig_enabled = bool(current)
        except Exception:
            gpu.mig_enabled = False
        if gpu.mig_enabled:
            for mig_index in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, mig_index)
                except Exception:
                    continue
                mig_memory = nv.nvmlDeviceGetMemoryInfo(mig)
                mig_uuid = nv.nvmlDeviceGetUUID(mig)
                gpu.mig_devices.append(
                    {
                        "index": mig_index,
                        "uuid": mig_uuid.decode() if isinstance(mig_uuid, bytes) else str(mig_uuid),
                        "memory_total_bytes": int(mig_memory.total),
                        "memory_used_bytes": int(mig_memory.used),
                    }
                )
        return gpu
