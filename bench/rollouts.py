"""Rollout throughput of PPO's environments on each vector backend: in-process, local
subprocesses (the default) and Ray actors, against a floor measured in the same run.

    python bench/rollouts.py [--envs 2] [--steps 4000] [--ppo-steps 2048] [--backends dummy,subproc,ray]
                             [--json F] [--plot F.png]

For each backend it steps ``--envs`` training environments (:class:`CurriculumEnv`, the
``edge-battery`` preset at load 1.3, 8 nodes, 15-minute episodes: a short version of the
curriculum ``policy train`` uses) with uniformly random valid actions, asking for the action
masks before every step as MaskablePPO does, and reports steps per second and **wall seconds per
million steps**. The floor is the same backend stepping a null environment of the same spaces
(no simulator: what the backend itself costs per step); the ratio says how much of a step is the
simulator. ``--ppo-steps`` (0: skip) also times ``MaskablePPO.learn`` over that many steps on
each backend (behaviour cloning off): rollouts plus the network updates.

Needs the ``[train]`` extra (and ``[ray]`` for the Ray row; a backend that cannot start is
reported, not fatal). Ray here is a local Ray started for the run (2 CPUs); its start-up time is
reported apart and not counted in the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym
import numpy as np

from controlplane.learn.curriculum import Curriculum, CurriculumEnv
from controlplane.learn.ppo import VEC_BACKENDS, PPOConfig, make_vec_env, require

CURRICULUM = Curriculum(presets=("edge-battery",), loads=(1.3,), nodes=8, horizon_s=900.0)
MAX_NODES = 16


class NullEnv(gym.Env[Any, Any]):
    """The training environment's spaces, no simulator: every action valid, zero reward."""

    def __init__(self, episode_steps: int = 200) -> None:
        probe: Any = CurriculumEnv(CURRICULUM, max_nodes=MAX_NODES)
        self.observation_space = probe.observation_space
        self.action_space = probe.action_space
        self._obs = np.zeros(probe.observation_space.shape, dtype=np.float32)
        self._mask = np.ones(int(probe.action_space.n), dtype=np.bool_)
        self._left = episode_steps
        self._episode_steps = episode_steps

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._left = self._episode_steps
        return self._obs, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._left -= 1
        return self._obs, 0.0, self._left <= 0, False, {}

    def action_masks(self) -> np.ndarray:
        return self._mask


def make_train_env() -> Any:
    return CurriculumEnv(CURRICULUM, max_nodes=MAX_NODES)


def make_null_env() -> Any:
    return NullEnv()


def step_rate(backend: str, make: Any, envs: int, steps: int) -> dict[str, float]:
    """Vector steps of ``envs`` environments on ``backend``; returns timings (steps count every env)."""
    started = time.perf_counter()
    venv = make_vec_env(backend, [make] * envs)
    try:
        ready_s = time.perf_counter() - started
        rng = np.random.default_rng(0)
        venv.seed(0)
        venv.reset()
        warm = max(1, steps // 20)
        t0 = 0.0
        for i in range(steps + warm):
            if i == warm:
                t0 = time.perf_counter()
            masks = np.stack(venv.env_method("action_masks"))
            venv.step(np.array([rng.choice(np.flatnonzero(m)) for m in masks]))
        wall = time.perf_counter() - t0
    finally:
        venv.close()
    env_steps = steps * envs
    return {"start_s": ready_s, "steps_per_s": env_steps / wall, "s_per_million": wall / env_steps * 1e6}


def ppo_rate(backend: str, envs: int, steps: int, out: Path) -> dict[str, float]:
    from controlplane.learn.ppo import train

    cfg = PPOConfig(
        seed=0,
        timesteps=steps,
        n_envs=envs,
        vec=backend,
        max_nodes=MAX_NODES,
        n_steps=max(64, steps // (2 * envs)),
        batch_size=128,
        n_epochs=2,
        bc_decisions=0,
        curriculum=CURRICULUM,
    )
    report = train(cfg, out / backend, log=lambda _: None)
    return {"steps": report["ppo"]["timesteps"], "s_per_million": report["ppo"]["s_per_million_steps"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4000, help="vector steps per backend (x envs env steps)")
    parser.add_argument("--ppo-steps", type=int, default=2048, help="MaskablePPO steps per backend (0: skip)")
    parser.add_argument("--backends", default=",".join(VEC_BACKENDS))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    require()
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in VEC_BACKENDS:
            parser.error(f"--backends: unknown {b!r}; known: {', '.join(VEC_BACKENDS)}")
    ray_started = None
    if "ray" in backends:
        try:
            import ray

            t0 = time.perf_counter()
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
            ray_started = time.perf_counter() - t0
        except Exception as exc:  # reported, not fatal: the other rows still mean something
            print(f"ray: cannot start ({exc}); its row is left out", file=sys.stderr)
            backends.remove("ray")
    rows: dict[str, dict[str, Any]] = {}
    for b in backends:
        print(f"  {b}: stepping", file=sys.stderr, flush=True)
        rows[b] = {"env": step_rate(b, make_train_env, args.envs, args.steps)}
        rows[b]["floor"] = step_rate(b, make_null_env, args.envs, args.steps)
        if args.ppo_steps:
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                rows[b]["ppo"] = ppo_rate(b, args.envs, args.ppo_steps, Path(tmp))
    if ray_started is not None:
        import ray

        ray.shutdown()
    base = rows.get("dummy", next(iter(rows.values())))["env"]["s_per_million"]
    print(
        f"rollouts: {args.envs} environments, {args.steps:,} vector steps each backend, "
        f"{os.cpu_count()} cores" + (f"; local Ray started in {ray_started:.1f} s" if ray_started else "")
    )
    print(
        "| backend | env steps/s | s per million env steps | vs dummy | floor (null env) s/M | env / floor "
        "| PPO s per million steps |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for b, r in rows.items():
        env, floor = r["env"], r["floor"]
        ppo = r.get("ppo")
        print(
            f"| {b} | {env['steps_per_s']:,.0f} | {env['s_per_million']:,.0f} | "
            f"{env['s_per_million'] / base:.2f}x | "
            f"{floor['s_per_million']:,.0f} | {env['s_per_million'] / floor['s_per_million']:.1f}x | "
            + (f"{ppo['s_per_million']:,.0f}" if ppo else "-")
            + " |"
        )
    doc = {"envs": args.envs, "steps": args.steps, "ray_start_s": ray_started, "backends": rows}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        names = list(rows)
        x = np.arange(len(names))
        ax.bar(x - 0.27, [rows[n]["env"]["s_per_million"] for n in names], 0.27, label="rollouts (simulator)")
        ax.bar(x, [rows[n]["floor"]["s_per_million"] for n in names], 0.27, label="floor (null env)")
        if args.ppo_steps:
            ax.bar(x + 0.27, [rows[n]["ppo"]["s_per_million"] for n in names], 0.27, label="PPO learn")
        ax.set_xticks(x, names)
        ax.set_ylabel("wall seconds per million steps")
        ax.set_yscale("log")
        ax.set_title(f"{args.envs} environments, {os.cpu_count()} cores", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
