"""Field experience in the simulator: a policy's decision log made on the physics seeds of one
family (world side: it runs simulator episodes; the learner, :mod:`.finetune`, reads only the
log, :mod:`.field_log`).

:func:`collect` runs a policy (a function giving each decision's action probabilities) on
held-out-style cases, mixing in uniform exploration over the allowed actions with probability
``explore``, and logs every decision with its measured reward, noised for ``epsilon``.
:func:`family_seeds` picks the physics seeds of one family from a range (the simulator draws a
family per seed: only its name is read here), so that logs come from one family and the
evaluation from another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from controlplane.learn.evaluate import Case
from controlplane.learn.field_log import ActionProbs, FieldLog, laplace_noise
from controlplane.learn.gym_env import EdgeplaneSchedEnv
from controlplane.learn.observe import BoolMask, FloatObs
from controlplane.learn.reward import OutcomeWeights
from controlplane.sim.physics_params import FAMILIES, draw_family

__all__ = ["collect", "family_seeds"]


def family_seeds(family: str, seeds: Iterable[int], *, count: int) -> tuple[int, ...]:
    """The first ``count`` physics seeds of ``seeds`` whose drawn family is ``family``."""
    known = [str(f) for f in FAMILIES]
    if family not in known:
        raise ValueError(f"unknown physics family {family!r} (known: {', '.join(known)})")
    if count < 1:
        raise ValueError("count must be >= 1")
    found = []
    for seed in seeds:
        if str(draw_family(seed)) == family:
            found.append(int(seed))
            if len(found) == count:
                return tuple(found)
    raise ValueError(f"only {len(found)} physics seeds of family {family!r} in the range given")


def collect(
    behaviour: ActionProbs,
    cases: Iterable[Case],
    *,
    explore: float = 0.1,
    epsilon: float | None = 1.0,
    clip: float = 1.0,
    seed: int = 0,
    max_nodes: int = 16,
    weights: OutcomeWeights | None = None,
    log: Callable[[str], None] | None = None,
) -> FieldLog:
    """Run ``behaviour`` on every case (one episode each) and log its decisions.

    With probability ``explore`` a decision is drawn uniformly from the allowed actions instead
    (the logged ``behaviour_prob`` is the mixture's). Rewards are clipped to ``clip`` and noised
    for ``epsilon`` (:func:`laplace_noise`)."""
    if not 0.0 <= explore <= 1.0:
        raise ValueError("explore must be in [0, 1]")
    rng = np.random.default_rng(seed)
    env = EdgeplaneSchedEnv(max_nodes=max_nodes, weights=weights)
    obs_l: list[FloatObs] = []
    mask_l: list[BoolMask] = []
    act_l: list[int] = []
    prob_l: list[float] = []
    rew_l: list[float] = []
    end_l: list[bool] = []
    cases = list(cases)
    try:
        for case in cases:
            obs, info = env.reset(seed=case.seed, options=case.reset_options())
            done, total = False, 0.0
            while not done:
                mask = env.action_masks()
                probs = _mixture(behaviour(obs, mask, info), mask, explore)
                action = int(rng.choice(len(probs), p=probs))
                obs_l.append(obs)
                mask_l.append(mask)
                act_l.append(action)
                prob_l.append(float(probs[action]))
                obs, reward, done, _, info = env.step(action)
                rew_l.append(float(reward))
                end_l.append(bool(done))
                total += reward
            if log:
                log(
                    f"logged {case.preset} load {case.load} seed {case.seed}/{case.physics_seed}: {total:.2f}"
                )
    finally:
        env.close()
    families = sorted({str(draw_family(c.physics_seed)) for c in cases if c.physics_seed is not None})
    return FieldLog(
        obs=np.stack(obs_l).astype(np.float32),
        masks=np.stack(mask_l).astype(bool),
        actions=np.asarray(act_l, dtype=np.int64),
        behaviour_prob=np.asarray(prob_l, dtype=np.float32),
        rewards=laplace_noise(np.asarray(rew_l), clip=clip, epsilon=epsilon, rng=rng),
        ends=np.asarray(end_l, dtype=bool),
        meta={
            "families": families,
            "cases": [
                {"preset": c.preset, "load": c.load, "seed": c.seed, "physics_seed": c.physics_seed}
                for c in cases
            ],
            "explore": explore,
            "epsilon": epsilon,
            "clip": clip,
        },
    )


def _mixture(probs: npt.NDArray[np.float64], mask: BoolMask, explore: float) -> npt.NDArray[np.float64]:
    """``probs`` restricted to the mask, mixed with the uniform over allowed actions."""
    allowed = np.asarray(mask, dtype=bool)
    p = np.where(allowed, np.clip(np.asarray(probs, dtype=np.float64), 0.0, None), 0.0)
    uniform = allowed / allowed.sum()
    total = p.sum()
    p = uniform if total <= 0 else p / total
    mixed = (1.0 - explore) * p + explore * uniform
    return np.asarray(mixed / mixed.sum())
