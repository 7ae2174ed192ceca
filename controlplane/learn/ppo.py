"""PPO with action masking (sb3-contrib's ``MaskablePPO``), started by behaviour cloning.

:func:`train` builds a vector of :class:`~.curriculum.CurriculumEnv` (local subprocesses by
default), a ``MaskablePPO`` with :class:`~.slot_policy.SlotPolicy` (value baseline and GAE as
sb3 does them), clones the heuristic into it (:mod:`.bc`), then trains with an entropy
coefficient that falls linearly from ``ent_start`` to ``ent_end``. It writes ``model.zip``,
``config.json`` (everything needed to reproduce and to evaluate it), ``curve.csv`` and
``curve.png`` (per PPO update: mean episode return, share of decisions equal to the heuristic's).
The same ``seed`` on the same machine gives the same weights.

torch and sb3-contrib are imported inside the functions, never at module import: the hub and
the agents import nothing of them, and without them :func:`require` says what to install.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from controlplane.learn.curriculum import Curriculum, CurriculumEnv
from controlplane.learn.observe import BoolMask, FloatObs

__all__ = [
    "INSTALL_HINT",
    "VEC_BACKENDS",
    "MissingTrainDeps",
    "PPOConfig",
    "export_weights",
    "load_policy",
    "make_vec_env",
    "plot_curve",
    "require",
    "train",
]

INSTALL_HINT = "pip install -e '.[train]'"

VEC_BACKENDS = ("subproc", "dummy", "ray")
"""Where the training environments run (:func:`make_vec_env`)."""


class MissingTrainDeps(RuntimeError):
    """torch or sb3-contrib is not installed."""


def require() -> None:
    """Raise :class:`MissingTrainDeps` (one line, with the install command) unless PPO can run."""
    try:
        import sb3_contrib  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise MissingTrainDeps(
            f"PPO needs torch and sb3-contrib ({exc.name} is missing): {INSTALL_HINT}"
        ) from None


@dataclass(frozen=True, slots=True)
class PPOConfig:
    """Everything a training run depends on (saved as config.json)."""

    seed: int = 0
    timesteps: int = 100_000
    n_envs: int = 2
    vec: str = "subproc"
    """``subproc`` (local subprocesses, the default), ``dummy`` (in this process) or ``ray``
    (Ray actors: :mod:`.ray_vec`, the ``[ray]`` extra)."""
    ray_address: str | None = None
    """With ``vec="ray"``: the Ray cluster to run the environments on (None: a local Ray)."""
    max_nodes: int = 16
    hidden: int = 64
    n_steps: int = 512
    batch_size: int = 256
    n_epochs: int = 4
    learning_rate: float = 1e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.1
    ent_start: float = 0.003
    ent_end: float = 0.0
    ent_decay_steps: int | None = None
    """Steps over which the entropy coefficient falls to ``ent_end`` (None: ``timesteps``)."""
    bc_decisions: int = 20_000
    bc_epochs: int = 15
    max_wall_s: float | None = None
    """Stop PPO once the whole run has taken this long (a budget guard; the report says
    ``stopped_early``). It stops between updates, so ``timesteps`` = the steps reached, with
    ``ent_decay_steps`` = the original ``timesteps``, reproduces the weights from the seed."""
    curriculum: Curriculum = field(default_factory=Curriculum)

    def __post_init__(self) -> None:
        if self.vec not in VEC_BACKENDS:
            raise ValueError(f"vec must be one of {', '.join(VEC_BACKENDS)}")
        if self.ray_address is not None and self.vec != "ray":
            raise ValueError("ray_address needs vec 'ray'")
        for name in ("n_envs", "n_steps", "batch_size", "n_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.timesteps < 0:
            raise ValueError("timesteps must be >= 0 (0: behaviour cloning only)")
        if self.bc_decisions < 0:
            raise ValueError("bc_decisions must be >= 0")

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["curriculum"] = self.curriculum.describe()
        return d

    @classmethod
    def from_description(cls, d: Mapping[str, Any]) -> PPOConfig:
        return cls(**{**d, "curriculum": Curriculum.from_description(d["curriculum"])})

    def ent_coef(self, progress: float) -> float:
        """The entropy coefficient at ``progress`` in [0, 1] of training (linear)."""
        return self.ent_start + (self.ent_end - self.ent_start) * min(max(progress, 0.0), 1.0)


def _env_factory(cfg: PPOConfig) -> Callable[[], Any]:
    def make() -> Any:
        from stable_baselines3.common.monitor import Monitor

        return Monitor(CurriculumEnv(cfg.curriculum, max_nodes=cfg.max_nodes))

    return make


def make_vec_env(backend: str, factories: list[Callable[[], Any]], *, ray_address: str | None = None) -> Any:
    """A vector of the environments ``factories`` build, run by ``backend`` (:data:`VEC_BACKENDS`)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if backend == "subproc":
        return SubprocVecEnv(factories)
    if backend == "dummy":
        return DummyVecEnv(factories)
    if backend == "ray":
        from controlplane.learn.ray_vec import RayVecEnv

        return RayVecEnv(factories, address=ray_address)
    raise ValueError(f"unknown vec backend {backend!r}; known: {', '.join(VEC_BACKENDS)}")


