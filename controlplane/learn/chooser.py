"""A scheduler :data:`~controlplane.scheduling.cycle.Chooser` that runs the exported PPO policy.

Loads a :mod:`.slot_model` ONNX file (fp32 or int8) with onnxruntime, refuses one whose columns
are not this build's (:class:`PlacementModelError`, one line), and picks, for each replica the
scheduler's cycle scored, the candidate with the highest logit, or *defer* when its logit is
higher (``allow_defer``; the live hub turns it off: a deferred replica would wait for the next
round with nothing learned about why). The rows are :func:`.observe.candidate_rows`, the values
PPO saw in its slots, clipped the same way. onnxruntime and NumPy only: the hub imports this,
never torch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.errors import EdgeplaneError
from controlplane.learn.observe import BOUND, candidate_rows
from controlplane.learn.slot_model import DEFER_NAME, INPUT_NAME, KIND, SCORES_NAME, columns_digest
from controlplane.scheduling.cycle import DEFER, Choice
from controlplane.scheduling.scheduler import Scheduler

__all__ = [
    "NEAR_TIE",
    "LearnedChooser",
    "PlacementModelError",
    "SlotObservationPolicy",
    "load_session",
    "model_input",
    "pick",
    "run_logits",
]


class PlacementModelError(EdgeplaneError):
    """A placement model that cannot be used: missing, unreadable, or made for other columns."""


def load_session(path: Path) -> Any:
    """An onnxruntime session on ``path`` (one thread: a decision is a few small matrices)."""
    import onnxruntime as ort

    if not path.is_file():
        raise PlacementModelError(f"placement model {path}: no such file")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own types for a bad file
        raise PlacementModelError(f"placement model {path}: not a readable ONNX model ({exc})") from None
    props = sess.get_modelmeta().custom_metadata_map
    if props.get("kind") != KIND:
        raise PlacementModelError(
            f"placement model {path}: kind {props.get('kind')!r}, expected {KIND!r} "
            "(controlplane policy export --algo ppo writes one)"
        )
    if props.get("columns_digest") != columns_digest():
        raise PlacementModelError(
            f"placement model {path}: trained on other observation columns "
            f"({props.get('columns_digest')} vs {columns_digest()}); export it again from this version"
        )
    return sess


def model_input(rows: npt.NDArray[np.float32], fleet: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The model's input: each candidate's node columns, then the fleet values repeated."""
    return np.ascontiguousarray(
        np.concatenate((rows, np.broadcast_to(fleet, (len(rows), len(fleet)))), axis=1)
    )


