"""Load-prediction bench: the learned predictor against naive, seasonal-naive and EWMA on real traces.

    python bench/predict.py [--traces DIR] [--functions 300] [--horizons 1,5,15] [--json F] [--plot F.png]

Series (one row per key, one column per bin):

* ``azure2019-1000`` (Azure Functions 2019, 1,000-function sample, one day of 1-minute bins):
  per-function invocations of ``--functions`` functions drawn with ``--seed`` (all if 0), and
  their sum (the "cluster"). Train: minutes 0-959 (hours 0-16); test: minutes 960-1439 (hours
  16-24). The sample holds one day, so the season is one hour (60 bins: timer triggers), not a
  day, and time-of-day features are off (the test hours are never seen in training).
* ``azure-vm2017`` (Azure VM 2017, dev split, 1,000 five-minute bins): VM arrivals per flavor
  (16 keys) and in total. Train: bins 0-575 (days 1-2); test: bins 576-999 (the last ~1.5
  days). The season is one day (288 bins) and time of day is a feature.

Horizons are in bins (minutes for the functions, 5-minute steps for the VMs). Every method gives,
at each origin (end of bin t), a forecast of bin t + h from bins 0..t; the errors are over the
targets in the test span. EWMA's alpha and the seasonal baseline's weight are the best on the
training span (so the baselines are tuned too). Errors: MAE; MAPE over the cells whose actual
count is > 0 (a zero's percentage error is undefined); WAPE = sum |error| / sum actual. The
ratio is the predictor's error over the best of naive, seasonal-naive and EWMA, per metric.
The model's loss (``--loss auto``) is the better of Poisson and absolute error on the last quarter
of the training span; a total's forecast is the sum of its keys' forecasts (bottom-up).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# One thread for the model's OpenMP loops: the bench must stay light on a shared machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from controlplane.predict import (
    LoadPredictor,
    ewma,
    mae,
    mape,
    naive,
    seasonal_baseline,
    seasonal_naive,
    wape,
)
from controlplane.predict.model import Loss
from controlplane.serverless.traces import load_azure_trace
from controlplane.sim.vmtrace import load_vm_trace

ROOT = Path(__file__).resolve().parents[1]
BASELINES = ("naive", "seasonal-naive", "ewma")
ALPHAS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.8)
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
SEASONS = (1, 3)
LOSSES: tuple[Loss, ...] = ("poisson", "absolute_error")
FloatArray = np.ndarray


def functions_series(directory: Path, count: int, seed: int) -> tuple[FloatArray, list[str]]:
    """Per-function per-minute counts of ``count`` functions sampled with ``seed`` (0: all)."""
    trace = load_azure_trace(directory)
    rows = trace.functions
    if 0 < count < len(rows):
        pick = np.sort(np.random.default_rng(seed).choice(len(rows), count, replace=False))
        rows = [rows[i] for i in pick]
    return np.stack([r.per_minute.astype(np.float64) for r in rows]), [r.function_id for r in rows]


def vm_series(directory: Path) -> tuple[FloatArray, list[str]]:
    """VM arrivals per flavor per 5-minute bin."""
    trace = load_vm_trace(directory)
    letters = sorted(trace.flavors)
    y = np.zeros((len(letters), trace.bins))
    where = {letter: i for i, letter in enumerate(letters)}
    for vm in trace.vms:
        y[where[vm.flavor.letter], vm.bin] += 1
    return y, letters


def _cells(y: FloatArray, h: int, start: int, stop: int) -> tuple[slice, FloatArray]:
    """Origins whose target bin lies in ``[start, stop)`` and the targets."""
    origins = slice(max(start - h, 0), stop - h)
    return origins, y[:, origins.start + h : origins.stop + h]


def _train_mae(y: FloatArray, f: FloatArray, h: int, train_end: int) -> float:
    origins, actual = _cells(y, h, 0, train_end)
    pred = f[:, origins]
    ok = np.isfinite(pred)
    return mae(actual[ok], pred[ok])


def forecasts(
    y: FloatArray, h: int, period: int, train_end: int, args: argparse.Namespace, day: int | None,
    bottom_up: FloatArray | None,
) -> tuple[dict[str, FloatArray], dict[str, float]]:  # fmt: skip
    """Every method's forecasts at every origin, and the tuned parameters. With ``bottom_up``
    (the per-key predictor's forecasts), the predictor's forecast is their sum: the cluster's
    arrivals are its functions' arrivals."""
    best_alpha = min(ALPHAS, key=lambda a: _train_mae(y, ewma(y, h, a), h, train_end))
    best_w, best_k = min(
        ((w, k) for w in WEIGHTS for k in SEASONS),
        key=lambda wk: _train_mae(
            y, seasonal_baseline(y, h, period, weight=wk[0], alpha=best_alpha, seasons=wk[1]), h, train_end
        ),
    )
    started = time.process_time()
    loss = args.loss
    if bottom_up is None:
        if loss == "auto":
            loss = pick_loss(y, h, period, train_end, args, day)
        model = LoadPredictor(h, period, model=args.model, loss=loss, bins_per_day=day, seed=args.seed)
        predicted = model.fit(y[:, :train_end]).predict_path(y)
    else:
        loss, predicted = "bottom-up", bottom_up.sum(axis=0, keepdims=True)
    out = {
        "naive": naive(y, h),
        "seasonal-naive": seasonal_naive(y, h, period),
        "ewma": ewma(y, h, best_alpha),
        "seasonal-baseline": seasonal_baseline(y, h, period, weight=best_w, alpha=best_alpha, seasons=best_k),
        "predictor": predicted,
    }
    return out, {
        "ewma_alpha": best_alpha,
        "seasonal_weight": best_w,
        "seasons": best_k,
        "loss": loss,
        "cpu_s": time.process_time() - started,
    }


def pick_loss(
    y: FloatArray, h: int, period: int, train_end: int, args: argparse.Namespace, day: int | None
) -> Loss:
    """The loss with the lower MAE on the last quarter of the training span, fit on the rest."""
    val = train_end * 3 // 4

    def score(loss: Loss) -> float:
        model = LoadPredictor(h, period, model=args.model, loss=loss, bins_per_day=day, seed=args.seed)
        path = model.fit(y[:, :val]).predict_path(y[:, :train_end])
        origins, actual = _cells(y[:, :train_end], h, val, train_end)
        return mae(actual, path[:, origins])

    return min(LOSSES, key=score)


def evaluate(
    name: str, y: FloatArray, period: int, train_end: int, day: int | None, args: argparse.Namespace,
    keys: dict[int, FloatArray] | None = None,
) -> tuple[list[dict[str, Any]], dict[int, FloatArray]]:  # fmt: skip
    """One result row per horizon (each method's errors on the test span), and the predictor's
    forecasts per horizon. ``keys``: the per-key level's, for a total (bottom-up)."""
    rows = []
    predicted = {}
    for h in args.horizons:
        paths, tuned = forecasts(y, h, period, train_end, args, day, None if keys is None else keys[h])
        predicted[h] = paths["predictor"]
        origins, actual = _cells(y, h, train_end, y.shape[1])
        ok = np.all([np.isfinite(p[:, origins]) for p in paths.values()], axis=0)
        errors = {}
        for method, path in paths.items():
            pred = path[:, origins][ok]
            errors[method] = {
                "mae": mae(actual[ok], pred),
                "mape": mape(actual[ok], pred),
                "wape": wape(actual[ok], pred),
            }
        ratios = {
            m: errors["predictor"][m] / min(errors[b][m] for b in BASELINES) for m in ("mae", "mape", "wape")
        }
        rows.append({"series": name, "keys": y.shape[0], "horizon": h, "cells": int(ok.sum()),
                     "errors": errors, "ratio_to_best_baseline": ratios, **tuned})  # fmt: skip
        print(f"  {name} h={h}: predictor/best baseline MAE x{ratios['mae']:.3f}", flush=True)
    return rows, predicted


def table(rows: list[dict]) -> str:
    lines = [
        "| series | h | method | MAE | MAPE (actual>0) | WAPE |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for method, e in r["errors"].items():
            head = f"| {r['series']} | {r['horizon']} | {method} |"
            lines.append(f"{head} {e['mae']:.3f} | {e['mape']:.1f}% | {e['wape']:.1f}% |")
        q = r["ratio_to_best_baseline"]
        lines.append(
            f"| {r['series']} | {r['horizon']} | **predictor / best baseline** |"
            f" x{q['mae']:.3f} | x{q['mape']:.3f} | x{q['wape']:.3f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    short = {"per function": "per fn", "per flavor": "per flavor", "total": "total"}
    labels = [
        f"{'vm' if 'vm' in r['series'] else 'fn'} {short[r['series'].split(' ', 1)[1]]}\nh={r['horizon']}"
        for r in rows
    ]
    x = np.arange(len(rows))
    for i, metric in enumerate(("mae", "mape", "wape")):
        ax.bar(
            x + (i - 1) * 0.27,
            [r["ratio_to_best_baseline"][metric] for r in rows],
            0.27,
            label=metric.upper(),
        )
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_xlabel("fn: Azure Functions 2019 (per function, total); vm: Azure VM 2017 (per flavor, total)")
    ax.set_ylabel("predictor / best baseline (lower is better)")
    ax.set_title("Load prediction on the Azure traces (test span)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    parser.add_argument("--azure", default="azure2019-1000", help="functions trace folder under --traces")
    parser.add_argument("--functions", type=int, default=300, help="functions sampled (0: all)")
    parser.add_argument("--horizons", default="1,5,15", help="bins ahead, comma-separated")
    parser.add_argument("--model", choices=("hgb", "ridge"), default="hgb")
    parser.add_argument(
        "--loss", choices=("auto", *LOSSES), default="auto", help="auto: picked on the training span"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-vm", action="store_true", help="functions trace only")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    args.horizons = [int(h) for h in args.horizons.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    azure, vm = args.traces / args.azure, args.traces / "azure-vm2017"
    for d in [azure] + ([] if args.skip_vm else [vm]):
        if not d.is_dir():
            print(f"bench/predict.py: trace folder {d} not found (give --traces DIR)", file=sys.stderr)
            return 2
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    y, _ = functions_series(azure, args.functions, args.seed)
    per_key, paths = evaluate(f"{args.azure} per function", y, 60, 960, None, args)
    total, _ = evaluate(f"{args.azure} total", y.sum(axis=0, keepdims=True), 60, 960, None, args, paths)
    rows += per_key + total
    if not args.skip_vm:
        v, _ = vm_series(vm)
        per_key, paths = evaluate("azure-vm2017 per flavor", v, 288, 576, 288, args)
        total, _ = evaluate("azure-vm2017 total", v.sum(axis=0, keepdims=True), 288, 576, 288, args, paths)
        rows += per_key + total
    print(table(rows))
    print(f"wall {time.monotonic() - started:.0f} s")
    if args.json:
        meta = {"command": " ".join(["python", "bench/predict.py", *(argv or sys.argv[1:])]),
                "functions": args.functions, "seed": args.seed, "model": args.model}  # fmt: skip
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
