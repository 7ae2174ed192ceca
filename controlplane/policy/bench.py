"""``controlplane policy bench``: how fast the local policy decides.

It draws realistic (node, offer, weights) triples from the trainer's environment on held-out
seeds, pins the process to one CPU and reports p50/p99 of: the bare single-row model call,
feature building, masking, and the whole :meth:`LocalPolicy.decide` (features + mask + inference
+ decision); also the heuristic fallback's decide for comparison.

This was ``edge-agent policy bench``. It lives with the trainer because its cases come from the
trainer's environment (:mod:`controlplane.policy.env`), and the agent imports nothing of the hub.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["bench", "configure", "run"]


def configure(sub: Any) -> None:
    """Add ``bench`` to the subparsers (``add_subparsers()``) of ``controlplane policy``."""
    p_bench = sub.add_parser("bench", help="measure decision latency (p50/p99) on one core")
    p_bench.add_argument("--model", help="ONNX model path (default: the shipped int8 model)")
    p_bench.add_argument("-n", "--decisions", type=int, default=5000, help="timed policy decisions per stage")
    p_bench.add_argument(
        "--heuristic-decisions", type=int, default=300, help="timed decisions of the (slower) heuristic"
    )
    p_bench.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: first allowed)")
    p_bench.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every stage")
    p_bench.add_argument("--json", action="store_true", help="print JSON")


def _percentiles(times_s: list[float]) -> dict[str, float]:
    import numpy as np

    arr = np.array(times_s) * 1e6
    return {
        "p50_us": float(np.percentile(arr, 50)),
        "p99_us": float(np.percentile(arr, 99)),
        "n": len(times_s),
    }


def _timed(fn: Callable[[int], object], n: int) -> list[float]:
    for i in range(min(n, 200)):  # warm-up
        fn(i)
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return times


def _rounds(stages: dict[str, tuple[Callable[[int], object], int]], rounds: int) -> dict[str, Any]:
    """Time every stage ``rounds`` times, interleaved (a noisy spell hits all stages alike);
    percentiles over all samples, plus each round's p50 (their spread shows the noise)."""
    samples: dict[str, list[float]] = {name: [] for name in stages}
    per_round: dict[str, list[float]] = {name: [] for name in stages}
    for _ in range(rounds):
        for name, (fn, n) in stages.items():
            times = _timed(fn, n)
            samples[name].extend(times)
            per_round[name].append(_percentiles(times)["p50_us"])
    return {name: {**_percentiles(samples[name]), "round_p50s_us": per_round[name]} for name in stages}


def bench(
    model: str | None = None,
    *,
    decisions: int = 5000,
    heuristic_decisions: int = 300,
    cpu: int | None = None,
    pin: bool = True,
    rounds: int = 3,
) -> dict[str, Any]:
    """Latency figures (microseconds) for ``controlplane policy bench``.

    With ``pin`` the process is moved to one CPU (``cpu``, default the first allowed) for the
    rest of its life: this is a command's behaviour, not a library's.
    """
    import numpy as np

    from edgeplane_contract.policy.actions import action_mask
    from edgeplane_contract.policy.features import features
    from edgeplane_contract.policy.runtime import LocalPolicy

    from controlplane.policy.env import EVAL_SEED_BASE, sample_state, sample_weights

    pinned: int | None = None
    if pin and hasattr(os, "sched_setaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        pinned = cpu if cpu is not None else allowed[0]
        os.sched_setaffinity(0, {pinned})
    rng = np.random.default_rng(EVAL_SEED_BASE + 777)
    cases = []
    for _ in range(min(decisions, 2000)):
        node, offer = sample_state(rng)
        cases.append((node, offer, sample_weights(rng, node)))

    def case(i: int) -> Any:
        return cases[i % len(cases)]

    policy = LocalPolicy.load(model)
    out: dict[str, Any] = {"model": policy.info()["path"], "source": policy.source, "pinned_cpu": pinned}
    stages: dict[str, tuple[Callable[[int], object], int]] = {}
    if policy.uses_model:
        xs = [features(n, o, w)[None, :] for n, o, w in cases]
        stages["bare_model_call"] = (lambda i: policy.outputs(xs[i % len(xs)]), decisions)
    stages["features"] = (lambda i: features(case(i)[0], case(i)[1], case(i)[2]), decisions)
    stages["mask"] = (lambda i: action_mask(case(i)[0], case(i)[1]), decisions)
    stages["decide"] = (lambda i: policy.decide(*case(i)), decisions)
    fallback = LocalPolicy.heuristic()
    stages["decide_heuristic"] = (lambda i: fallback.decide(*case(i)), heuristic_decisions)
    out.update(_rounds(stages, max(1, rounds)))
    out["rounds"] = max(1, rounds)
    return out


def run(args: argparse.Namespace) -> int:
    """Entry point for ``controlplane policy bench``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.decisions <= 0 or args.heuristic_decisions <= 0 or args.rounds <= 0:
        print(
            "controlplane policy bench: error: -n, --heuristic-decisions and --rounds must be positive",
            file=sys.stderr,
        )
        return 2
    result = bench(
        args.model,
        decisions=args.decisions,
        heuristic_decisions=args.heuristic_decisions,
        cpu=args.cpu,
        rounds=args.rounds,
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"model: {result['model']} (source {result['source']}, pinned to CPU {result['pinned_cpu']}, "
        f"{result['rounds']} interleaved rounds)"
    )
    for key in ("bare_model_call", "features", "mask", "decide", "decide_heuristic"):
        if key in result:
            r = result[key]
            spread = ", ".join(f"{v:.1f}" for v in r["round_p50s_us"])
            print(
                f"{key:<18} p50 {r['p50_us']:8.1f} us   p99 {r['p99_us']:8.1f} us   (n={r['n']}; "
                f"p50 per round: {spread})"
            )
    return 0
