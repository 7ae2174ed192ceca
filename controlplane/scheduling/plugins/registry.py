"""The plugin registry: a plain dict from plugin name to factory ``(args, handle) -> plugin``.

Profiles refer to plugins by these names. Out-of-tree plugins (e.g. a learned policy's score
plugin) call :func:`register` before a profile that names them is built.
"""

from __future__ import annotations

from controlplane.scheduling.framework import PluginFactory
from controlplane.scheduling.plugins import (
    balanced_allocation,
    data_locality,
    default_binder,
    default_preemption,
    energy,
    gpu_fragmentation,
    least_allocated,
    most_allocated,
    multi_objective,
    node_affinity,
    node_ready,
    node_resources_fit,
    topology_spread,
    volcano_binpack,
)

__all__ = ["REGISTRY", "register"]

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
    default_preemption.NAME: default_preemption.new,
    default_binder.NAME: default_binder.new,
}


def register(name: str, factory: PluginFactory, *, replace: bool = False) -> None:
    """Add a plugin factory under ``name`` (refuses to shadow one unless ``replace``)."""
    if name in REGISTRY and not replace:
        raise ValueError(f"plugin {name!r} is already registered")
    REGISTRY[name] = factory
