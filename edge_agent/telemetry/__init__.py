"""Telemetry readers: system (CPU, memory), power (mains/battery) and GPUs (NVML).

Each reader is a small Protocol with a real implementation; tests point the real readers at
fixture files (a fake ``/sys/class/power_supply`` tree) or substitute a fixed reader.
"""

from edge_agent.telemetry.gpu import GpuReader, NvmlGpuReader
from edge_agent.telemetry.power import PowerReader, PowerState, SysfsPowerReader
from edge_agent.telemetry.system import (
    CpuBusyReader,
    CpuPressureReader,
    ProcPressureReader,
    PsutilBusyReader,
    PsutilSystemReader,
    SystemReader,
    SystemSample,
)

__all__ = [
    "CpuBusyReader",
    "CpuPressureReader",
    "GpuReader",
    "NvmlGpuReader",
    "PowerReader",
    "PowerState",
    "ProcPressureReader",
    "PsutilBusyReader",
    "PsutilSystemReader",
    "SysfsPowerReader",
    "SystemReader",
    "SystemSample",
]
