"""Local restarts: the restart rules, the back-off, the local policy's verdict, and the runner.

The runner tests start real processes (``sh``) through :class:`ProcessRunner`, no NATS needed.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from edgeplane_contract.messages import (
    NODE_SHUTDOWN,
    CommandV1,
    OfferSpec,
    PlacementState,
    RunSpec,
    StatusReportV1,
    decode,
    encode,
)
from edgeplane_contract.objective import RewardConfig

from edge_agent.executor import SHUTDOWN_MESSAGE, ProcessRunner, RunningPlacement
from edge_agent.restarts import (
    Backoff,
    RestartChoice,
    as_requested,
    choice_from_decision,
    offer_for_restart,
    wants_restart,
)
from edge_agent.telemetry.power import PowerState
from edge_agent.weights import current_weights


@pytest.mark.parametrize(
    ("policy", "code", "restarts", "limit", "expected"),
    [
        ("never", 1, 0, 5, False),
        ("never", 0, 0, 5, False),
        ("on-failure", 1, 0, 5, True),
        ("on-failure", 137, 4, 5, True),
        ("on-failure", 1, 5, 5, False),
        ("on-failure", 0, 0, 5, False),
        ("always", 0, 0, 5, True),
        ("always", 2, 1, 5, True),
        ("always", 0, 3, 3, False),
        ("on-failure", 1, 0, 0, False),
        ("sometimes", 1, 0, 5, False),  # unknown policies never restart
    ],
)
def test_the_restart_policy_decides_when_a_restart_is_wanted(policy, code, restarts, limit, expected):
    assert wants_restart(policy, code, restarts, limit) is expected


def test_the_backoff_doubles_from_its_start_and_stops_at_its_cap():
    default = Backoff()
    assert [default.delay(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert Backoff(0.05, 0.2).delay(0) == 0.05
    assert [Backoff(0.05, 0.2).delay(n) for n in range(1, 5)] == [0.1, 0.2, 0.2, 0.2]
    assert Backoff(1, 60).delay(10_000) == 60  # no overflow for absurd counts
    assert Backoff(0, 0).delay(3) == 0


def test_the_restart_offer_is_the_hubs_offer_or_built_from_the_request():
    offer = OfferSpec(cpu=2, memory=2**30, kind="service", sla_s=5.0)
    assert offer_for_restart(RunSpec(command=["x"], offer=offer)) is offer
    built = offer_for_restart(RunSpec(command=["x"], cpu=0.5, memory=2**20, gpu_indices=[0, 1]))
    assert (built.cpu, built.memory, built.gpu, built.kind) == (0.5, 2**20, 2, "batch")


def test_old_run_commands_and_state_reports_still_parse():
    """v1 messages from before restarts: no restart fields, no restart count."""
    command = decode(
        b'{"v": 1, "command_id": "c", "kind": "run", "placement_id": "p", "workload_id": "w",'
        b' "spec": {"command": ["true"]}}',
        CommandV1,
    )
    assert command.spec is not None
    assert (command.spec.restart_policy, command.spec.max_restarts, command.spec.offer) == ("never", 5, None)
    report = decode(
        b'{"v": 1, "report_id": "r", "node": "n",'
        b' "placement": {"placement_id": "p", "workload_id": "w", "state": "Running"}}',
        StatusReportV1,
    )
    assert report.placement.restarts == 0
    spec = RunSpec(command=["a"], restart_policy="always", max_restarts=2, offer=OfferSpec(cpu=1, memory=2))
    full = CommandV1(command_id="c", kind="run", placement_id="p", workload_id="w", spec=spec)
    assert decode(encode(full), CommandV1) == full


def _edge_node(on_battery: bool, percent: float):
    from edgeplane_contract.policy.features import NodeView
    from edgeplane_contract.power import DEFAULT_POWER_SPECS

    spec = DEFAULT_POWER_SPECS["edge"]
    return NodeView(
        "edge",
        cpu_capacity=4,
        cpu_allocated=0,
        memory_capacity=8 * 2**30,
        memory_allocated=0,
        on_battery=on_battery,
        battery_percent=percent,
        idle_w=spec.idle_w,
        max_w=spec.max_w,
    )


def test_the_shipped_model_restarts_a_small_batch_job_on_mains_and_declines_it_on_a_low_battery():
    """The real int8 model, the agent's weight rule: 5% battery (below the floor) means decline."""
    from edgeplane_contract.policy.features import Offer
    from edgeplane_contract.policy.runtime import LocalPolicy

    policy = LocalPolicy.load()
    assert policy.uses_model
    spec = RunSpec(command=["job"], cpu=0.1, memory=64 * 2**20)
    offer = Offer(kind="batch", cpu=0.1, memory=64 * 2**20)
    config = RewardConfig.from_dict({})

    mains = policy.decide(_edge_node(False, 80), offer, current_weights(config, PowerState("mains", 80)))
    restart = choice_from_decision(mains, spec, "mains")
    assert restart.restart and restart.cpu > 0 and restart.memory > 0

    low = policy.decide(_edge_node(True, 5), offer, current_weights(config, PowerState("battery", 5)))
    declined = choice_from_decision(low, spec, "on battery at 5%")
    assert low.decline and not declined.restart
    assert declined.reason == "restart declined by local policy (on battery at 5%)"


