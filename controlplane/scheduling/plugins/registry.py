"""The plugin registry: a plain dict from plugin name to factory ``(args, handle) -> plugin``.

Profiles refer to plugins by these names. Out-of-tree plugins (e.g. a learned policy's score
plugin) call :func:`register` before a profile that names them is built.

:data:`VALIDATORS` holds optional checks of a plugin's args that must fail when the profile is
loaded (``profiles.parse_profile``), not later when a scheduler builds the plugin: for example a
model file the plugin needs. A validator raises ValueError or TypeError with the reason.

:data:`INHERITS_PROFILE_REWARD` names the plugins whose ``reward`` argument defaults to the
profile's reward block.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from controlplane.scheduling.framework import PluginFactory
from controlplane.scheduling.plugins import (
    balanced_allocation,
    data_locality,
    default_binder,
    default_preemption,
    energy,
    gpu_fragmentation,
    least_allocated,
    local_policy_bid,
    most_allocated,
    multi_objective,
    node_affinity,
    node_ready,
    node_resources_fit,
    topology_spread,
    volcano_binpack,
)

__all__ = ["INHERITS_PROFILE_REWARD", "REGISTRY", "VALIDATORS", "ArgsValidator", "register"]

ArgsValidator = Callable[[Mapping[str, Any]], None]

REGISTRY: dict[str, PluginFactory] = {
    node_ready.NAME: node_ready.new,
    node_resources_fit.NAME: node_resources_fit.new,
    node_affinity.NAME: node_affinity.new,
    topology_spread.NAME: topology_spread.new,
    least_allocated.NAME: least_allocated.new,
    most_allocated.NAME: most_allocated.new,
    balanced_allocation.NAME: balanced_allocation.new,
    volcano_binpack.NAME: volcano_binpack.new,
    gpu_fragmentation.NAME: gpu_fragmentation.new,
    energy.NAME: energy.new,
    data_locality.NAME: data_locality.new,
    multi_objective.NAME: multi_objective.new,
    local_policy_bid.NAME: local_policy_bid.new,
    default_preemption.NAME: default_preemption.new,
    default_binder.NAME: default_binder.new,
}

VALIDATORS: dict[str, ArgsValidator] = {
    local_policy_bid.NAME: local_policy_bid.validate,
}

# Plugins whose ``reward`` argument defaults to the profile's ``reward`` block (a scheduler fills
# it in when the profile's entry gives none).
INHERITS_PROFILE_REWARD: set[str] = {multi_objective.NAME}


def register(
    name: str, factory: PluginFactory, *, replace: bool = False, validate: ArgsValidator | None = None
) -> None:
    """Add a plugin factory under ``name`` (refuses to shadow one unless ``replace``).

    ``validate``, if given, checks the plugin's args whenever a profile naming it is loaded.
    """
    if name in REGISTRY and not replace:
        raise ValueError(f"plugin {name!r} is already registered")
    REGISTRY[name] = factory
    if validate is not None:
        VALIDATORS[name] = validate
    else:
        VALIDATORS.pop(name, None)
