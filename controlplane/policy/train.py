"""Train the local policy: distil the exhaustive reward argmax into a small MLP (numpy only).

Why distillation and not PPO: a node-local decision is a contextual bandit (one offer, one
action, an immediate reward that the environment can evaluate for every action), so the best
action of every training state is known exactly by trying all 64 bins. Supervised learning on
that teacher is what PPO would converge to, minus the variance. The student exists because the
teacher costs one reward evaluation per bin (milliseconds) and the agent must decide in
microseconds.

The student has two heads on one trunk: ``q`` (64 values, the predicted reward of every bin,
used as the decision's score) and ``logits`` (65, the policy over the bins and decline, used to
pick the action). One head cannot do both: trained on rewards alone it ranks near-ties poorly
(about 2/3 agreement with the teacher), trained to rank it stops predicting rewards (its values
drift by ~0.5 reward units). Loss per row:

* mean squared error between ``q`` and the true reward on the allowed bins (targets clipped to
  ``[-clip, clip]``: below ``-clip`` a bin loses to declining anyway), plus
* ``ce_weight`` x cross-entropy of the teacher's action under a softmax over the allowed
  actions' logits.

Optional fine-tuning (``finetune_steps``): REINFORCE on the logits' softmax policy with rewards
perturbed by Laplace noise of scale ``2 * clip / dp_epsilon`` (epsilon-DP per reported reward,
the mission's federated-learning privacy rule), kept only if held-out reward improves.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from edgeplane_contract.policy.actions import N_ACTIONS, N_BINS, select_actions, select_from_logits
from edgeplane_contract.policy.features import N_FEATURES

from controlplane.policy.samples import Samples

__all__ = ["MLP", "N_OUTPUTS", "TrainConfig", "finetune", "mean_reward", "split_heads", "train"]

# Output layout of the last layer: q (64 bins) then logits (64 bins + decline).
N_OUTPUTS = N_BINS + N_ACTIONS

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Trainer settings (defaults are what the shipped model was trained with)."""

    seed: int = 0
    train_seeds: int = 24  # seeds 0..train_seeds-1
    states_per_seed: int = 1000
    weights_per_state: int = 4
    val_seed_base: int = 9000
    val_states: int = 2000
    hidden: tuple[int, ...] = (128, 128)
    steps: int = 12000
    batch: int = 512
    lr: float = 2e-3
    lr_final: float = 5e-5
    ce_weight: float = 0.3
    clip: float = 3.0
    finetune_steps: int = 0
    finetune_lr: float = 2e-4
    dp_epsilon: float | None = 0.1


@dataclass(slots=True)
class MLP:
    """ReLU MLP: features -> hidden layers -> q (64) + logits (65). ``layers`` is [(W, b), ...]."""

    layers: list[tuple[F32, F32]] = field(default_factory=list)

    @classmethod
    def init(cls, sizes: tuple[int, ...], rng: np.random.Generator) -> MLP:
        layers = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            w = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
            layers.append((w, np.zeros(fan_out, dtype=np.float32)))
        return cls(layers)

    @property
    def sizes(self) -> tuple[int, ...]:
        return (self.layers[0][0].shape[0], *(w.shape[1] for w, _ in self.layers))

    def forward(self, x: F32) -> F32:
        h = x
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h

    def _forward_cache(self, x: F32) -> tuple[F32, list[F32]]:
        acts = [x]
        h = x
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
            acts.append(h)
        return h, acts

    def _backward(self, acts: list[F32], grad_out: F32) -> list[tuple[F32, F32]]:
        grads: list[tuple[F32, F32]] = []
        g = grad_out
        for i in range(len(self.layers) - 1, -1, -1):
            w, _ = self.layers[i]
            grads.append((acts[i].T @ g, g.sum(axis=0)))
            if i > 0:
                g = (g @ w.T) * (acts[i] > 0)
        return grads[::-1]

    def save(self, path: str) -> None:
        arrays: dict[str, Any] = {f"w{i}": w for i, (w, _) in enumerate(self.layers)}
        arrays.update({f"b{i}": b for i, (_, b) in enumerate(self.layers)})
        arrays["n_layers"] = np.array(len(self.layers))
        np.savez(path, **arrays)

    @classmethod
    def load(cls, path: str) -> MLP:
        with np.load(path) as data:
            n = int(data["n_layers"])
            return cls(
                [(data[f"w{i}"].astype(np.float32), data[f"b{i}"].astype(np.float32)) for i in range(n)]
            )

    def n_params(self) -> int:
        return sum(w.size + b.size for w, b in self.layers)


