"""Runs placed workloads as local processes and reports their state changes.

Each placement is one subprocess in its own session, confined (:mod:`edge_agent.confinement`): a
clean environment, the unprivileged run user, a work dir of its own as current directory and
``HOME``, and cgroups of its own, so a stop, a timeout or the end of the main process kills every
process it started. Its output goes to ``<work_dir>/logs/<placement>.log``. Limits applied where
the OS allows: memory through ``RLIMIT_AS``; the work dir's size through a watch that measures it
every ``storage_interval_s`` and kills the placement over its ``ephemeral_storage`` (Failed,
``ephemeral_storage_exceeded``, not restarted: the work dir it filled is kept across restarts);
CPU through a cgroup quota where the node allows one
(:mod:`edge_agent.cgroups`: cgroup v1, or a delegated cgroup v2 directory); the number of
processes through ``pids.max`` (``RunningPlacement.limits`` says which applied); the process dies
with the agent (``PR_SET_PDEATHSIG``) and its leftovers are killed at the agent's next start.

A process that exits may be restarted in place, per the workload's ``restart_policy``, with
exponential back-off and the quotas the local policy picks (:mod:`edge_agent.restarts`); the
placement keeps its id and stays Running meanwhile, and ``PlacementState.restarts`` counts them.

Restartable placements (``restart_policy`` other than ``never``) are also written to
``<work_dir>/placements.json`` while they run. If the agent itself dies (its processes die with
it), the next agent started on that work dir resumes them (:meth:`ProcessRunner.resume`) before
it looks for NATS: the same restart rules and the same local-policy verdict, hub or no hub. The
hub later learns of them from the agent's registration and keeps them, or stops them if it has
meanwhile placed the replica elsewhere.

An agent that is stopped (SIGTERM) stops its running placements itself (:meth:`ProcessRunner.shut_down`):
they end ``Failed`` with reason ``NodeShutdown``, not ``Cancelled`` (nobody cancelled them), and the
hub applies the workload's ``restart_policy`` to them (a new attempt, or the workload fails).

Here: the supervisor (start, watch, restart, stop). How a process starts:
:mod:`edge_agent.placement_process`; the state file: :mod:`edge_agent.placement_file`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeplane_contract.aio import wait_set
from edgeplane_contract.messages import NODE_SHUTDOWN, PlacementState, RunSpec

from edge_agent.cgroups import CpuLimiter, NoCpuLimit
from edge_agent.confinement import Confinement
from edge_agent.exit_records import ExitRecord, ExitRecords
from edge_agent.load_profile import LoadSampler
from edge_agent.placement_file import PlacementFile, SavedPlacement
from edge_agent.placement_process import RunningPlacement, start_process
from edge_agent.restarts import Backoff, RestartChoice, as_requested, wants_restart
from edge_agent.work_dir_usage import exceeded_message, watch_work_dir

__all__ = ["ProcessRunner", "RestartAdvisor", "RunningPlacement"]

log = logging.getLogger("edgeplane.agent.executor")

TERMINAL = ("Succeeded", "Failed", "Cancelled")
# The Failed message of a placement stopped because its agent is shutting down (reason NODE_SHUTDOWN).
SHUTDOWN_MESSAGE = "node shutting down (agent stopped)"


# Asked when a restart is due (after the back-off): restart with which quotas, or not at all.
RestartAdvisor = Callable[[RunningPlacement], RestartChoice]


def _tail(path: Path, limit: int = 400) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode(errors="replace").strip()
    except OSError:
        return ""


def _with_limit(spec: RunSpec, code: int, exited: str) -> str:
    """A final state's message: how the process exited, and the restart limit where only that
    limit kept it from being restarted."""
    if not wants_restart(spec.restart_policy, code, 0, 1):
        return exited
    limit = f"max_restarts ({spec.max_restarts}) reached"
    return f"{exited} ({limit})" if exited else limit


class ProcessRunner:
    """Starts, watches, restarts and stops placement processes; calls ``on_change`` on every change.

    A placement whose process exits is restarted here when its ``restart_policy`` asks for it
    (see :mod:`edge_agent.restarts`): after the back-off, ``restart_advisor`` (the agent's local
    policy) picks the quotas or declines; without an advisor it restarts as requested. The state
    stays ``Running`` through restarts, with ``restarts`` counting them. ``timeout_s`` bounds the
    whole placement, restarts and back-offs included; a timed-out placement is not restarted.
    """

    def __init__(
        self,
        *,
        work_dir: Path,
        on_change: Callable[[PlacementState], None],
        stop_grace_s: float = 5.0,
        retain_finished: int = 1000,
        restart_advisor: RestartAdvisor | None = None,
        backoff: Backoff | None = None,
        state_file: Path | None = None,
        cpu_limiter: CpuLimiter | None = None,
        confinement: Confinement | None = None,
        load: LoadSampler | None = None,
        storage_interval_s: float = 1.0,
        exit_records: ExitRecords | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.logs = work_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.on_change = on_change
        self.stop_grace_s = stop_grace_s
        self.retain_finished = retain_finished
        self.restart_advisor = restart_advisor
        self.backoff = backoff or Backoff()
        self.placements: dict[str, RunningPlacement] = {}
        self.tombstones: set[str] = set()  # stopped before they ran: a late run command is refused
        self.shutting_down: set[str] = set()  # stopped by the agent's own shutdown, not by the hub
        self._placement_file = PlacementFile(state_file) if state_file is not None else None
        # What the state file held at start, until resume() decides (kept in the file meanwhile).
        self._undecided: list[SavedPlacement] | None = None
        self.cpu_limiter: CpuLimiter = cpu_limiter or NoCpuLimit()
        self.confinement = confinement or Confinement.unconfined(work_dir)
        # The node's load during each run, for the Succeeded report's observation (None: none).
        self.load = load
        self.storage_interval_s = storage_interval_s
        # Exits the unit spawner writes down before the agent hears of them (None: not kept).
        self.exit_records = exit_records

    def running_ids(self) -> list[str]:
        return [pid for pid, p in self.placements.items() if p.state.state == "Running"]

    def states(self) -> list[PlacementState]:
        return [p.state for p in self.placements.values()]

    def knows(self, placement_id: str) -> bool:
        return placement_id in self.placements

    async def start(self, placement_id: str, workload_id: str, spec: RunSpec) -> None:
        """Start a placement; a failure to start becomes a Failed state, never an exception."""
        await self.launch(self.accept(placement_id, workload_id, spec))

    def accept(self, placement_id: str, workload_id: str, spec: RunSpec) -> RunningPlacement:
        """Take a placement on (known from now on: a repeat of its run is a duplicate); its
        process starts with :meth:`launch`."""
        state = PlacementState(placement_id=placement_id, workload_id=workload_id, state="Running")
        entry = RunningPlacement(state=state, spec=spec, cpu=spec.cpu, memory=spec.memory)
        self.placements[placement_id] = entry
        return entry

    async def launch(self, entry: RunningPlacement) -> None:
        """Start an accepted placement's process; a failure to start becomes a Failed state."""
        placement_id, state = entry.state.placement_id, entry.state
        try:
            error = await self._spawn(entry)
        except Exception as exc:  # its sandbox could not be made (a full disk, ...): Failed, reported
            log.exception("placement %s could not start", placement_id)
            error = (126, f"agent error: {exc}")
        if error is not None:
            self._fail_without_process(entry, error)
            return
        state.started_at = time.time()
        self.on_change(state)
        entry.task = asyncio.create_task(self._supervise(entry), name=f"watch-{placement_id}")
        self._persist()

    # -- surviving the agent's own restart ----------------------------------------------------

    def _persist(self) -> None:
        """Write the running restartable placements to the state file (atomically)."""
        if self._placement_file is None:
            return
        items = [
            {
                "placement_id": p.state.placement_id,
                "workload_id": p.state.workload_id,
                "restarts": p.state.restarts,
                "started_at": p.state.started_at,
                "spec": dataclasses.asdict(p.spec),
            }
            for p in self.placements.values()
            if p.state.state == "Running" and p.spec.restart_policy != "never" and not p.stop_requested
        ]
        # Placements waiting for the hub's word stay in the file: an agent that dies again before
        # it decided must still know about them.
        items += [item for *_, item in self._undecided or [] if item["placement_id"] not in self.placements]
        self._placement_file.write(items)

    def _clear_exit(self, placement_id: str) -> None:
        if self.exit_records is not None:
            self.exit_records.clear(placement_id)

    def recover_exits(self, reported: set[str] | frozenset[str] = frozenset()) -> list[PlacementState]:
        """Turn the exits a previous run of the agent never handled (it died between a unit's end
        and its outbox write; :mod:`edge_agent.exit_records`) into final states through
        ``on_change`` (the outbox, hence the registration), so the hub does not run them again.
        Call at start, before :meth:`resumable`. A restartable placement whose exit asks for a
        restart is left to :meth:`resume` (restarted as after any exit); ``reported``: placements
        whose final state the outbox already holds (nothing to add). Returns the states added."""
        if self.exit_records is None:
            return []
        saved = {entry.placement_id: entry for entry in self._resumable_items()}
        ended: list[PlacementState] = []
        for record in self.exit_records.read():
            placement_id = record.placement_id
            if placement_id in self.placements:
                continue  # this run's own (started since): handled by its supervisor
            entry = saved.get(placement_id)
            spec = entry.spec if entry is not None else None
            if spec is not None and wants_restart(
                spec.restart_policy, record.exit_code, record.restarts, spec.max_restarts
            ):
                self.exit_records.clear(placement_id)
                continue
            if placement_id not in reported:
                state = self._recorded_end(record, spec)
                self.on_change(state)
                ended.append(state)
                log.info(
                    "placement %s ended while the agent was down: %s",
                    placement_id,
                    state.message or state.state,
                )
            if self._undecided is not None:
                self._undecided = [e for e in self._undecided if e.placement_id != placement_id]
            self.exit_records.clear(placement_id)
        if ended:
            self._persist()
        return ended

    def _recorded_end(self, record: ExitRecord, spec: RunSpec | None) -> PlacementState:
        code = record.exit_code
        state = PlacementState(
            placement_id=record.placement_id,
            workload_id=record.workload_id,
            state="Succeeded" if code == 0 else "Failed",
            restarts=record.restarts,
        )
        state.exit_code = code
        state.started_at = record.started_at if record.started_at is not None else record.finished_at
        state.finished_at = record.finished_at
        why = "ended while the agent was down (recorded by its unit spawner)"
        exited = self._exit_text(record.placement_id, code)
        final = _with_limit(spec, code, exited) if spec is not None else exited
        state.message = f"{final}; {why}" if final else why
        return state

    def resumable(self) -> list[PlacementState]:
        """The placements a dead agent left running that :meth:`resume` would restart, as Running
        states (what the agent tells the hub at registration, to ask which it may resume)."""
        return [
            PlacementState(placement_id=pid, workload_id=wid, state="Running", restarts=restarts)
            for pid, wid, _, restarts, _ in self._resumable_items()
        ]

    def _resumable_items(self) -> list[SavedPlacement]:
        if self._placement_file is None:
            return []
        if self._undecided is not None:
            return [entry for entry in self._undecided if entry[0] not in self.placements]
        self._undecided = [
            saved for saved in self._placement_file.read() if saved.placement_id not in self.placements
        ]
        return self._undecided

    async def resume(self, only: set[str] | None = None) -> list[PlacementState]:
        """Resume the restartable placements a dead agent left running (see the module docstring).

        ``only``: the placement ids to resume (None: all); the others are forgotten (the hub has
        moved them, or the autonomy window has passed). Each counts as a restart after its process
        died with the agent (exit code 137): the restart rules apply (``max_restarts``) and the
        local policy picks the quotas or declines, as for any restart. Returns the resumed and the
        refused placements' states.
        """
        out: list[PlacementState] = []
        items = self._resumable_items()
        self._undecided = []
        for placement_id, workload_id, spec, restarts, item in items:
            if only is not None and placement_id not in only:
                continue
            out.append(await self._resume_one(placement_id, workload_id, spec, restarts, item))
        self._persist()
        return out

    async def _resume_one(
        self, placement_id: str, workload_id: str, spec: RunSpec, restarts: int, item: dict[str, Any]
    ) -> PlacementState:
        state = PlacementState(placement_id=placement_id, workload_id=workload_id, state="Running")
        state.restarts = restarts
        started = item.get("started_at")
        state.started_at = float(started) if isinstance(started, (int, float)) else time.time()
        state.exit_code = 128 + signal.SIGKILL  # it died with the agent
        entry = RunningPlacement(state=state, spec=spec, cpu=spec.cpu, memory=spec.memory)
        self.placements[placement_id] = entry
        why = "the agent restarted (its processes died with it)"
        if not wants_restart(spec.restart_policy, state.exit_code, restarts, spec.max_restarts):
            self._fail_without_process(
                entry, (state.exit_code, f"{why}; max_restarts ({spec.max_restarts}) reached")
            )
            return state
        choice = self._advise(entry)
        if not choice.restart:
            self._fail_without_process(entry, (state.exit_code, f"{choice.reason}; not resumed after {why}"))
            return state
        entry.cpu, entry.memory = choice.cpu, choice.memory
        state.restarts += 1
        error = await self._spawn(entry)
        if error is not None:
            self._fail_without_process(entry, error)
            return state
        state.exit_code = None
        state.message = f"resumed after {why}; {choice.reason}"
        log.info("placement %s resumed (%s)", placement_id, state.message)
        self.on_change(state)
        entry.task = asyncio.create_task(self._supervise(entry), name=f"watch-{placement_id}")
        return state

    def _log_path(self, placement_id: str) -> Path:
        return self.logs / f"{placement_id}.log"

    async def _spawn(self, entry: RunningPlacement) -> tuple[int, str] | None:
        """Start the placement's process with its current quotas; (exit code, message) if exec failed."""
        state = entry.state
        request = (
            self.exit_records.request(
                state.placement_id, state.workload_id, state.restarts, state.started_at or time.time()
            )
            if self.exit_records is not None
            else None
        )
        error = await start_process(
            entry,
            confinement=self.confinement,
            cpu_limiter=self.cpu_limiter,
            log_path=self._log_path(state.placement_id),
            exit_record=request,
        )
        if self.load is not None and error is None:
            self.load.begin(entry.state.placement_id)  # every run starts afresh: only the last counts
        return error

    def _release(self, entry: RunningPlacement) -> None:
        """The placement ended: its cgroups, gid and work dir go (its processes are gone); a
        success carries the load its final run saw."""
        if self.load is not None:
            state = entry.state
            if state.state == "Succeeded":
                state.observation = self.load.finish(state.placement_id)
            else:
                self.load.drop(state.placement_id)
        self.cpu_limiter.release(entry.state.placement_id)
        if entry.sandbox is not None:
            self.confinement.close(entry.sandbox)
            entry.sandbox = None

    def _fail_without_process(self, entry: RunningPlacement, error: tuple[int, str]) -> None:
        """End a placement that has no process running: exec failed, or a resume was refused."""
        self._release(entry)
        now = time.time()
        state = entry.state
        state.state, (state.exit_code, state.message) = "Failed", error
        state.started_at = state.started_at or now
        state.finished_at = now
        self.on_change(state)
        self._trim()

    async def _wait_exit(self, entry: RunningPlacement, deadline: float | None) -> bool:
        """Wait for the process to exit, then kill what it left (the unit ends with its main
        process); True when the placement's deadline passed first (then all is killed)."""
        process = entry.process
        assert process is not None and entry.sandbox is not None
        try:
            if deadline is not None:
                await asyncio.wait_for(process.wait(), timeout=max(0.0, deadline - time.monotonic()))
            else:
                await process.wait()
        except TimeoutError:
            await self._kill(entry)
            return True
        await self.confinement.kill(entry.sandbox, process)
        return False

    async def _guard_storage(self, entry: RunningPlacement) -> None:
        """Kill the placement (every process of its cgroup) once its work dir is over its limit."""
        assert entry.sandbox is not None
        limit = entry.spec.ephemeral_storage
        usage = await watch_work_dir(entry.sandbox.home, limit, interval_s=self.storage_interval_s)
        entry.storage_exceeded = exceeded_message(usage, limit)
        log.warning("placement %s killed: %s", entry.state.placement_id, entry.storage_exceeded)
        entry.wake.set()  # also ends a restart back-off
        if entry.process is not None and entry.sandbox is not None:
            await self.confinement.kill(entry.sandbox, entry.process)

    async def _supervise(self, entry: RunningPlacement) -> None:
        """Watch the process; restart it while the restart policy (and the local policy) say so."""
        guard = asyncio.create_task(self._guard_storage(entry), name=f"storage-{entry.state.placement_id}")
        try:
            await self._supervise_runs(entry)
        finally:
            guard.cancel()
            await asyncio.gather(guard, return_exceptions=True)
        state = entry.state
        state.finished_at = time.time()
        self._release(entry)
        self.on_change(state)  # the final state is in the outbox: the spawner's record can go
        self._clear_exit(state.placement_id)
        self._trim()
        self._persist()

    async def _supervise_runs(self, entry: RunningPlacement) -> None:
        """Run the process until it ends for good (its final state set), restarting it as asked."""
        spec, state = entry.spec, entry.state
        deadline = time.monotonic() + spec.timeout_s if spec.timeout_s else None
        while True:
            process = entry.process
            assert process is not None
            timed_out = await self._wait_exit(entry, deadline)
            code = process.returncode if process.returncode is not None else -signal.SIGKILL
            state.exit_code = 128 - code if code < 0 else code
            if self._ended_early(entry, timed_out):
                break
            exited = self._exit_message(entry)
            if not wants_restart(spec.restart_policy, state.exit_code, state.restarts, spec.max_restarts):
                state.state = "Succeeded" if state.exit_code == 0 else "Failed"
                state.message = _with_limit(spec, state.exit_code, exited)
                break
            # Back-off; stop() sets wake to end it early, the deadline still counts.
            delay = self.backoff.delay(state.restarts)
            if deadline is not None and deadline - time.monotonic() <= delay:
                delay = max(0.0, deadline - time.monotonic())
                timed_out = True
            await wait_set(entry.wake, delay)
            if self._ended_early(entry, timed_out):
                break
            choice = self._advise(entry)
            if not choice.restart:
                state.state = "Failed"
                state.message = f"{choice.reason} after {exited or 'exit code 0'}"
                break
            entry.cpu, entry.memory = choice.cpu, choice.memory
            state.restarts += 1
            self._clear_exit(state.placement_id)  # the last run's exit is handled: restarted
            error = await self._spawn(entry)
            if error is not None or entry.process is None:
                state.exit_code, state.message = error or (126, "could not restart")
                state.state = "Failed"
                break
            if entry.stop_requested or entry.storage_exceeded:  # ended while it was being started
                await self._kill(entry)
                continue
            state.exit_code = None
            state.message = f"restart {state.restarts} after {exited or 'exit code 0'}; {choice.reason}"
            log.info("placement %s restarted (%s)", state.placement_id, state.message)
            self.on_change(state)
            self._persist()

    def _ended_early(self, entry: RunningPlacement, timed_out: bool) -> bool:
        """Its work dir over the limit, a stop (the hub's, or the agent's shutdown) or the
        placement's deadline ends it; True (state set) when one did."""
        state = entry.state
        if entry.storage_exceeded:
            state.state, state.message = "Failed", entry.storage_exceeded
        elif entry.stop_requested and state.placement_id in self.shutting_down:
            # Nobody asked for this end: the hub applies the workload's restart policy to it.
            state.state, state.message, state.reason = "Failed", SHUTDOWN_MESSAGE, NODE_SHUTDOWN
        elif entry.stop_requested:
            state.state, state.message = "Cancelled", "stopped on request"
        elif timed_out:
            state.state, state.message = "Failed", f"timed out after {entry.spec.timeout_s:g}s"
        else:
            return False
        return True

    def _exit_message(self, entry: RunningPlacement) -> str:
        return self._exit_text(entry.state.placement_id, entry.state.exit_code)

    def _exit_text(self, placement_id: str, code: int | None) -> str:
        """'exit code N: <the log's last line>' ('' for exit code 0)."""
        if code == 0:
            return ""
        tail = _tail(self._log_path(placement_id))
        return f"exit code {code}" + (f": {tail.splitlines()[-1][:300]}" if tail else "")

    def _advise(self, entry: RunningPlacement) -> RestartChoice:
        if self.restart_advisor is None:
            return as_requested(entry.spec)
        try:
            return self.restart_advisor(entry)
        except Exception:  # an advisor bug must not leave the placement hanging: restart as asked
            log.exception("restart advisor failed for %s", entry.state.placement_id)
            return as_requested(entry.spec)

    async def _kill(self, entry: RunningPlacement) -> None:
        """SIGTERM, then after the grace SIGKILL for every process of the placement."""
        assert entry.process is not None and entry.sandbox is not None
        await self.confinement.stop(entry.sandbox, entry.process, grace_s=self.stop_grace_s)

    async def stop(self, placement_id: str) -> bool:
        """Stop a placement (also while it waits to restart); False when this agent never had it."""
        entry = self.placements.get(placement_id)
        if entry is None:
            self.tombstones.add(placement_id)
            return False
        if entry.state.state in TERMINAL or entry.task is None:
            return True
        entry.stop_requested = True
        entry.wake.set()
        if entry.process is not None and entry.process.returncode is None:
            await self._kill(entry)
        await asyncio.shield(entry.task)
        return True

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(pid) for pid in self.running_ids()), return_exceptions=True)

    async def shut_down(self) -> None:
        """Stop every running placement because the agent itself stops: each ends ``Failed`` with
        reason ``NodeShutdown`` (one already being stopped by the hub still ends Cancelled)."""
        self.shutting_down.update(
            pid for pid in self.running_ids() if not self.placements[pid].stop_requested
        )
        await self.stop_all()

    def _trim(self) -> None:
        finished = [pid for pid, p in self.placements.items() if p.state.state in TERMINAL]
        for pid in finished[: max(0, len(finished) - self.retain_finished)]:
            del self.placements[pid]
