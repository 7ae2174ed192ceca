"""Fine-tuning a placement policy offline from field logs, held near the policy it starts from.

The learner sees only a :class:`~.field.FieldLog` (observations, masks, logged actions, the
behaviour's probabilities, noised rewards) and the starting model; it never steps the simulator.
It is advantage-weighted regression with a behaviour-regularising KL term (AWR, Peng et al.
2019; the KL anchor as in behaviour-regularised offline RL, Wu et al. 2019):

1. returns: each decision's discounted return within its episode, from the noised rewards;
2. critic: the model's value head regressed on those returns (``value_epochs``);
3. advantages ``A = G - V(s)``, divided by their standard deviation; weights
   ``w = min(exp(A / beta), max_weight)``;
4. actor: minimise ``-mean(w * log pi(a | s)) + kl * mean(KL(pi_start(. | s) || pi(. | s)))``
   over the logged states, ``pi`` masked as at decision time.

``beta`` sets how far good logged actions pull; ``kl`` how firmly the policy stays with the one
that made the log (the deployed one), which is what keeps a fine-tune on a few hours of noisy
field experience from unlearning what the simulator taught it. Logged actions are weighted as
they were taken; the behaviour's probabilities are kept in the log for importance weighting and
reported (their mean), not used by this estimator.

torch and sb3-contrib are imported inside the functions (the ``[train]`` extra).
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.learn.field_log import ActionProbs, FieldLog, discounted_returns
from controlplane.learn.observe import BoolMask, FloatObs

__all__ = ["FinetuneConfig", "behaviour_of", "finetune", "max_nodes_of"]


@dataclass(frozen=True, slots=True)
class FinetuneConfig:
    """Settings of :func:`finetune` (module docstring)."""

    gamma: float = 0.99
    beta: float = 1.0
    kl: float = 1.0
    max_weight: float = 20.0
    epochs: int = 4
    value_epochs: int = 4
    batch_size: int = 256
    learning_rate: float = 3e-4
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError("gamma must be in (0, 1]")
        for name in ("beta", "max_weight", "learning_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if self.kl < 0:
            raise ValueError("kl must be >= 0")
        for name in ("epochs", "value_epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")


def finetune(
    model_dir: Path,
    field_log: FieldLog,
    out: Path,
    *,
    cfg: FinetuneConfig | None = None,
    name: str = "model",
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fine-tune ``model_dir/{name}.zip`` on ``field_log``; write ``out/model.zip`` and a
    ``config.json`` (the starting model's, with this run's report under ``finetune``), so that
    ``policy eval|export --algo ppo --model out`` take it as any trained model. Returns the report."""
    from controlplane.learn.ppo import _single_thread, require

    require()
    _single_thread()
    import torch as th
    from sb3_contrib import MaskablePPO

    cfg = cfg or FinetuneConfig()
    started = time.perf_counter()
    source_config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    model: Any = MaskablePPO.load(model_dir / f"{name}.zip", device="cpu")
    policy: Any = model.policy
    expected = policy.observation_space.shape
    if field_log.obs.shape[1:] != expected or field_log.masks.shape[1] != policy.action_space.n:
        raise ValueError(
            f"the log's decisions ({field_log.obs.shape[1]} values, {field_log.masks.shape[1]} actions) "
            f"do not fit the model ({expected[0]} values, {policy.action_space.n} actions)"
        )
    reference = copy.deepcopy(policy)
    reference.set_training_mode(False)
    gen = th.Generator().manual_seed(cfg.seed)
    obs = th.as_tensor(field_log.obs)
    masks = th.as_tensor(field_log.masks)
    actions = th.as_tensor(field_log.actions)
    returns_np = discounted_returns(field_log.rewards, field_log.ends, cfg.gamma)
    returns = th.as_tensor(returns_np)
    n = len(field_log)

    with th.no_grad():
        ref_probs = _probs(reference, obs, masks)

    # 2. the critic alone (the actor's parameters get no gradient from the value loss: the
    #    networks are separate, SlotPolicy's docstring).
    value_opt = th.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
    policy.set_training_mode(True)
    value_rows = []
    for epoch in range(cfg.value_epochs):
        total = 0.0
        for idx in th.randperm(n, generator=gen).split(cfg.batch_size):
            values = policy.predict_values(obs[idx]).flatten()
            loss = th.nn.functional.mse_loss(values, returns[idx])
            value_opt.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            value_opt.step()
            total += loss.item() * len(idx)
        value_rows.append({"epoch": epoch, "value_mse": total / n})
        log(f"critic epoch {epoch}: value MSE {total / n:.4f}")

    # 3. advantages and weights
    with th.no_grad():
        values = th.cat([policy.predict_values(obs[i : i + 4096]).flatten() for i in range(0, n, 4096)])
    advantages = returns - values
    scale = float(advantages.std()) or 1.0
    weights = th.clamp(th.exp(advantages / scale / cfg.beta), max=cfg.max_weight)

    # 4. the actor
    actor_opt = th.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
    actor_rows = []
    for epoch in range(cfg.epochs):
        awr_sum = kl_sum = 0.0
        for idx in th.randperm(n, generator=gen).split(cfg.batch_size):
            dist = policy.get_distribution(obs[idx], action_masks=masks[idx].numpy())
            log_prob = dist.log_prob(actions[idx])
            awr = -(weights[idx] * log_prob).mean()
            kl = _kl(ref_probs[idx], dist.distribution.probs)
            loss = awr + cfg.kl * kl
            actor_opt.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            actor_opt.step()
            awr_sum += awr.item() * len(idx)
            kl_sum += kl.item() * len(idx)
        actor_rows.append({"epoch": epoch, "weighted_nll": awr_sum / n, "kl_to_start": kl_sum / n})
        log(f"actor epoch {epoch}: weighted NLL {awr_sum / n:.4f}, KL to the start {kl_sum / n:.4f}")
    policy.set_training_mode(False)

    with th.no_grad():
        new_probs = _probs(policy, obs, masks)
    changed = float((new_probs.argmax(dim=1) != ref_probs.argmax(dim=1)).float().mean())
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / "model.zip")
    if (model_dir / "bc.zip").exists() and model_dir.resolve() != out.resolve():
        shutil.copyfile(model_dir / "bc.zip", out / "bc.zip")
    report = {
        "source": str(model_dir / f"{name}.zip"),
        "config": asdict(cfg),
        "log": {
            "decisions": n,
            "episodes": int(field_log.ends.sum()),
            "mean_behaviour_prob": float(field_log.behaviour_prob.mean()),
            **{k: field_log.meta.get(k) for k in ("families", "explore", "epsilon", "clip")},
        },
        "critic": value_rows,
        "actor": actor_rows,
        "greedy_changed_share": changed,
        "weights": {"mean": float(weights.mean()), "max": float(weights.max())},
        "wall_s": time.perf_counter() - started,
    }
    config = {**source_config, "finetune": report}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    log(f"wrote {out / 'model.zip'}: greedy pick changed on {100 * changed:.1f}% of the logged decisions")
    return report


