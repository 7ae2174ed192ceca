"""Warm pools of function instances on one node: start (cold), reuse (warm), evict, scale to zero.

Over ~400 lines: one state machine (instances, in-flight counts, memory budget); split, its invariants spread.
One instance's record and how its worker starts: :mod:`edge_agent.functions.instance`.

An instance is a long-lived worker process (``worker.py``) that imported its handler once; the
time from spawn to its ``ready`` line is the measured cold start. Each instance serves up to
``max_concurrency`` invocations at once. Idle instances are evicted after their keep-alive (set
per function by the hub's policy) or earlier under memory pressure (least recently used first);
an instance over its memory size (RSS), past an invocation's timeout or with a work dir over its
``ephemeral_storage`` (``ephemeral_storage_exceeded``, measured every ``storage_interval_s``) is
killed. While NATS is down the agent's local policy may also stop idle instances
(:mod:`edge_agent.autonomy`).

Instances are confined like placements (:mod:`edge_agent.confinement`): a clean environment, the
run user, cgroups of their own (stopping an instance kills all its processes) and a work dir of
their own; the instances of one function version share a private group, which may read the
version's source (written by the agent, read-only to them). Their stderr goes to the agent's
``functions/<name>-v<version>/<instance>.log``, out of their reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from edgeplane_contract.messages import FunctionCode, FunctionInstance, InvokeResultV1, InvokeV1, PrewarmV1

from edge_agent.confinement import Confinement
from edge_agent.functions.instance import (
    InitError,
    Instance,
    invoke_result,
    log_tail,
    not_started_error,
    start_worker,
    timeout_error,
)
from edge_agent.work_dir_usage import exceeded_message, usage_bytes

__all__ = ["FunctionPool", "Instance"]

log = logging.getLogger("edgeplane.agent.functions")


class FunctionPool:
    """All function instances of one agent."""

    def __init__(
        self,
        *,
        work_dir: Path,
        memory_budget: int,
        node: str = "",
        on_change: Callable[[], None] | None = None,
        confinement: Confinement | None = None,
        storage_interval_s: float = 1.0,
    ) -> None:
        self.work_dir = work_dir / "functions"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.confinement = confinement or Confinement.unconfined(work_dir)
        self.memory_budget = memory_budget
        self.node = node
        self.on_change = on_change or (lambda: None)
        self.instances: dict[str, Instance] = {}
        self.counters: dict[str, int] = {"cold_starts": 0, "warm_starts": 0, "evictions": 0, "timeouts": 0}
        self._changed = asyncio.Condition()
        self.storage_interval_s = storage_interval_s
        self._storage_checked_at = 0.0

    # --- queries --------------------------------------------------------------------------

    def memory_in_use(self) -> int:
        return sum(i.code.memory for i in self.instances.values())

    def idle_instances(self) -> list[Instance]:
        """Warm instances serving nothing now (what the agent's offline scale-down looks at)."""
        return [i for i in self.instances.values() if i.state == "idle"]

    def snapshot(self) -> list[FunctionInstance]:
        return [
            FunctionInstance(
                instance_id=i.instance_id,
                function=i.code.name,
                version=i.code.version,
                state=i.state,
                in_flight=i.in_flight,
                max_concurrency=i.code.max_concurrency,
                memory=i.code.memory,
                started_at=i.spawned_at,
                last_used_at=i.last_used_at,
                cold_start_ms=i.cold_start_ms,
                keep_alive_s=i.keep_alive_s,
            )
            for i in self.instances.values()
        ]

    # --- starting and stopping instances ---------------------------------------------------

    def _log_dir(self, code: FunctionCode) -> Path:
        """The agent's own folder for a version's instance logs (user code cannot reach it)."""
        folder = self.work_dir / f"{code.name}-v{code.version}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def unavailable(self, code: FunctionCode) -> str | None:
        """Why instances of ``code`` cannot start on this node at all, or None."""
        if code.runtime != "command" and self.confinement.python is None:
            return (
                f"python functions cannot run as {self.confinement.run_user.name} on this node: "
                f"{self.confinement.python_blocked}"
            )
        return None

    async def _spawn(self, code: FunctionCode, keep_alive_s: float) -> Instance:
        instance_id = uuid.uuid4().hex[:12]
        stderr_path = self._log_dir(code) / f"{instance_id}.log"
        process, sandbox = await start_worker(
            code, instance_id, confinement=self.confinement, stderr_path=stderr_path
        )
        instance = Instance(
            instance_id=instance_id,
            code=code,
            process=process,
            spawned_at=time.time(),
            keep_alive_s=keep_alive_s,
            ready=asyncio.get_running_loop().create_future(),
            stderr_path=stderr_path,
            sandbox=sandbox,
        )
        self.instances[instance_id] = instance
        instance.reader = asyncio.create_task(self._read(instance), name=f"fn-{instance_id}")
        self.counters["cold_starts"] += 1
        self.on_change()
        return instance

    async def _read(self, instance: Instance) -> None:
        stdout = instance.process.stdout
        assert stdout is not None
        started = time.perf_counter()
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                try:
                    message = json.loads(line)
                except json.JSONDecodeError:
                    log.warning("instance %s wrote a non-protocol line", instance.instance_id)
                    continue
                if "ready" in message and not instance.ready.done():
                    if message["ready"]:
                        instance.cold_start_ms = (time.perf_counter() - started) * 1000
                        instance.state = "idle"
                        instance.ready.set_result(instance.cold_start_ms)
                    else:
                        instance.ready.set_exception(InitError(message.get("error") or {}))
                    await self._notify()
                    continue
                future = instance.pending.pop(str(message.get("id")), None)
                if future is not None and not future.done():
                    future.set_result(message)
        finally:
            await self._forget(instance, "the instance exited", crashed=True)
            sandbox, instance.sandbox = instance.sandbox, None
            if sandbox is not None:  # a stop may still be killing: wait for the group to empty
                await self.confinement.kill(sandbox, instance.process)
                self.confinement.close(sandbox)

    async def _forget(self, instance: Instance, why: str, *, crashed: bool = False) -> None:
        # Keyed on the state, not on the dict: an eviction forgets the instance before this runs.
        if instance.state == "stopped":
            return
        self.instances.pop(instance.instance_id, None)
        instance.state = "stopped"
        if not instance.ready.done():
            tail = log_tail(instance.stderr_path)
            error = {"type": "InstanceExited", "message": f"{why}: {tail}"}
            instance.ready.set_exception(InitError(error, stopped=not crashed))
        for future in instance.pending.values():
            if not future.done():
                future.set_result(
                    {
                        "ok": False,
                        "error": {"type": "InstanceCrashed", "message": why, "code": "instance_crashed"},
                    }
                )
        instance.pending.clear()
        self.on_change()
        if instance.sandbox is not None:  # every process of the instance, not just the worker
            await self.confinement.kill(instance.sandbox, instance.process)
        await self._notify()

    async def stop_instance(self, instance: Instance, why: str) -> None:
        await self._forget(instance, why)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(instance.process.wait(), timeout=5)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # --- invocations ----------------------------------------------------------------------

    async def invoke(self, request: InvokeV1) -> InvokeResultV1:
        code = request.code
        begin = time.perf_counter()
        deadline = begin + code.timeout_s
        why = self.unavailable(code)
        if why is not None:
            error = {"type": "Unavailable", "message": why, "code": "init_error"}
            return invoke_result(request, begin, error=error)
        await self._drain_old_versions(code)
        cold = False
        instance: Instance | None = None
        while instance is None:
            warm = self._warm_instance(code)
            if warm is not None:
                instance = warm
                break
            starting = [
                i
                for i in self.instances.values()
                if i.key == (code.name, code.version) and i.state == "starting"
            ]
            if starting:
                cold = True
                waiting_on = starting[0]
                try:
                    await asyncio.wait_for(
                        asyncio.shield(waiting_on.ready), timeout=max(0.01, deadline - time.perf_counter())
                    )
                except InitError as exc:
                    if exc.stopped and deadline > time.perf_counter():
                        # Stopped while starting (another invocation's start timed out, or it was
                        # evicted): not this function's fault; look for or start another one.
                        continue
                    return invoke_result(request, begin, error=exc.error | {"code": "init_error"}, cold=True)
                except TimeoutError:
                    return invoke_result(request, begin, error=timeout_error(code), cold=True)
                continue
            busy = [i for i in self.instances.values() if i.key == (code.name, code.version)]
            may_start = request.allow_cold or not busy
            if may_start and self._make_room(code.memory):
                cold = True
                try:
                    instance = await self._spawn(code, request.keep_alive_s)
                except InitError as exc:
                    return invoke_result(request, begin, error=exc.error | {"code": "init_error"}, cold=True)
                try:
                    await asyncio.wait_for(
                        asyncio.shield(instance.ready), timeout=max(0.01, deadline - time.perf_counter())
                    )
                except InitError as exc:
                    await self.stop_instance(instance, "initialisation failed")
                    return invoke_result(request, begin, error=exc.error | {"code": "init_error"}, cold=True)
                except TimeoutError:
                    await self.stop_instance(instance, "initialisation timed out")
                    return invoke_result(request, begin, error=timeout_error(code), cold=True)
                if not instance.has_room():
                    instance = None
                continue
            # No memory for another instance, or told to queue: wait until one frees up.
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return invoke_result(
                    request,
                    begin,
                    error={
                        "type": "NoCapacity",
                        "message": "no memory for another instance",
                        "code": "capacity",
                    },
                )
            async with self._changed:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 0.5))
        queued_ms = (time.perf_counter() - begin) * 1000
        cold_ms = instance.cold_start_ms if cold else 0.0
        if not cold:
            self.counters["warm_starts"] += 1
        return await self._run_on(instance, request, begin, cold=cold, cold_ms=cold_ms, queued_ms=queued_ms)

    def _warm_instance(self, code: FunctionCode) -> Instance | None:
        candidates = [
            i for i in self.instances.values() if i.key == (code.name, code.version) and i.has_room()
        ]
        if not candidates:
            return None
        # Most recently used first: the others stay idle and can expire (scale down).
        return max(candidates, key=lambda i: (i.in_flight < i.code.max_concurrency, i.last_used_at))

    async def _run_on(
        self,
        instance: Instance,
        request: InvokeV1,
        begin: float,
        *,
        cold: bool,
        cold_ms: float,
        queued_ms: float,
    ) -> InvokeResultV1:
        code = request.code
        instance.keep_alive_s = request.keep_alive_s
        instance.in_flight += 1
        instance.state = "busy"
        self.on_change()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        instance.pending[request.invocation_id] = future
        context = {
            "invocation_id": request.invocation_id,
            "function": code.name,
            "version": code.version,
            "deadline": time.time() + code.timeout_s,
        }
        line = json.dumps({"id": request.invocation_id, "event": request.event, "context": context}) + "\n"
        stdin = instance.process.stdin
        assert stdin is not None
        try:
            stdin.write(line.encode())
            await stdin.drain()
            remaining = code.timeout_s - (time.perf_counter() - begin)
            reply = await asyncio.wait_for(future, timeout=max(0.01, remaining))
        except TimeoutError:
            self.counters["timeouts"] += 1
            await self.stop_instance(instance, f"invocation timed out after {code.timeout_s:g}s")
            return invoke_result(
                request, begin, error=timeout_error(code), cold=cold, cold_ms=cold_ms, queued_ms=queued_ms
            )
        except (BrokenPipeError, ConnectionResetError):
            # The worker never read it (its input is closed): it ran nowhere, so it is not a crash
            # but ``not_started``, which the hub may send to another instance within its budget.
            await self.stop_instance(instance, "the instance's input closed")
            reply = {"ok": False, "error": not_started_error("the instance's input was closed")}
        finally:
            instance.pending.pop(request.invocation_id, None)
            instance.in_flight = max(0, instance.in_flight - 1)
            instance.last_used_at = time.time()
            if instance.state == "busy" and instance.in_flight == 0:
                instance.state = "idle"
            self.on_change()
            await self._notify()
        if reply.get("ok"):
            return invoke_result(
                request,
                begin,
                result=reply.get("result"),
                cold=cold,
                cold_ms=cold_ms,
                queued_ms=queued_ms,
                exec_ms=float(reply.get("exec_ms", 0.0)),
                instance=instance,
            )
        error = dict(reply.get("error") or {})
        error.setdefault("code", "function_error")
        return invoke_result(
            request,
            begin,
            error=error,
            cold=cold,
            cold_ms=cold_ms,
            queued_ms=queued_ms,
            exec_ms=float(reply.get("exec_ms", 0.0)),
            instance=instance,
        )

    async def _drain_old_versions(self, code: FunctionCode) -> None:
        """A newer version rolled out: idle instances of older versions go now, busy ones when done."""
        for instance in list(self.instances.values()):
            if instance.code.name == code.name and instance.code.version < code.version:
                instance.keep_alive_s = 0.0
                if instance.in_flight == 0:
                    await self.stop_instance(instance, f"version {code.version} rolled out")

    def _make_room(self, memory: int) -> bool:
        """True when ``memory`` fits in the budget, after evicting idle instances LRU if needed."""
        if self.memory_in_use() + memory <= self.memory_budget:
            return True
        idle = sorted((i for i in self.instances.values() if i.state == "idle"), key=lambda i: i.last_used_at)
        freed = 0
        victims = []
        for instance in idle:
            if self.memory_in_use() - freed + memory <= self.memory_budget:
                break
            victims.append(instance)
            freed += instance.code.memory
        if self.memory_in_use() - freed + memory > self.memory_budget:
            return False
        for instance in victims:
            self.counters["evictions"] += 1
            task = asyncio.create_task(self.stop_instance(instance, "evicted under memory pressure"))
            task.add_done_callback(lambda _t: None)
            # Forget right away so the budget is free for the caller.
            self.instances.pop(instance.instance_id, None)
        return True

    async def prewarm(self, request: PrewarmV1) -> int:
        """Start instances so that ``count`` exist (warm or starting), each kept at least
        ``keep_alive_s`` from now, or with ``spare`` one more unless one is idle with room;
        returns how many were started."""
        code = request.code
        why = self.unavailable(code)
        if why is not None:
            raise RuntimeError(why)
        await self._drain_old_versions(code)
        have = [i for i in self.instances.values() if i.key == (code.name, code.version)]
        if request.spare:
            # A starting instance does not count: a cold call is most likely waiting on it.
            wanted = 0 if any(i.state == "idle" and i.has_room() for i in have) else 1
        else:
            # Kept at least keep_alive_s from now: an instance idle for a while would otherwise
            # expire within the window it was asked to cover.
            now = time.time()
            for instance in have:
                idle_for = max(0.0, now - (instance.last_used_at or instance.spawned_at))
                instance.keep_alive_s = max(instance.keep_alive_s, idle_for + request.keep_alive_s)
            wanted = max(0, request.count - len(have))
        started = 0
        for _ in range(wanted):
            if not self._make_room(code.memory):
                break
            instance = await self._spawn(code, request.keep_alive_s)
            instance.last_used_at = time.time()
            started += 1
        return started

    async def retire(self, function: str) -> tuple[int, int]:
        """A deleted function: stop its idle instances now; busy ones finish their invocation and
        go at the next eviction pass (keep-alive 0). Returns (stopped, draining)."""
        stopped = draining = 0
        for instance in list(self.instances.values()):
            if instance.code.name != function:
                continue
            instance.keep_alive_s = 0.0
            if instance.state == "idle":
                await self.stop_instance(instance, "function deleted")
                stopped += 1
            else:
                draining += 1
        return stopped, draining

    async def evict_expired(self) -> int:
        """Stop idle instances past their keep-alive, and instances over their memory size."""
        now = time.time()
        evicted = 0
        for instance in list(self.instances.values()):
            idle_since = instance.last_used_at or instance.spawned_at
            if instance.state == "idle" and now - idle_since >= instance.keep_alive_s:
                # Counted before the stop: stop_instance forgets the instance at once but then
                # waits for the process to exit, and readers must not see it gone yet uncounted.
                self.counters["evictions"] += 1
                await self.stop_instance(instance, "keep-alive expired")
                evicted += 1
                continue
            try:
                rss = psutil.Process(instance.process.pid).memory_info().rss
            except (psutil.Error, ProcessLookupError):
                continue
            if rss > instance.code.memory:
                log.warning(
                    "instance %s uses %d bytes > %d: killed", instance.instance_id, rss, instance.code.memory
                )
                await self.stop_instance(
                    instance, f"memory limit exceeded ({rss} > {instance.code.memory} bytes)"
                )
                evicted += 1
        evicted += await self._stop_over_storage()
        available = psutil.virtual_memory().available
        if available < 0.05 * psutil.virtual_memory().total:
            for instance in sorted(self.instances.values(), key=lambda i: i.last_used_at):
                if instance.state == "idle":
                    self.counters["evictions"] += 1
                    await self.stop_instance(instance, "evicted: node memory low")
                    evicted += 1
                    break
        return evicted

    async def _stop_over_storage(self) -> int:
        """Stop the instances whose work dir is over their ``ephemeral_storage`` (measured at most
        every ``storage_interval_s``, in a thread); how many were stopped."""
        now = time.monotonic()
        if now - self._storage_checked_at < self.storage_interval_s:
            return 0
        self._storage_checked_at = now
        stopped = 0
        for instance in list(self.instances.values()):
            sandbox, limit = instance.sandbox, instance.code.ephemeral_storage
            if sandbox is None or instance.state == "stopped":
                continue
            usage = await asyncio.to_thread(usage_bytes, sandbox.home, stop_above=limit)
            if usage > limit:
                why = exceeded_message(usage, limit)
                log.warning("instance %s killed: %s", instance.instance_id, why)
                await self.stop_instance(instance, why)
                stopped += 1
        return stopped

    async def close(self) -> None:
        for instance in list(self.instances.values()):
            await self.stop_instance(instance, "agent stopping")
