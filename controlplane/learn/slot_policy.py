"""The PPO policy's network: one scorer shared by every node slot (imports torch; [train] only).

The observation is ``max_nodes`` node slots and a few fleet values (:mod:`.observe`). A flat MLP
would have to learn the same ranking once per slot; here one small network scores each slot
from its own columns and the fleet values, a second scores *defer* from the candidates' mean
embedding, and the critic reads its own per-slot embedding, pooled over the candidates. The
logits are permutation-equivariant in the slots, as the heuristic's ranking is, which is what
lets behaviour cloning reach the teacher. It plugs into sb3-contrib's
``MaskableActorCriticPolicy`` as its ``mlp_extractor`` (the action head becomes the identity).
"""

from __future__ import annotations

from typing import Any

import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from controlplane.learn.observe import GLOBAL_COLUMNS, NODE_COLUMNS

__all__ = ["SlotExtractor", "SlotPolicy"]


def _mlp(n_in: int, hidden: int, n_out: int | None = None) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()]
    if n_out is not None:
        layers.append(nn.Linear(hidden, n_out))
    return nn.Sequential(*layers)


class SlotExtractor(nn.Module):
    """Actor latent: the logits of every action; critic latent: a pooled embedding."""

    def __init__(self, n_features: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.slots = n_actions - 1
        self.width = len(NODE_COLUMNS)
        self.n_global = len(GLOBAL_COLUMNS)
        if n_features != self.slots * self.width + self.n_global:
            raise ValueError(f"observation of {n_features} values is not {self.slots} node slots")
        n_in = self.width + self.n_global
        self.actor_node = _mlp(n_in, hidden, 1)
        self.actor_embed = _mlp(n_in, hidden)
        self.actor_defer = _mlp(hidden + self.n_global, hidden, 1)
        self.critic_node = _mlp(n_in, hidden)
        self.critic = _mlp(hidden + self.n_global, hidden)
        self.latent_dim_pi = n_actions
        self.latent_dim_vf = hidden

    def _split(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Per-slot inputs (node columns + fleet values), fleet values, candidate flags."""
        nodes = x[:, : self.slots * self.width].reshape(-1, self.slots, self.width)
        fleet = x[:, self.slots * self.width :]
        both = th.cat((nodes, fleet.unsqueeze(1).expand(-1, self.slots, -1)), dim=2)
        return both, fleet, nodes[:, :, -1:]

    @staticmethod
    def _pool(h: th.Tensor, cand: th.Tensor) -> th.Tensor:
        return (h * cand).sum(dim=1) / cand.sum(dim=1).clamp(min=1.0)

    def forward_actor(self, x: th.Tensor) -> th.Tensor:
        both, fleet, cand = self._split(x)
        scores = self.actor_node(both).squeeze(2)
        pooled = self._pool(self.actor_embed(both), cand)
        defer = self.actor_defer(th.cat((pooled, fleet), dim=1))
        return th.cat((scores, defer), dim=1)

    def forward_critic(self, x: th.Tensor) -> th.Tensor:
        both, fleet, cand = self._split(x)
        pooled = self._pool(self.critic_node(both), cand)
        out: th.Tensor = self.critic(th.cat((pooled, fleet), dim=1))
        return out

    def forward(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(x), self.forward_critic(x)


class SlotPolicy(MaskableActorCriticPolicy):
    """``MaskableActorCriticPolicy`` with :class:`SlotExtractor` (``hidden``: its width)."""

    def __init__(self, *args: Any, hidden: int = 64, **kwargs: Any) -> None:
        self.hidden = hidden
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        n = int(self.action_space.n)  # type: ignore[attr-defined]
        self.mlp_extractor = SlotExtractor(self.features_dim, n, self.hidden)  # type: ignore[assignment]

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # The extractor's actor output already is the logits.
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "hidden": self.hidden}