# --- the runner, with real processes -----------------------------------------------------------


# Counts its runs in ``runs`` (not in its own work dir: that goes when the placement ends); fails
# until run N, then exits 0.
def _counting(fail_until: int, runs: Path) -> list[str]:
    return [
        "sh",
        "-c",
        f"n=$(( $(cat {runs} 2>/dev/null || echo 0) + 1 )); echo $n > {runs}; [ $n -gt {fail_until} ]",
    ]


class Recorder:
    def __init__(self) -> None:
        self.states: list[PlacementState] = []

    def __call__(self, state: PlacementState) -> None:
        self.states.append(PlacementState(**{f: getattr(state, f) for f in state.__slots__}))


async def _run(runner: ProcessRunner, spec: RunSpec, timeout: float = 8.0) -> RunningPlacement:
    await runner.start("p1", "w1", spec)
    entry = runner.placements["p1"]
    if entry.task is not None:
        await asyncio.wait_for(asyncio.shield(entry.task), timeout)
    return entry


def _runner(tmp_path: Path, recorder: Recorder, **kwargs) -> ProcessRunner:
    return ProcessRunner(
        work_dir=tmp_path, on_change=recorder, stop_grace_s=1, backoff=Backoff(0.01, 0.05), **kwargs
    )


async def test_on_failure_restarts_until_the_process_succeeds(tmp_path):
    recorder = Recorder()
    entry = await _run(
        _runner(tmp_path, recorder),
        RunSpec(command=_counting(2, tmp_path / "runs"), restart_policy="on-failure"),
    )
    assert (entry.state.state, entry.state.restarts, entry.state.exit_code) == ("Succeeded", 2, 0)
    assert (tmp_path / "runs").read_text().strip() == "3"
    assert [(s.state, s.restarts) for s in recorder.states] == [
        ("Running", 0),
        ("Running", 1),
        ("Running", 2),
        ("Succeeded", 2),
    ]
    assert recorder.states[1].message.startswith("restart 1 after exit code 1")


async def test_without_a_restart_policy_the_first_failure_is_final(tmp_path):
    recorder = Recorder()
    entry = await _run(_runner(tmp_path, recorder), RunSpec(command=_counting(2, tmp_path / "runs")))
    assert (entry.state.state, entry.state.restarts, entry.state.exit_code) == ("Failed", 0, 1)


async def test_max_restarts_bounds_the_restarts_and_always_restarts_after_success(tmp_path):
    recorder = Recorder()
    spec = RunSpec(command=_counting(10, tmp_path / "runs"), restart_policy="on-failure", max_restarts=2)
    entry = await _run(_runner(tmp_path, recorder), spec)
    assert (entry.state.state, entry.state.restarts) == ("Failed", 2)
    assert "max_restarts (2) reached" in entry.state.message

    always = RunSpec(command=["true"], restart_policy="always", max_restarts=3)
    entry = await _run(_runner(tmp_path / "always", Recorder()), always)
    assert (entry.state.state, entry.state.restarts, entry.state.message) == (
        "Succeeded",
        3,
        "max_restarts (3) reached",
    )


async def test_the_advisor_sets_the_new_quota_or_declines(tmp_path):
    asked: list[int] = []

    def shrink_then_decline(entry: RunningPlacement) -> RestartChoice:
        asked.append(entry.state.restarts)
        if entry.state.restarts == 0:
            return RestartChoice(True, 0.2, 96 * 2**20, "bin 60")
        return RestartChoice(False, 0, 0, "restart declined by local policy (test)")

    runner = _runner(tmp_path, Recorder(), restart_advisor=shrink_then_decline)
    entry = await _run(runner, RunSpec(command=["sh", "-c", "exit 3"], restart_policy="on-failure"))
    assert asked == [0, 1]
    assert (entry.cpu, entry.memory) == (0.2, 96 * 2**20)
    assert (entry.state.state, entry.state.exit_code, entry.state.restarts) == ("Failed", 3, 1)
    assert entry.state.message == "restart declined by local policy (test) after exit code 3"


async def test_a_broken_advisor_restarts_as_requested(tmp_path):
    def broken(entry: RunningPlacement) -> RestartChoice:
        raise RuntimeError("bug")

    runner = _runner(tmp_path, Recorder(), restart_advisor=broken)
    entry = await _run(runner, RunSpec(command=_counting(1, tmp_path / "runs"), restart_policy="on-failure"))
    assert (entry.state.state, entry.state.restarts) == ("Succeeded", 1)
    assert as_requested(entry.spec).memory == entry.memory


