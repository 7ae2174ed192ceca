"""The hub's settings, parsed once at the entry point (``commands.common.hub_settings``)."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from edgeplane_contract.credentials import NatsTls

from controlplane.federation.config import FederationConfig
from controlplane.hub.descheduler import DeschedulerSettings
from controlplane.hub.registration import RegistrationLimits
from controlplane.scheduling.profiles import Profile, load_profile
from controlplane.scheduling.shield import DEFAULT_BID_SHIELD_MARGIN
from controlplane.serverless.keepalive import Policy, make_policy

__all__ = ["HubSettings", "SeenIds"]


@dataclass(slots=True)
class HubSettings:
    nats_url: str
    federation: FederationConfig
    lease_missed_heartbeats: int = 3
    reconcile_interval_s: float = 0.5
    command_timeout_s: float = 2.0
    nats_connect_within_s: float = 30.0
    # Parsed once, at the entry point (``commands.common.hub_settings``): the function keep-alive
    # policy (fresh, it learns from this hub's arrivals) and the placement profile.
    function_policy: Policy = field(default_factory=lambda: make_policy("edgeplane"))
    scheduler: Profile = field(default_factory=lambda: load_profile("edgeplane"))
    # An exported PPO placement policy that picks among the profile's candidates (None: the
    # profile picks); loaded by ``runner.build_hub``, never deferring (``learn.chooser``).
    placement_model: Path | None = None
    bid_deadline_ms: float = 50.0  # how long the bid round waits for local policies; 0: no bids
    # The bids' SLA shield (hub/bidding.py, scheduling/shield.py): a node whose QoS term in the
    # hub's estimate is more than this below the best candidate's is not placed on; None: off.
    bid_shield_margin: float | None = DEFAULT_BID_SHIELD_MARGIN
    hub_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    nats_seed: str | None = field(default=None, repr=False)  # the hub's nkey seed; None: anonymous
    nats_tls: NatsTls | None = None
    # Registrations only from nodes with active credentials, for the cluster they enrolled in (the
    # NATS server authenticates them; this is the hub's own check behind it).
    require_enrolment: bool = False
    registration: RegistrationLimits = field(default_factory=RegistrationLimits)
    # Runtime observations kept in the store and replayed into the interference estimate at
    # start (``hub.learning``): the newest this many.
    runtime_observations_kept: int = 5000
    # Moving work off anomalous nodes within a disruption budget (hub/descheduler.py).
    descheduler: DeschedulerSettings = field(default_factory=DeschedulerSettings)


class SeenIds:
    """A bounded set of processed message ids (duplicates and replays are no-ops)."""

    def __init__(self, size: int = 50_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def __contains__(self, key: str) -> bool:
        return key in self._ids

    def add(self, key: str) -> None:
        self._ids[key] = None
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)
