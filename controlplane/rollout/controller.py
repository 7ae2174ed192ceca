"""The canary controller: steps a canary group up on a schedule, promotes it, or rolls it back
when its anomaly score against the production (control) group stays over a threshold while the
control group's own does not.

Both groups report one sample per finished workload (higher = worse, e.g. latency over SLA).
The baseline is the control group's: the 95th percentile of its latest 300 samples
(:class:`~.anomaly.AnomalyWindow`). A group's *current* value is the same percentile over its
latest ``recent`` samples (tail against tail: a policy that makes one workload in ten miss its
SLA hardly moves a mean, but it moves the tail). The canary's score is that of its current value
against the control's baseline; the control's score, that of the control's own current value
against the same baseline (it rises when something hits the whole fleet, which is not the
canary's fault).

Pure and clocked by the caller (simulated or wall seconds); every decision is a
:class:`RolloutEvent` in :attr:`CanaryController.events`, with the scores that made it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from controlplane.rollout.anomaly import AnomalyWindow

__all__ = [
    "CanaryController",
    "ClassGuards",
    "Group",
    "RolloutConfig",
    "RolloutEvent",
    "RolloutState",
    "guard",
    "judge",
    "rollout_config",
]

Group = Literal["canary", "control"]
RolloutState = Literal["canary", "promoted", "rolled_back"]


@dataclass(frozen=True, slots=True)
class RolloutConfig:
    """``steps``: the canary's share of new workloads, step by step (each in (0, 1], rising);
    each is held ``dwell_s`` and until the canary has ``min_samples`` outcomes in it, then the
    next one starts, and after the last the canary is promoted. A rollback needs the canary's
    score over ``threshold`` for ``sustain_s`` while the control's is not."""

    steps: tuple[float, ...] = (0.05, 0.25, 0.5, 1.0)
    dwell_s: float = 900.0
    threshold: float = 0.25
    sustain_s: float = 300.0
    window: int = 300
    percentile: float = 95.0
    recent: int = 30
    min_samples: int = 30
    baseline_floor: float = 0.0

    def __post_init__(self) -> None:
        if not self.steps or any(not 0.0 < s <= 1.0 for s in self.steps):
            raise ValueError("steps: each share must be in (0, 1]")
        if any(b <= a for a, b in zip(self.steps, self.steps[1:], strict=False)):
            raise ValueError("steps must rise")
        if self.dwell_s < 0 or self.sustain_s < 0:
            raise ValueError("dwell_s and sustain_s must be >= 0")
        if self.threshold <= 0:
            raise ValueError("threshold must be > 0")
        if self.baseline_floor < 0:
            raise ValueError("baseline_floor must be >= 0")
        if self.recent < 1 or self.min_samples < 1 or self.window < 1:
            raise ValueError("recent, min_samples and window must be at least 1")

    def to_json(self) -> dict[str, Any]:
        """The rules as a JSON object (what the store keeps of a live canary)."""
        return {**asdict(self), "steps": list(self.steps)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RolloutConfig:
        """The rules :meth:`to_json` wrote (other keys beside them are not the rules')."""
        names = set(cls.__dataclass_fields__)
        rules = {k: v for k, v in data.items() if k in names}
        return cls(**{**rules, "steps": tuple(rules["steps"])})


def rollout_config(request: Any) -> RolloutConfig:
    """The controller's rules from a canary request (its ``steps`` in percents, the rest by name:
    ``dwell_s``, ``threshold``, ``sustain_s``, ``window``, ``recent``, ``min_samples``,
    ``baseline_floor``); raises ValueError as :class:`RolloutConfig` does."""
    return RolloutConfig(
        steps=tuple(p / 100 for p in request.steps),
        dwell_s=request.dwell_s,
        threshold=request.threshold,
        sustain_s=request.sustain_s,
        window=request.window,
        recent=request.recent,
        min_samples=request.min_samples,
        baseline_floor=request.baseline_floor,
    )


@dataclass(frozen=True, slots=True)
class RolloutEvent:
    """One decision: ``start``, ``step``, ``promote`` or ``rollback``."""

    t_s: float
    kind: str
    fraction: float
    canary_score: float
    control_score: float
    baseline: float | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CanaryController:
    """See the module docstring."""

    def __init__(self, config: RolloutConfig | None = None, *, start_s: float = 0.0) -> None:
        self.config = cfg = config or RolloutConfig()
        self.state: RolloutState = "canary"
        self.step = 0
        self.fraction = cfg.steps[0]
        self._step_started = start_s
        self._step_samples = 0
        self._control = AnomalyWindow(cfg.window, cfg.percentile, floor=cfg.baseline_floor)
        self._recent: dict[Group, deque[float]] = {
            "canary": deque(maxlen=cfg.recent),
            "control": deque(maxlen=cfg.recent),
        }
        self._anomalous_since: float | None = None
        self.scores = (0.0, 0.0)
        self.samples: dict[Group, int] = {"canary": 0, "control": 0}
        self.events: list[RolloutEvent] = [
            RolloutEvent(start_s, "start", self.fraction, 0.0, 0.0, None, f"canary at {self.fraction:.0%}")
        ]

    @classmethod
    def resume(
        cls, config: RolloutConfig, *, step: int, events: list[RolloutEvent], t_s: float
    ) -> CanaryController:
        """A controller that had reached ``step`` with ``events`` behind it, judging again from
        ``t_s`` (a hub restarted or taken over): its windows and samples start empty and the
        step's dwell starts again, so it acts only on what it sees from now on."""
        if not 0 <= step < len(config.steps) or not events:
            raise ValueError("a resumed canary needs a step of its config and its events so far")
        controller = cls(config, start_s=t_s)
        controller.step = step
        controller.fraction = config.steps[step]
        controller.events = list(events)
        return controller

    def observe(self, group: Group, value: float, t_s: float) -> None:
        """One outcome of a workload of ``group`` at ``t_s``; may step, promote or roll back."""
        self._recent[group].append(value)
        self.samples[group] += 1
        if group == "control":
            self._control.add(value)
        else:
            self._step_samples += 1
        self.evaluate(t_s)

    def evaluate(self, t_s: float) -> None:
        """Judge now (called by :meth:`observe`; call it on a clock tick too)."""
        if self.state != "canary":
            return
        cfg = self.config
        canary, control = self._recent["canary"], self._recent["control"]
        if len(self._control) < cfg.min_samples or len(canary) < min(cfg.recent, cfg.min_samples):
            return
        canary_score = self._control.score(self._current(canary))
        control_score = self._control.score(self._current(control))
        self.scores = (canary_score, control_score)
        if canary_score > cfg.threshold and control_score <= cfg.threshold:
            if self._anomalous_since is None:
                self._anomalous_since = t_s
            if t_s - self._anomalous_since >= cfg.sustain_s:
                self._decide(
                    t_s,
                    "rollback",
                    0.0,
                    f"canary score {canary_score:.2f} over {cfg.threshold:g} for "
                    f"{t_s - self._anomalous_since:.0f} s while the control's was {control_score:.2f}",
                )
                self.state = "rolled_back"
            return
        self._anomalous_since = None
        if t_s - self._step_started < cfg.dwell_s or self._step_samples < cfg.min_samples:
            return
        if self.step + 1 < len(cfg.steps):
            self.step += 1
            self._step_started, self._step_samples = t_s, 0
            self._decide(t_s, "step", cfg.steps[self.step], f"no anomaly for {cfg.dwell_s:g} s")
        else:
            self.state = "promoted"
            self._decide(t_s, "promote", 1.0, f"every step held without an anomaly ({len(cfg.steps)} steps)")

    def roll_back(self, t_s: float, reason: str) -> None:
        """Roll back now, for a reason from outside (another metric's controller)."""
        if self.state == "canary":
            self._decide(t_s, "rollback", 0.0, reason)
            self.state = "rolled_back"

    def _current(self, recent: deque[float]) -> float:
        return float(np.percentile(np.fromiter(recent, dtype=np.float64), self.config.percentile))

    def _decide(self, t_s: float, kind: str, fraction: float, reason: str) -> None:
        self.fraction = fraction
        self.events.append(
            RolloutEvent(
                t_s, kind, fraction, self.scores[0], self.scores[1], self._control.baseline(), reason
            )
        )

    def describe(self) -> dict[str, Any]:
        """State, share, sample counts and the timeline (for reports)."""
        return {
            "state": self.state,
            "fraction": self.fraction,
            "samples": dict(self.samples),
            "events": [e.to_dict() for e in self.events],
        }


def guard(config: RolloutConfig) -> CanaryController:
    """A controller with a canary's rules over another signal, that only ever judges (one step,
    held for ever): its rollback is the canary's (:func:`judge`)."""
    return CanaryController(replace(config, steps=(1.0,), dwell_s=math.inf), start_s=0.0)


def judge(controller: CanaryController, guards: Sequence[tuple[CanaryController, str]], t_s: float) -> None:
    """The canary's controller and its guards judge at ``t_s``; a guard that rolled back rolls the
    canary back, its reason named by what the guard watches."""
    controller.evaluate(t_s)
    for watcher, what in guards:
        watcher.evaluate(t_s)
        if watcher.state == "rolled_back" and controller.state == "canary":
            controller.roll_back(t_s, f"{what}: {watcher.events[-1].reason}")


class ClassGuards:
    """A canary's signals judged per class as well (a workload's kind, a node's type), each
    (signal, class) in a judging controller of its own (:func:`guard`): a version or profile that
    hurts one class only is not hidden in the pooled window by the others. ``signals`` maps each
    signal's name to how a reason names it; ``noun`` names the members of a class ("workloads")."""

    def __init__(self, config: RolloutConfig, signals: dict[str, str], noun: str) -> None:
        self.config = config
        self.signals = signals
        self.noun = noun
        self._guards: dict[tuple[str, str], CanaryController] = {}

    def of(self, signal: str, name: str) -> CanaryController:
        """The guard of ``signal`` for class ``name`` (every signal's made when a class is first
        seen)."""
        name = name or "-"
        if (signal, name) not in self._guards:
            for each in self.signals:
                self._guards[(each, name)] = guard(self.config)
        return self._guards[(signal, name)]

    def guards(self) -> list[tuple[CanaryController, str]]:
        """For :func:`judge`: each guard and what its rollback's reason names."""
        return [
            (found, f"{name} {self.noun}' {self.signals[signal]}")
            for (signal, name), found in sorted(self._guards.items(), key=lambda item: item[0])
        ]

    def describe(self) -> list[dict[str, Any]]:
        """Each class's signals: their samples and scores per group."""
        names = sorted({name for _, name in self._guards})
        return [
            {
                "name": name,
                "signals": [
                    {
                        "signal": signal,
                        "samples": dict(self._guards[(signal, name)].samples),
                        "scores": dict(
                            zip(("canary", "control"), self._guards[(signal, name)].scores, strict=True)
                        ),
                    }
                    for signal in self.signals
                ],
            }
            for name in names
        ]