async def test_a_stop_during_the_backoff_cancels_at_once(tmp_path):
    recorder = Recorder()
    runner = ProcessRunner(work_dir=tmp_path, on_change=recorder, backoff=Backoff(30, 30))
    await runner.start("p1", "w1", RunSpec(command=["false"], restart_policy="always"))
    entry = runner.placements["p1"]
    assert entry.process is not None
    await asyncio.wait_for(entry.process.wait(), 5)  # exited: the runner is in its 30 s back-off
    await asyncio.sleep(0.05)
    began = time.monotonic()
    assert await asyncio.wait_for(runner.stop("p1"), 5)
    assert time.monotonic() - began < 2
    assert (entry.state.state, entry.state.message) == ("Cancelled", "stopped on request")


async def test_the_agents_shutdown_ends_its_placements_failed_with_a_reason_and_a_hub_stop_cancelled(
    tmp_path,
):
    recorder = Recorder()
    runner = _runner(tmp_path, recorder)
    await runner.start("p1", "w1", RunSpec(command=["sleep", "30"], restart_policy="on-failure"))
    await runner.start("p2", "w2", RunSpec(command=["sleep", "30"]))
    stopping = asyncio.create_task(runner.stop("p2"))  # the hub's stop, before the shutdown
    await asyncio.sleep(0)
    await asyncio.wait_for(runner.shut_down(), 5)
    await stopping
    first, second = runner.placements["p1"].state, runner.placements["p2"].state
    assert (first.state, first.reason, first.message) == ("Failed", NODE_SHUTDOWN, SHUTDOWN_MESSAGE)
    assert first.exit_code == 143  # SIGTERM
    assert (second.state, second.reason) == ("Cancelled", "")
    assert [s.state for s in recorder.states if s.placement_id == "p1"] == ["Running", "Failed"]


async def test_the_timeout_covers_the_whole_placement_restarts_included(tmp_path):
    runner = ProcessRunner(work_dir=tmp_path, on_change=Recorder(), backoff=Backoff(0.2, 0.2))
    spec = RunSpec(command=["sh", "-c", "sleep 0.1; exit 1"], restart_policy="on-failure", timeout_s=1.0)
    began = time.monotonic()
    entry = await _run(runner, spec)
    assert entry.state.state == "Failed" and entry.state.message == "timed out after 1s"
    assert 0.9 < time.monotonic() - began < 3
    assert 1 <= entry.state.restarts <= 4


# --- the agent's advisor: the local policy under the live power state (no NATS needed) ----------


def _agent(tmp_path: Path, *, on_battery: bool, percent: float, local_policy: bool = True):
    from harness import write_power_supply

    from edge_agent.agent import Agent
    from edge_agent.config import AgentConfig
    from edge_agent.telemetry.gpu import StaticGpuReader
    from edge_agent.telemetry.power import SysfsPowerReader

    power_dir = tmp_path / "power"
    write_power_supply(power_dir, on_battery=on_battery, percent=percent)
    config = AgentConfig(
        name="u1", cpu=4.0, memory=8 * 2**30, work_dir=str(tmp_path / "agent"), local_policy=local_policy
    )
    agent = Agent(config, power=SysfsPowerReader(power_dir), gpus=StaticGpuReader([]))
    if local_policy:
        from edgeplane_contract.policy.runtime import LocalPolicy

        agent.policy = LocalPolicy.load()
    return agent


def _entry(spec: RunSpec) -> RunningPlacement:
    state = PlacementState(placement_id="p1", workload_id="w1", state="Running")
    return RunningPlacement(state=state, spec=spec, cpu=spec.cpu, memory=spec.memory)


def test_the_agent_advisor_asks_the_policy_with_live_weights_and_logs_the_decision(tmp_path):
    spec = RunSpec(command=["job"], restart_policy="on-failure", offer=OfferSpec(cpu=0.1, memory=64 * 2**20))
    on_mains = _agent(tmp_path / "mains", on_battery=False, percent=80)
    choice = on_mains._advise_restart(_entry(spec))
    assert choice.restart and choice.reason.startswith("local policy bin")
    [logged] = on_mains.decisions.entries
    assert (logged.purpose, logged.request_id, logged.workload_id, logged.decline) == (
        "restart",
        "restart:p1:1",
        "w1",
        False,
    )

    low = _agent(tmp_path / "low", on_battery=True, percent=5)
    choice = low._advise_restart(_entry(spec))
    assert not choice.restart
    assert choice.reason.startswith("restart declined by local policy (onnx-int8, on battery at 5%")
    assert low.counters["restart_declines"] == 1 and low.decisions.entries[-1].decline


def test_without_a_local_policy_the_agent_restarts_as_requested(tmp_path):
    agent = _agent(tmp_path, on_battery=True, percent=5, local_policy=False)
    spec = RunSpec(command=["job"], cpu=0.3, memory=2**27, restart_policy="always")
    assert agent._advise_restart(_entry(spec)) == as_requested(spec)
    assert not agent.decisions.entries
