"""Deterministic discrete-event simulator driving the real scheduler (``controlplane simulate``).

Modules: ``presets`` (fleets, workload mixes, physics knobs), ``workload`` (seeded arrivals),
``network`` (true links), ``engine`` (the event loop and node physics), ``metrics``, ``runner``,
``report`` and ``cli``; ``vmtrace`` and ``vmreplay`` replay the Azure VM trace.
See ``docs/bench-scheduling.md``.
"""

__all__: list[str] = []
