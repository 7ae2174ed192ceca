"""The vocabulary of keep-alive policies: the :class:`Window` a policy gives an idle instance, and
the two protocols, :class:`KeepAlivePolicy` and :class:`PrewarmAdvisor`, that every policy of
:mod:`controlplane.serverless.keepalive` implements."""

from __future__ import annotations

from typing import NamedTuple, Protocol

__all__ = ["KeepAlivePolicy", "PrewarmAdvisor", "Window"]


class Window(NamedTuple):
    """What to do with an instance that just went idle.

    ``prewarm_s == 0``: keep it loaded for ``keep_alive_s``. ``prewarm_s > 0``: unload it now,
    have it loaded (warm) again ``prewarm_s`` after now, and keep it ``keep_alive_s`` from then.
    ``keep_alive_s == 0`` with ``prewarm_s == 0`` means unload and do not come back.
    """

    prewarm_s: float
    keep_alive_s: float


class KeepAlivePolicy(Protocol):
    """Per-function keep-alive / pre-warm decisions, updated one invocation at a time.

    Times are seconds on one monotonic clock (the simulator's or the hub's). Calls for one
    function must come in time order; different functions are independent.
    """

    @property
    def name(self) -> str:
        """The registry name, e.g. ``"hybrid"``."""
        ...

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> None:
        """Record an invocation arriving at ``t_s`` that runs ``duration_s``.

        ``concurrency`` is the number of the function's invocations in flight including this
        one (1 when the caller does not know).
        """
        ...

    def keep_alive_s(self, function_id: str) -> float:
        """How long to keep the function's instance after the prewarm point (see :class:`Window`)."""
        ...

    def prewarm_after_s(self, function_id: str) -> float:
        """When, after the last invocation's end, to have an instance warm again (0: never unload)."""
        ...

    def release_window(self, function_id: str, t_s: float, *, idle_instances: int = 0) -> Window:
        """The window for one instance of ``function_id`` that goes idle at ``t_s``.

        ``idle_instances`` is how many of the function's other instances are idle (loaded or
        scheduled) at that moment; policies keep extra instances differently from the first.
        """
        ...


class PrewarmAdvisor(Protocol):
    """Learns, from arrivals alone, which functions to pre-warm when one is invoked."""

    @property
    def window_s(self) -> float:
        """A pre-warmed successor is expected within this many seconds of its trigger."""
        ...

    @property
    def episode_gap_s(self) -> float:
        """Only an invocation after a gap longer than this starts an *episode*; the advisor
        ignores other invocations, so callers may skip them (the simulator does)."""
        ...

    def observe_invocation(self, function_id: str, t_s: float) -> tuple[str, ...]:
        """Record an invocation (in global time order) and return the functions to pre-warm now."""
        ...
