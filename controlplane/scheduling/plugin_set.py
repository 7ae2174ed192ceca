"""A profile's plugins, built once and sorted by extension point and capability.

The scheduler core reads plugins only through these lists and the framework's capabilities
(:class:`~.framework.RewardScorer`, :class:`~.framework.EnergyRuled`,
:class:`~.framework.CandidateExplainer`, :class:`~.framework.ResourceFitFilter`): it never asks
for a plugin by name or class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edgeplane_contract.objective import RewardConfig

from controlplane.errors import ConfigError
from controlplane.scheduling.framework import (
    BindPlugin,
    CandidateExplainer,
    EnergyRuled,
    FilterPlugin,
    Handle,
    Plugin,
    PluginFactory,
    PostFilterPlugin,
    PreFilterPlugin,
    ReservePlugin,
    ResourceFitFilter,
    RewardScorer,
    ScoreNormalizer,
    ScorePlugin,
)
from controlplane.scheduling.plugins.registry import INHERITS_PROFILE_REWARD, REGISTRY
from controlplane.scheduling.profiles import Profile

__all__ = ["PluginSet", "WeightedScorer", "build_plugin_set"]

WeightedScorer = tuple[ScorePlugin, float, ScoreNormalizer | None]
"""A score plugin, its profile weight, and itself again when it normalises its own scores."""


@dataclass(slots=True)
class PluginSet:
    """The plugins of each extension point in profile order, and what their capabilities say."""

    pre_filters: list[PreFilterPlugin] = field(default_factory=list)
    filters: list[FilterPlugin] = field(default_factory=list)
    post_filters: list[PostFilterPlugin] = field(default_factory=list)
    scorers: list[WeightedScorer] = field(default_factory=list)
    reservers: list[ReservePlugin] = field(default_factory=list)
    binders: list[BindPlugin] = field(default_factory=list)
    explainers: list[CandidateExplainer] = field(default_factory=list)
    reward_config: RewardConfig = field(default_factory=RewardConfig)
    """The last RewardScorer's reward (the contract's default without one)."""
    energy_rule: RewardConfig | None = None
    """The last EnergyRuled plugin's rule with its adaptive (battery) part on; None: not battery-aware."""
    fit_builtin: bool = True
    """Whether the core applies the resource mask itself (no plugin reports it)."""


def build_plugin_set(
    profile: Profile, handle: Handle, registry: Mapping[str, PluginFactory] | None = None
) -> PluginSet:
    """Build every plugin the profile names from ``registry`` (default: the built-in
    :data:`~.plugins.registry.REGISTRY`); a plugin refusing its args is a ConfigError."""
    factories = REGISTRY if registry is None else registry
    built = PluginSet()
    for i, spec in enumerate(profile.plugins):
        args = dict(spec.args)
        if spec.name in INHERITS_PROFILE_REWARD and "reward" not in args:
            args["reward"] = dict(profile.reward)
        if spec.name not in factories:
            raise ConfigError(profile.source, f"plugins[{i}].name", f"unknown plugin {spec.name!r}")
        try:
            plugin: Plugin = factories[spec.name](args, handle)
        except (TypeError, ValueError) as exc:
            raise ConfigError(profile.source, f"plugins[{i}].args", str(exc)) from None
        if isinstance(plugin, RewardScorer):
            built.reward_config = plugin.reward_config
        if isinstance(plugin, EnergyRuled) and plugin.energy_rule.adaptive.enabled:
            built.energy_rule = plugin.energy_rule
        if isinstance(plugin, ResourceFitFilter) and plugin.reports_resource_fit:
            built.fit_builtin = False
        if isinstance(plugin, CandidateExplainer):
            built.explainers.append(plugin)
        if isinstance(plugin, PreFilterPlugin):
            built.pre_filters.append(plugin)
        if isinstance(plugin, FilterPlugin):
            built.filters.append(plugin)
        if isinstance(plugin, PostFilterPlugin):
            built.post_filters.append(plugin)
        if isinstance(plugin, ScorePlugin):
            # Protocol isinstance checks are slow; decide once whether it normalises.
            normalizer = plugin if isinstance(plugin, ScoreNormalizer) else None
            built.scorers.append((plugin, spec.weight, normalizer))
        if isinstance(plugin, ReservePlugin):
            built.reservers.append(plugin)
        if isinstance(plugin, BindPlugin):
            built.binders.append(plugin)
    return built