class _Adam:
    def __init__(self, model: MLP, lr: float) -> None:
        self.lr = lr
        self.t = 0
        self.m = [(np.zeros_like(w), np.zeros_like(b)) for w, b in model.layers]
        self.v = [(np.zeros_like(w), np.zeros_like(b)) for w, b in model.layers]

    def step(self, model: MLP, grads: list[tuple[F32, F32]]) -> None:
        self.t += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        corr = np.sqrt(1 - b2**self.t) / (1 - b1**self.t)
        for i, ((w, b), (gw, gb)) in enumerate(zip(model.layers, grads, strict=True)):
            mw, mb = self.m[i]
            vw, vb = self.v[i]
            for param, grad, m, v in ((w, gw, mw, vw), (b, gb, mb, vb)):
                m *= b1
                m += (1 - b1) * grad
                v *= b2
                v += (1 - b2) * grad * grad
                param -= (self.lr * corr * m / (np.sqrt(v) + eps)).astype(np.float32)


def split_heads(out: F32) -> tuple[F32, F32]:
    """(q (N, 64), logits (N, 65)) of the last layer's output."""
    return out[:, :N_BINS], out[:, N_BINS:]


def _masked(logits: F32, mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    result: npt.NDArray[np.float64] = np.where(mask, logits.astype(np.float64), -1e9)
    return result


def _softmax(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    result: npt.NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return result


def mean_reward(rewards: npt.NDArray[np.float64], actions: npt.NDArray[np.int64]) -> float:
    """Mean reward of taking ``actions`` (N,) given every action's reward (N, 65)."""
    return float(rewards[np.arange(len(actions)), actions].mean())


def _evaluate(
    model: MLP, data: Samples, rewards: npt.NDArray[np.float64], teacher: npt.NDArray[np.int64]
) -> dict[str, float]:
    q, logits = split_heads(model.forward(data.x))
    actions = select_from_logits(logits, data.mask)
    accepted = np.flatnonzero(actions < N_BINS)
    return {
        "agreement_with_teacher": float((actions == teacher).mean()),
        "mean_reward": mean_reward(rewards, actions),
        "teacher_mean_reward": mean_reward(rewards, teacher),
        "score_mean_abs_error": float(
            np.abs(q[accepted, actions[accepted]] - rewards[accepted, actions[accepted]]).mean()
        )
        if len(accepted)
        else 0.0,
    }


def train(cfg: TrainConfig, data: Samples, val: Samples, *, log: Any = None) -> tuple[MLP, dict[str, Any]]:
    """Distil the teacher in ``data`` into an MLP; model selection on ``val``."""
    rng = np.random.default_rng(cfg.seed)
    model = MLP.init((N_FEATURES, *cfg.hidden, N_OUTPUTS), rng)
    rewards = data.rewards()
    teacher = select_actions(rewards[:, :N_BINS], data.mask)
    allowed = data.mask[:, :N_BINS]
    target = np.where(allowed, np.clip(rewards[:, :N_BINS], -cfg.clip, cfg.clip), 0.0).astype(np.float32)
    val_rewards = val.rewards()
    val_teacher = select_actions(val_rewards[:, :N_BINS], val.mask)
    opt = _Adam(model, cfg.lr)
    n = len(data)
    started = time.perf_counter()
    history: list[dict[str, float]] = []
    best: tuple[float, MLP] | None = None
    eval_every = max(cfg.steps // 8, 1)
    for step in range(1, cfg.steps + 1):
        # Cosine decay from lr to lr_final.
        opt.lr = cfg.lr_final + 0.5 * (cfg.lr - cfg.lr_final) * (1 + np.cos(np.pi * step / cfg.steps))
        idx = rng.integers(0, n, cfg.batch)
        x, m, y, a = data.x[idx], data.mask[idx], target[idx], teacher[idx]
        out, acts = model._forward_cache(x)
        q, logits = split_heads(out)
        am = allowed[idx]
        count = max(int(am.sum()), 1)
        grad = np.zeros_like(out)
        grad[:, :N_BINS] = (2.0 / count) * np.where(am, q - y, 0.0)
        p = _softmax(_masked(logits, m))
        p[np.arange(len(a)), a] -= 1.0
        grad[:, N_BINS:] = (cfg.ce_weight / len(a)) * p
        opt.step(model, model._backward(acts, grad.astype(np.float32)))
        if step % eval_every == 0 or step == cfg.steps:
            metrics = _evaluate(model, val, val_rewards, val_teacher)
            metrics["step"] = step
            metrics["seconds"] = time.perf_counter() - started
            history.append(metrics)
            if log is not None:
                log(
                    f"step {step}: val agreement {metrics['agreement_with_teacher']:.4f}, "
                    f"mean reward {metrics['mean_reward']:.4f} "
                    f"(teacher {metrics['teacher_mean_reward']:.4f}), "
                    f"score error {metrics['score_mean_abs_error']:.4f}"
                )
            if best is None or metrics["mean_reward"] > best[0]:
                best = (metrics["mean_reward"], MLP([(w.copy(), b.copy()) for w, b in model.layers]))
    assert best is not None
    report = {
        "method": "distillation of the exhaustive reward argmax: q head (MSE on bin rewards) "
        "+ logits head (cross-entropy on the teacher action)",
        "config": asdict(cfg),
        "train_rows": n,
        "n_params": model.n_params(),
        "seconds": time.perf_counter() - started,
        "history": history,
        "selected_val_mean_reward": best[0],
    }
    return best[1], report


def finetune(
    cfg: TrainConfig, model: MLP, data: Samples, val: Samples, *, log: Any = None
) -> tuple[MLP, dict[str, Any]]:
    """REINFORCE on noisy (Laplace, epsilon-DP) rewards; returns the better of before/after on ``val``."""
    rng = np.random.default_rng(cfg.seed + 1)
    rewards = np.clip(data.rewards(), -cfg.clip, cfg.clip)
    val_rewards = val.rewards()
    val_teacher = select_actions(val_rewards[:, :N_BINS], val.mask)
    before = _evaluate(model, val, val_rewards, val_teacher)
    tuned = MLP([(w.copy(), b.copy()) for w, b in model.layers])
    opt = _Adam(tuned, cfg.finetune_lr)
    scale = 2.0 * cfg.clip / cfg.dp_epsilon if cfg.dp_epsilon else 0.0
    n = len(data)
    baseline = 0.0
    for _ in range(cfg.finetune_steps):
        idx = rng.integers(0, n, cfg.batch)
        out, acts = tuned._forward_cache(data.x[idx])
        _, logits = split_heads(out)
        p = _softmax(_masked(logits, data.mask[idx]))
        a = np.minimum((p.cumsum(axis=1) < rng.random((len(idx), 1))).sum(axis=1), N_BINS)
        r = rewards[idx, a]
        if scale:
            r = r + rng.laplace(0.0, scale, size=r.shape)
        adv = r - baseline
        baseline = 0.95 * baseline + 0.05 * float(r.mean())
        # d(-log pi(a) * adv)/d logits = (p - onehot(a)) * adv; the q head is left alone.
        g = np.zeros_like(out)
        p[np.arange(len(a)), a] -= 1.0
        g[:, N_BINS:] = p * adv[:, None] / len(a)
        opt.step(tuned, tuned._backward(acts, g.astype(np.float32)))
    after = _evaluate(tuned, val, val_rewards, val_teacher)
    kept = after["mean_reward"] > before["mean_reward"]
    if log is not None:
        log(
            f"fine-tune: val mean reward {before['mean_reward']:.4f} -> {after['mean_reward']:.4f} "
            f"({'kept' if kept else 'discarded'})"
        )
    report = {
        "method": "REINFORCE on the logits head, softmax over allowed actions, Laplace-noised rewards",
        "steps": cfg.finetune_steps,
        "dp_epsilon": cfg.dp_epsilon,
        "laplace_scale": scale,
        "val_before": before,
        "val_after": after,
        "kept": kept,
    }
    return (tuned if kept else model), report
