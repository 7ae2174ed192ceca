"""``edge-agent policy info`` and ``controlplane policy`` (train|export|eval|bench) wiring."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from controlplane.cli import SUBCOMMANDS
from controlplane.cli import main as controlplane_main
from controlplane.policy import cli as cp_policy_cli
from controlplane.policy.bench import bench
from edge_agent.cli import main as edge_agent_main


def test_policy_info_prints_size_opset_and_quantization(capsys: pytest.CaptureFixture[str]) -> None:
    assert edge_agent_main(["policy", "info"]) == 0
    out = capsys.readouterr().out
    assert "source:          onnx-int8" in out
    assert "quantized:       yes" in out
    assert "opset:           17" in out
    assert "feature schema:  v2 (model: v2)" in out


def test_policy_info_on_a_broken_model_reports_the_fallback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "local_policy.int8.onnx"
    model.write_bytes(b"junk")
    assert edge_agent_main(["policy", "info", "--model", str(model)]) == 0
    out = capsys.readouterr().out
    assert "source:          heuristic" in out and "fallback reason:" in out


def test_bench_reports_every_stage() -> None:
    result = bench(decisions=30, heuristic_decisions=3, pin=False, rounds=2)
    assert result["source"] == "onnx-int8" and result["pinned_cpu"] is None and result["rounds"] == 2
    for key in ("features", "mask", "bare_model_call", "decide", "decide_heuristic"):
        assert result[key]["p50_us"] > 0 and result[key]["p99_us"] >= result[key]["p50_us"]
        assert len(result[key]["round_p50s_us"]) == 2
    assert result["decide"]["n"] == 60


def test_bench_rejects_a_non_positive_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert controlplane_main(["policy", "bench", "--rounds", "0"]) == 2
    assert "--rounds must be positive" in capsys.readouterr().err


def test_controlplane_registers_the_policy_command() -> None:
    assert SUBCOMMANDS["policy"][0] == "controlplane.policy.cli"
    parser = argparse.ArgumentParser()
    cp_policy_cli.configure(parser)
    args = parser.parse_args(["train", "--steps", "5", "--hidden", "32,16"])
    assert args.policy_command == "train" and args.steps == 5 and args.hidden == "32,16"
    assert parser.parse_args(["eval", "--eval-seeds", "1"]).eval_seeds == 1
    bench_args = parser.parse_args(["bench", "-n", "7", "--heuristic-decisions", "2", "--cpu", "0", "--json"])
    assert (bench_args.policy_command, bench_args.decisions, bench_args.heuristic_decisions) == (
        "bench",
        7,
        2,
    )
    assert bench_args.cpu == 0 and bench_args.rounds == 3 and bench_args.json and bench_args.model is None