def run_logits(session: Any, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Every candidate's logit, then defer's."""
    scores, defer = session.run([SCORES_NAME, DEFER_NAME], {INPUT_NAME: x})
    return np.concatenate((np.asarray(scores, dtype=np.float32), np.asarray(defer, dtype=np.float32)))


def pick(logits: npt.NDArray[np.float32], *, allow_defer: bool = True) -> int:
    """The best candidate (the first of equal logits, as argmax over PPO's slots), or
    ``len(logits) - 1`` (defer) when defer's logit is higher and ``allow_defer``."""
    best = int(np.argmax(logits[:-1]))
    return len(logits) - 1 if allow_defer and float(logits[-1]) > float(logits[best]) else best


class LearnedChooser:
    """Picks each replica's node with the exported policy (a scheduler's ``chooser``)."""

    def __init__(
        self,
        path: Path,
        sched: Scheduler | None = None,
        *,
        allow_defer: bool = True,
        on_decision: Callable[[], object] | None = None,
    ) -> None:
        """``sched``: the scheduler whose cycles call it (set later with :meth:`attach`);
        ``on_decision``: called after each decision (a metrics counter)."""
        self.path = Path(path)
        self.session = load_session(self.path)
        self.metadata: dict[str, str] = dict(self.session.get_modelmeta().custom_metadata_map)
        self.sched = sched
        self.allow_defer = allow_defer
        self.on_decision = on_decision
        self.decisions = 0
        self.deferred = 0
        self.seconds = 0.0

    def attach(self, sched: Scheduler) -> LearnedChooser:
        """Become ``sched``'s chooser."""
        self.sched = sched
        sched.chooser = self
        return self

    def logits(self, rows: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float32], float]:
        """The candidates' logits and defer's, for ready rows (node columns then fleet values)."""
        logits = run_logits(self.session, rows)
        return logits[:-1], float(logits[-1])

    def inputs(self, choice: Choice) -> npt.NDArray[np.float32]:
        """The model's input for ``choice``: one clipped row per candidate."""
        if self.sched is None:
            raise RuntimeError("LearnedChooser has no scheduler: attach() it first")
        x = model_input(*candidate_rows(self.sched, choice))
        np.clip(x, -BOUND, BOUND, out=x)
        return x

    def __call__(self, choice: Choice) -> int:
        began = time.perf_counter()
        logits = run_logits(self.session, self.inputs(choice))
        best = pick(logits, allow_defer=self.allow_defer)
        self.decisions += 1
        self.seconds += time.perf_counter() - began
        if self.on_decision is not None:
            self.on_decision()
        if best == len(logits) - 1:
            self.deferred += 1
            return DEFER
        return best

    def describe(self) -> dict[str, Any]:
        """What it is and what it did (for reports)."""
        return {
            "model": str(self.path),
            "trained": json.loads(self.metadata.get("training", "{}") or "{}"),
            "decisions": self.decisions,
            "deferred": self.deferred,
            "decision_us_mean": round(1e6 * self.seconds / self.decisions, 1) if self.decisions else None,
        }


NEAR_TIE = 0.05
"""A shadow's choice counts as *near* the main model's when the main model's logit for it is
within this of its best (under the main policy its probability is at least 95% of the best's):
a choice between nodes the trained policy itself barely tells apart."""


class SlotObservationPolicy:
    """The exported model as an evaluation policy ``(obs, mask, info) -> action`` over the
    environment's slots (:mod:`.evaluate`): the candidates' rows of the slot observation are
    exactly :func:`.observe.candidate_rows`, clipped, so it decides as :class:`LearnedChooser`
    would in the same state. ``shadow``: a second model asked the same question each time; how
    often it chose the same action (``agreement``) and an action whose logit under this model
    is within :data:`NEAR_TIE` of the best (``near_agreement``): the int8 model against fp32, on
    fp32's own trajectories."""

    def __init__(self, path: Path, shadow: Path | None = None) -> None:
        self.session = load_session(Path(path))
        self.shadow = load_session(Path(shadow)) if shadow is not None else None
        self.decisions = 0
        self.agreed = 0
        self.near = 0

    def __call__(self, obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], info: Any) -> int:
        from controlplane.learn.observe import GLOBAL_COLUMNS, NODE_COLUMNS

        max_nodes = len(mask) - 1
        width = len(NODE_COLUMNS)
        slots = np.flatnonzero(mask[:max_nodes])
        if len(slots) == 0:
            return max_nodes  # nothing to place on: defer, the only action allowed
        nodes = obs[: max_nodes * width].reshape(max_nodes, width)[slots]
        fleet = obs[max_nodes * width : max_nodes * width + len(GLOBAL_COLUMNS)]
        x = model_input(nodes, fleet)
        logits = run_logits(self.session, x)
        best = pick(logits)
        if self.shadow is not None:
            other = pick(run_logits(self.shadow, x))
            self.decisions += 1
            self.agreed += other == best
            self.near += float(logits[best]) - float(logits[other]) <= NEAR_TIE
        return max_nodes if best == len(slots) else int(slots[best])

    @property
    def agreement(self) -> float | None:
        """The share of decisions where the shadow model chose the same (None without one)."""
        return self.agreed / self.decisions if self.shadow is not None and self.decisions else None

    @property
    def near_agreement(self) -> float | None:
        """The share where the shadow's choice was the same or a near-tie (:data:`NEAR_TIE`)."""
        return self.near / self.decisions if self.shadow is not None and self.decisions else None