def _single_thread() -> None:
    """One torch thread: the machine is shared, and threads would make runs non-reproducible."""
    import torch as th

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    th.set_num_threads(1)


def train(cfg: PPOConfig, out: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Clone, then PPO; write the run's files into ``out``; return its report."""
    require()
    _single_thread()
    from sb3_contrib import MaskablePPO

    from controlplane.learn.slot_policy import SlotPolicy

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    factories = [_env_factory(cfg) for _ in range(cfg.n_envs)]
    if cfg.vec == "ray":
        from controlplane.learn.ray_vec import require_ray

        require_ray()
    venv = make_vec_env(cfg.vec, factories, ray_address=cfg.ray_address)
    try:
        model = MaskablePPO(
            SlotPolicy,
            venv,
            learning_rate=cfg.learning_rate,
            n_steps=cfg.n_steps,
            batch_size=cfg.batch_size,
            n_epochs=cfg.n_epochs,
            gamma=cfg.gamma,
            gae_lambda=cfg.gae_lambda,
            clip_range=cfg.clip_range,
            ent_coef=cfg.ent_start,
            policy_kwargs={"hidden": cfg.hidden},
            seed=cfg.seed,
            device="cpu",
            verbose=0,
        )
        report: dict[str, Any] = {"config": cfg.describe()}
        if cfg.bc_decisions:
            report["bc"] = _clone(model, cfg, log)
            # The cloned starting point, for comparison (eval --algo ppo includes it as "bc").
            model.save(out / "bc.zip")
        curve = _Curve(cfg, log, started)
        t0 = time.perf_counter()
        if cfg.timesteps:
            model.learn(total_timesteps=cfg.timesteps, callback=curve.callback())
        ppo_s = time.perf_counter() - t0
    finally:
        venv.close()
    model.save(out / "model.zip")
    report["ppo"] = {
        "timesteps": int(model.num_timesteps),
        "updates": len(curve.rows),
        "wall_s": ppo_s,
        "s_per_million_steps": ppo_s / max(model.num_timesteps, 1) * 1e6,
        "stopped_early": curve.stopped_early,
    }
    report["wall_s"] = time.perf_counter() - started
    _write_curve(out, curve.rows, report)
    (out / "config.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    log(f"wrote {out / 'model.zip'} after {report['wall_s']:.0f} s")
    return report


def _clone(model: Any, cfg: PPOConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """Behaviour-clone the heuristic into ``model``'s policy; agreement on seen and unseen decisions."""
    from controlplane.learn import bc

    t0 = time.perf_counter()
    # Demonstration seeds differ from the rollout envs' (seed + rank) and from each other.
    demos = bc.collect(
        cfg.curriculum, decisions=cfg.bc_decisions, seed=cfg.seed + 10_000, max_nodes=cfg.max_nodes
    )
    val = bc.collect(
        cfg.curriculum,
        decisions=max(cfg.bc_decisions // 5, 1),
        seed=cfg.seed + 20_000,
        max_nodes=cfg.max_nodes,
    )
    collect_s = time.perf_counter() - t0
    before = bc.agreement(model.policy, val)
    history = bc.clone(model.policy, demos, epochs=cfg.bc_epochs, seed=cfg.seed, log=log)
    result: dict[str, Any] = {
        "decisions": len(demos),
        "validation_decisions": len(val),
        "heuristic_mean_episode_return": float(np.mean(demos.episode_returns)),
        "agreement_before": before,
        "agreement_train": bc.agreement(model.policy, demos),
        "agreement_validation": bc.agreement(model.policy, val),
        "collect_s": collect_s,
        "clone_s": time.perf_counter() - t0 - collect_s,
        "history": history,
    }
    log(
        f"BC: {len(demos)} heuristic decisions; agreement {100 * before['exact']:.1f}% -> "
        f"{100 * result['agreement_train']['exact']:.1f}% (train), "
        f"{100 * result['agreement_validation']['exact']:.1f}% (unseen; "
        f"{100 * result['agreement_validation']['tied']:.1f}% counting equally scored nodes)"
    )
    return result


class _Curve:
    """Per PPO update: mean return of the episodes that ended, agreement with the teacher."""

    def __init__(self, cfg: PPOConfig, log: Callable[[str], None], started: float) -> None:
        self.cfg, self.log, self.started = cfg, log, started
        self.rows: list[dict[str, float]] = []
        self._returns: list[float] = []
        self._agree = self._steps = 0
        self.stopped_early = False

    def callback(self) -> Any:
        from stable_baselines3.common.callbacks import BaseCallback

        curve = self

        class Callback(BaseCallback):
            def _on_rollout_start(self) -> None:
                decay = curve.cfg.ent_decay_steps or curve.cfg.timesteps
                progress = self.model.num_timesteps / max(decay, 1)
                self.model.ent_coef = curve.cfg.ent_coef(progress)  # type: ignore[attr-defined]

            def _on_step(self) -> bool:
                limit = curve.cfg.max_wall_s
                if limit is not None and time.perf_counter() - curve.started > limit:
                    curve.stopped_early = True
                    return False
                for info in self.locals["infos"]:
                    curve._steps += 1
                    curve._agree += bool(info.get("teacher_agrees", False))
                    if "episode" in info:
                        curve._returns.append(float(info["episode"]["r"]))
                return True

            def _on_rollout_end(self) -> None:
                curve.update(self.model.num_timesteps, float(self.model.ent_coef))  # type: ignore[attr-defined]

        return Callback()

    def update(self, timesteps: int, ent_coef: float) -> None:
        row = {
            "update": len(self.rows) + 1,
            "timesteps": timesteps,
            "episodes": len(self._returns),
            "mean_episode_return": float(np.mean(self._returns)) if self._returns else math.nan,
            "teacher_agreement": self._agree / max(self._steps, 1),
            "ent_coef": ent_coef,
            "wall_s": time.perf_counter() - self.started,
        }
        self.rows.append(row)
        self._returns, self._agree, self._steps = [], 0, 0
        if row["episodes"]:
            self.log(
                f"update {row['update']} ({timesteps} steps): {row['episodes']} episodes, mean return "
                f"{row['mean_episode_return']:.2f}, "
                f"agrees with heuristic {100 * row['teacher_agreement']:.1f}%"
            )


def _write_curve(out: Path, rows: list[dict[str, float]], report: Mapping[str, Any]) -> None:
    """curve.csv, and curve.png where matplotlib is installed."""
    if not rows:
        return
    with (out / "curve.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot_curve(out, out / "curve.png")


def _rolling(rows: list[dict[str, float]], window: int) -> list[float]:
    """Mean episode return over the last ``window`` updates' episodes (the stages cycle, so one
    update's few episodes swing with the load they ran)."""
    out: list[float] = []
    for i in range(len(rows)):
        part = [r for r in rows[max(0, i - window + 1) : i + 1] if r["episodes"]]
        n = sum(r["episodes"] for r in part)
        out.append(sum(r["mean_episode_return"] * r["episodes"] for r in part) / n if n else math.nan)
    return out


def plot_curve(run_dir: Path, png: Path, window: int = 10) -> None:
    """Plot ``run_dir``'s curve.csv (with its config.json's BC figures) to ``png``."""
    with (run_dir / "curve.csv").open(encoding="utf-8") as f:
        rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    config = run_dir / "config.json"
    report = json.loads(config.read_text(encoding="utf-8")) if config.exists() else {}
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    steps = [r["timesteps"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ax1.plot(
        steps,
        [r["mean_episode_return"] for r in rows],
        ".",
        alpha=0.4,
        label="PPO (episodes ended in the update)",
    )
    ax1.plot(steps, _rolling(rows, window), "-", label=f"PPO (episodes of the last {window} updates)")
    bc_info = report.get("bc")
    if bc_info:
        ax1.axhline(
            bc_info["heuristic_mean_episode_return"], color="k", ls="--", label="heuristic (same curriculum)"
        )
    ax1.set_ylabel("mean episode return")
    ax1.legend(fontsize=8)
    ax2.plot(steps, [100 * r["teacher_agreement"] for r in rows], ".-", label="PPO rollout actions")
    if bc_info:
        ax2.axhline(
            100 * bc_info["agreement_validation"]["exact"],
            color="k",
            ls="--",
            label="BC argmax (unseen decisions)",
        )
    ax2.set_ylabel("agrees with heuristic (%)")
    ax2.set_xlabel("environment steps (decisions)")
    ax2.legend(fontsize=8)
    fig.suptitle("MaskablePPO from behaviour cloning: learning curve")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def load_policy(
    model_dir: Path, name: str = "model"
) -> tuple[Callable[[FloatObs, BoolMask, Mapping[str, Any]], int], PPOConfig]:
    """The trained policy (``name``: ``model``, or ``bc`` the cloned start), deterministic (the
    most likely allowed action), and its config."""
    require()
    _single_thread()
    from sb3_contrib import MaskablePPO

    report = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    cfg = PPOConfig.from_description(report["config"])
    model = MaskablePPO.load(model_dir / f"{name}.zip", device="cpu")

    def act(obs: FloatObs, mask: BoolMask, info: Mapping[str, Any]) -> int:
        action, _ = model.predict(obs, action_masks=mask, deterministic=True)
        return int(action)

    return act, cfg


def export_weights(model_dir: Path, name: str = "model") -> Any:
    """The actor of a trained ``{name}.zip`` as :class:`~.slot_model.SlotWeights` (NumPy arrays,
    weights as [in, out]), for :func:`~.slot_model.save_model`."""
    require()
    _single_thread()
    from sb3_contrib import MaskablePPO
    from torch import nn

    from controlplane.learn.slot_model import SlotWeights

    model = MaskablePPO.load(model_dir / f"{name}.zip", device="cpu")
    extractor = model.policy.mlp_extractor

    def layers(seq: Any) -> tuple[Any, ...]:
        return tuple(
            (
                m.weight.detach().cpu().numpy().T.astype(np.float32).copy(),
                m.bias.detach().cpu().numpy().astype(np.float32).copy(),
            )
            for m in seq
            if isinstance(m, nn.Linear)
        )

    return SlotWeights(
        node=layers(extractor.actor_node),
        embed=layers(extractor.actor_embed),
        defer=layers(extractor.actor_defer),
    )