def max_nodes_of(model_dir: Path) -> int:
    """The node slots the trained model at ``model_dir`` observes (its environments' ``max_nodes``)."""
    from controlplane.learn.ppo import PPOConfig

    report = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    return PPOConfig.from_description(report["config"]).max_nodes


def behaviour_of(model_dir: Path, name: str = "model") -> ActionProbs:
    """The action probabilities of ``model_dir/{name}.zip`` (sampling from it is how it explores)."""
    from controlplane.learn.ppo import _single_thread, require

    require()
    _single_thread()
    import torch as th
    from sb3_contrib import MaskablePPO

    model: Any = MaskablePPO.load(model_dir / f"{name}.zip", device="cpu")

    def probs(obs: FloatObs, mask: BoolMask, info: Mapping[str, Any]) -> npt.NDArray[np.float64]:
        with th.no_grad():
            dist = model.policy.get_distribution(th.as_tensor(obs[None, :]), action_masks=mask[None, :])
            return np.asarray(dist.distribution.probs[0].numpy(), dtype=np.float64)

    return probs


def _probs(policy: Any, obs: Any, masks: Any) -> Any:
    """The masked action probabilities of every row, in chunks."""
    import torch as th

    parts = []
    for i in range(0, len(obs), 4096):
        dist = policy.get_distribution(obs[i : i + 4096], action_masks=masks[i : i + 4096].numpy())
        parts.append(dist.distribution.probs)
    return th.cat(parts)


def _kl(p: Any, q: Any) -> Any:
    """Mean KL(p || q) over rows; actions p gives no mass contribute nothing."""
    import torch as th

    tiny = th.finfo(q.dtype).tiny
    terms = th.where(p > 0, p * (th.log(p.clamp_min(tiny)) - th.log(q.clamp_min(tiny))), th.zeros_like(p))
    return terms.sum(dim=1).mean()
