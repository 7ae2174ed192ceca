"""Power source and battery level from Linux's ``/sys/class/power_supply``.

Each supply is a folder with a ``type`` file (Mains, USB, Battery, UPS, ...). Mains/USB supplies
have ``online`` (1/0); batteries have ``capacity`` (percent) and ``status`` (Charging, Discharging,
Full, Not charging). The node runs on battery when a battery is present and no mains/USB/UPS supply
is online. A machine with no supply entries at all (servers, VMs) is mains-powered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["DEFAULT_POWER_SUPPLY_PATH", "PowerReader", "PowerState", "SysfsPowerReader"]

log = logging.getLogger("edgeplane.agent.power")

DEFAULT_POWER_SUPPLY_PATH = "/sys/class/power_supply"


@dataclass(slots=True)
class PowerState:
    source: str  # "mains" | "battery"
    battery_percent: float | None = None
    battery_status: str | None = None
    # On battery, the node's draw as the battery reports it (``power_now``, else ``current_now`` x
    # ``voltage_now``); None on mains or where the battery gives neither.
    power_w: float | None = None


class PowerReader(Protocol):
    def read(self) -> PowerState: ...


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _micro(path: Path) -> float | None:
    text = _read(path)
    try:
        value = float(text) / 1e6 if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def _battery_draw_w(supply: Path) -> float | None:
    """Watts a battery delivers: ``power_now`` (µW), else ``current_now`` (µA) x ``voltage_now`` (µV)."""
    watts = _micro(supply / "power_now")
    if watts is not None:
        return watts
    amps, volts = _micro(supply / "current_now"), _micro(supply / "voltage_now")
    return amps * volts if amps is not None and volts is not None else None


class SysfsPowerReader:
    """Reads a power_supply tree; ``root`` can point at a fixture tree in tests."""

    def __init__(self, root: str | Path = DEFAULT_POWER_SUPPLY_PATH) -> None:
        self.root = Path(root)

    def read(self) -> PowerState:
        try:
            supplies = sorted(p for p in self.root.iterdir() if p.is_dir())
        except OSError:
            return PowerState(source="mains")
        external_online = False
        batteries: list[tuple[float | None, str | None]] = []
        draws: list[float | None] = []
        for supply in supplies:
            kind = (_read(supply / "type") or "").lower()
            if kind in ("mains", "usb", "ups", "usb_c", "usb_pd", "wireless"):
                if _read(supply / "online") == "1":
                    external_online = True
            elif kind == "battery":
                if _read(supply / "present") == "0":
                    continue
                capacity = _read(supply / "capacity")
                try:
                    percent = max(0.0, min(100.0, float(capacity))) if capacity is not None else None
                except ValueError:
                    log.warning("unreadable battery capacity %r in %s", capacity, supply)
                    percent = None
                batteries.append((percent, _read(supply / "status")))
                draws.append(_battery_draw_w(supply))
        if not batteries:
            return PowerState(source="mains")
        levels = [p for p, _ in batteries if p is not None]
        level = sum(levels) / len(levels) if levels else None
        on_battery = not external_online
        known = [w for w in draws if w is not None]
        return PowerState(
            source="battery" if on_battery else "mains",
            battery_percent=level,
            battery_status=batteries[0][1],
            power_w=sum(known) if on_battery and known else None,
        )
