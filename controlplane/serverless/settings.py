"""How the hub's serverless side is tuned: the keep-alive policy, the energy weights of routing and
the bounds on keep-alive."""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.serverless.keepalive import Policy, make_policy
from controlplane.serverless.router import EnergyWeights

__all__ = ["ServerlessSettings"]


@dataclass(slots=True)
class ServerlessSettings:
    policy: Policy = field(default_factory=lambda: make_policy("edgeplane"))  # parsed at the entry
    energy: EnergyWeights = field(default_factory=EnergyWeights)
    battery_keep_alive_factor: float = 0.5  # battery nodes keep idle instances this fraction as long
    max_keep_alive_s: float = 4 * 3600.0
    # Finished invocations (results, errors, timings) are kept this long for /v1/invocations/{id}.
    invocation_retention_s: float = 86400.0
    # A starting hub (a restart, a standby taking over) replays at most this many of the latest
    # stored arrivals into the keep-alive policy (``replay.py``; 0: starts it empty): 50,000 take
    # about two seconds, in the background (the hub serves meanwhile).
    replay_arrivals: int = 50_000
    # A forecast policy (``edgeplane-forecast*``) asks for at most this many pre-warms per bin,
    # the likeliest first (a bound on the requests a bin's start sends).
    forecast_prewarms_per_bin: int = 200
