"""Forecast pre-warm bench: does a minute-ahead load forecast, used to pre-warm, cut cold starts?

    OMP_NUM_THREADS=1 python bench/forecast_prewarm.py --trace-dir DIR [--seeds 0,1,2,3]
        [--thresholds 0.3,0.5,0.7] [--json F]

On the Azure Functions 2019 sample (one day of one-minute counts), per seed: ``fixed-10m``,
``hybrid`` and ``edgeplane`` (the registry's policies) against ``edgeplane`` plus a forecast
pre-warm (:mod:`controlplane.serverless.forecast_prewarm`):

* ``learned@T``: the learned ``LoadPredictor`` (horizon one minute, season one hour), fitted on
  minutes 0-959 and pre-warming from minute 960 on, at probability threshold ``T``;
* ``learned-multi@T``: the same, asking for as many instances as the forecast arrivals overlap;
* ``seasonal@T``: the numpy-only seasonal baseline (nothing fitted), pre-warming all day.

Every policy is scored over the **test span** (arrivals from minute 960 on, memory wasted after
it), where the learned model saw nothing, and over the whole day. The per-minute counts do not
depend on the seed (it only places arrivals within their minute and draws execution times), so
the forecasts are made once and checked to be the same for every seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# One thread for the model's OpenMP loops: the bench must stay light on a shared machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from controlplane.serverless.forecast_prewarm import (
    ForecastPrewarmConfig,
    PrewarmPlan,
    arrival_counts,
    next_bin_forecast,
    plans_from_forecast,
    train_bins,
)
from controlplane.serverless.funcsim import SimulationResult, simulate
from controlplane.serverless.keepalive import Policy, make_policy
from controlplane.serverless.span_metrics import span_metrics
from controlplane.serverless.traces import FloatArray, Workload, load_azure_trace

BASELINES = ("fixed-10m", "hybrid", "edgeplane")


@dataclasses.dataclass(frozen=True, slots=True)
class Planned:
    """A forecast pre-warmer whose plans were made in advance (one forecast, many thresholds)."""

    plans: list[PrewarmPlan | None]

    def plan(self, workload: Workload) -> list[PrewarmPlan | None]:
        if len(self.plans) != len(workload.functions):
            raise ValueError("plans were made for another workload")
        return self.plans


def variants(thresholds: list[float], default: float) -> dict[str, ForecastPrewarmConfig]:
    out = {f"learned@{t:g}": ForecastPrewarmConfig(threshold=t) for t in thresholds}
    out[f"learned-multi@{default:g}"] = ForecastPrewarmConfig(threshold=default, multi=True)
    out[f"seasonal@{default:g}"] = ForecastPrewarmConfig(forecaster="seasonal", threshold=default)
    return out


def run_seed(
    workload: Workload, configs: dict[str, ForecastPrewarmConfig], forecasts: dict[str, FloatArray],
    split_s: float,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    policies: dict[str, Policy] = {name: make_policy(name) for name in BASELINES}
    for name, cfg in configs.items():
        plans = plans_from_forecast(workload, forecasts[cfg.forecaster], cfg)
        policies[name] = dataclasses.replace(make_policy("edgeplane"), name=name, forecast=Planned(plans))
    out: dict[str, dict[str, Any]] = {}
    for name, policy in policies.items():
        r: SimulationResult = simulate(workload, policy, waste_split_s=split_s)
        print(f"  simulated {name} in {r.wall_s:.1f} s", file=sys.stderr, flush=True)
        out[name] = {
            "day": r.summary(),
            "test": span_metrics(workload, r, split_s).summary(),
            "forecast_prewarms": r.forecast_prewarms,
            "spare_loads": r.spare_loads,
        }
    return out


def table(seed: int, rows: dict[str, dict[str, Any]], span: str) -> str:
    hybrid = rows["hybrid"][span]["wasted_memory_gb_s"]
    head = (
        f"{'seed ' + str(seed) + ' (' + span + ')':<22}{'cold %':>8}{'p75 fn %':>10}"
        f"{'wasted GB-s':>16}{'/ hybrid':>10}{'fc loads':>10}"
    )
    lines = [head, "-" * len(head)]
    for name, row in rows.items():
        m = row[span]
        lines.append(
            f"{name:<22}{100 * m['cold_start_rate']:>8.2f}{100 * m['cold_start_rate_p75_function']:>10.2f}"
            f"{m['wasted_memory_gb_s']:>16,.0f}{m['wasted_memory_gb_s'] / hybrid:>10.3f}"
            f"{row['forecast_prewarms']:>10,}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace-dir", type=Path, required=True, help="Azure 2019 sample directory")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--thresholds", default="0.3,0.5,0.7", help="learned forecast's thresholds")
    parser.add_argument("--default-threshold", type=float, default=0.5, help="for multi and seasonal")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    configs = variants([float(t) for t in args.thresholds.split(",")], args.default_threshold)

    trace = load_azure_trace(args.trace_dir)
    counts: FloatArray | None = None
    forecasts: dict[str, FloatArray] = {}
    doc: dict[str, Any] = {"trace": str(args.trace_dir), "seeds": {}, "configs": {}}
    for seed in seeds:
        workload = trace.to_workload(seed=seed)
        c = arrival_counts(workload)
        if counts is None:
            counts = c
            started = time.process_time()
            for cfg in (
                ForecastPrewarmConfig(forecaster="learned"),
                ForecastPrewarmConfig(forecaster="seasonal"),
            ):
                forecasts[cfg.forecaster] = next_bin_forecast(counts, cfg)
            first = train_bins(counts.shape[1], ForecastPrewarmConfig())
            doc["forecast_cpu_s"] = time.process_time() - started
            doc["train_minutes"] = [0, first - 1]
            doc["test_minutes"] = [first, counts.shape[1] - 1]
            print(
                f"trace {workload.name}: {len(workload.functions)} functions, "
                f"{workload.invocations:,} invocations; learned model fitted on minutes 0-{first - 1}, "
                f"test span minutes {first}-{counts.shape[1] - 1} "
                f"(forecasts {doc['forecast_cpu_s']:.0f} s CPU)",
                flush=True,
            )
        elif not np.array_equal(c, counts):
            raise SystemExit(f"seed {seed}: per-minute counts differ from the first seed's")
        split_s = float(doc["test_minutes"][0] * 60)
        rows = run_seed(workload, configs, forecasts, split_s)
        doc["seeds"][str(seed)] = rows
        print(table(seed, rows, "test"), flush=True)
        print(table(seed, rows, "day"), flush=True)
    doc["configs"] = {name: dataclasses.asdict(cfg) for name, cfg in configs.items()}
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
