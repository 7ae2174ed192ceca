"""The baseline keep-alive policies: a fixed keep-alive for every idle instance (``fixed-10m``,
``no-keepalive``)."""

from __future__ import annotations

from controlplane.serverless.window import Window

__all__ = ["FixedKeepAlive"]


class FixedKeepAlive:
    """Keep every idle instance loaded for a fixed time (0: unload immediately)."""

    def __init__(self, keep_alive_s: float, *, name: str) -> None:
        if keep_alive_s < 0:
            raise ValueError("keep_alive_s must be >= 0")
        self._window = Window(0.0, float(keep_alive_s))
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> None:
        return None

    def keep_alive_s(self, function_id: str) -> float:
        return self._window.keep_alive_s

    def prewarm_after_s(self, function_id: str) -> float:
        return 0.0

    def release_window(self, function_id: str, t_s: float, *, idle_instances: int = 0) -> Window:
        return self._window
