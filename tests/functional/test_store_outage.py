"""A store that goes away: the database cut off mid-invocation, the SQLite data dir's disk full.

Real processes: a nats-server, a ``controlplane serve`` hub, an ``edge-agent run`` agent running
Python functions; PostgreSQL (when one answers on 127.0.0.1:5432) reached through a loopback relay
the test cuts; the SQLite store on a small tmpfs the test fills (needs root to mount it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harness import PYTHON_FUNCTIONS, spawn_agent, wait_for
from sqlalchemy.engine import make_url
from tcp_cut import CuttableRelay

_STARTED = re.compile(r"edgeplane hub: API (\S+) .* admin token in (\S+)")

# Leaves one mark per run in $MARKS (the event's id as the file name), then sleeps: a mark per
# invocation shows that each ran, and ran once.
SLEEPER = {
    "name": "sleeper",
    "source": (
        "import os, time\n"
        "def handle(event, context):\n"
        "    with open(os.path.join(os.environ['MARKS'], event['id']), 'a') as f:\n"
        "        f.write('x')\n"
        "    time.sleep(event.get('sleep', 1.0))\n"
        "    return {'id': event['id']}\n"
    ),
    "handler": "handle",
    "memory": "64Mi",
    "timeout_s": 20,
}


@dataclass
class HubProcess:
    process: subprocess.Popen[bytes]
    url: str
    session: aiohttp.ClientSession
    log: Path

    async def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any, Any]:
        async with self.session.request(
            method, self.url + path, json=body, timeout=aiohttp.ClientTimeout(total=60), **kwargs
        ) as response:
            return response.status, await response.json(), response.headers


@contextlib.asynccontextmanager
async def hub_process(
    tmp_path: Path, nats_url: str, data_dir: Path, *extra: str
) -> AsyncIterator[HubProcess]:
    """``controlplane serve`` on a free port, its log in ``tmp_path/hub.log``; a client with the
    admin token the hub wrote."""
    log = tmp_path / "hub.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "serve", "--nats", nats_url, "--port", "0",
             "--data-dir", str(data_dir), "--log-level", "INFO", *extra],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        found = await wait_for(
            lambda: _read(log), lambda text: _STARTED.search(text) is not None or process.poll() is not None,
            timeout=60, every=0.2,
        )  # fmt: skip
        match = _STARTED.search(found)
        assert match is not None, found[-3000:]
        token = Path(match.group(2)).read_text().strip()
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
            yield HubProcess(process, match.group(1), session, log)
    finally:
        await _stop(process)


async def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def _stop(process: subprocess.Popen[bytes], within_s: float = 20.0) -> None:
    """Terminate ``process`` and wait for it without blocking the loop (the relay to the database
    runs in it: the hub closes its connections through it on the way out)."""
    process.terminate()
    try:
        await asyncio.wait_for(asyncio.to_thread(process.wait), timeout=within_s)
    except TimeoutError:
        process.kill()
        process.wait()


# --- the SQLite data dir's disk full ---------------------------------------------------------


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (skips the test where it cannot be mounted)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the data dir needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(path: Path) -> int:
    """Write ``path`` until the filesystem is full; the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 20, 1 << 12, 1 << 9):
            try:
                while True:
                    written += os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return written


async def test_a_full_disk_answers_503_with_retry_after_and_healthz_says_so_until_space_is_freed(
    nats_server, tmp_path
):
    """Was: every write answered 500 with a traceback per request, and /healthz stayed 200."""
    with small_filesystem(tmp_path / "data", "24m") as data_dir:
        async with hub_process(tmp_path, nats_server.url, data_dir) as hub:
            status, health, _ = await hub.call("GET", "/healthz")
            assert status == 200 and health["database"] is True, health
            filler = data_dir / "filler"
            fill(filler)
            answers: list[tuple[int, Any, Any]] = []
            for i in range(300):  # SQLite reuses its WAL file's room first: a few writes may still fit
                answers.append(
                    await hub.call("POST", "/v1/workloads", {"name": f"w{i}", "command": ["true"]})
                )
                if answers[-1][0] == 503:
                    break
            lines_before = len((await _read(hub.log)).splitlines())
            for i in range(100):  # a burst on the full disk
                answers.append(
                    await hub.call("POST", "/v1/workloads", {"name": f"b{i}", "command": ["true"]})
                )
            statuses = {a[0] for a in answers}
            assert 500 not in statuses, [a for a in answers if a[0] == 500][:2]
            status, body, headers = answers[-1]
            assert status == 503, answers[-1]
            assert headers["Retry-After"] == "2"
            assert body["error"]["code"] == "unavailable" and body["error"]["field"] is None
            assert body["error"]["message"].startswith("the store is unavailable: "), body
            assert "full" in body["error"]["message"] or "I/O" in body["error"]["message"], body
            status, health, _ = await hub.call("GET", "/healthz")
            assert (status, health["database"], health["status"]) == (503, False, "degraded"), health

            text = await _read(hub.log)
            burst_lines = text.splitlines()[lines_before:]
            assert "unhandled error" not in text and "Traceback" not in "\n".join(burst_lines), text[-3000:]
            outage_lines = [line for line in burst_lines if "store unavailable" in line]
            assert len(outage_lines) <= 2, outage_lines  # one per interval, not one per request
            # Besides the access log's one line per request: a bounded few, not one per request.
            others = [line for line in burst_lines if "edgeplane.access" not in line]
            assert len(others) < 20, others[:20]

            filler.unlink()
            created = await wait_for(
                lambda: hub.call("POST", "/v1/workloads", {"name": "after", "command": ["true"]}),
                lambda answer: answer[0] != 503,
                timeout=20,
                every=0.5,
            )
            assert created[0] == 201, created
            healthy = await wait_for(lambda: hub.call("GET", "/healthz"), lambda a: a[0] == 200, timeout=10)
            assert healthy[1]["database"] is True


# --- the database cut off during invocations ------------------------------------------------


async def _invoke(
    hub: HubProcess, event: dict[str, Any], *, key: str | None = None, asynchronous: bool = False
) -> tuple[int, Any, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    path = "/v1/functions/sleeper/invoke" + ("?async=true" if asynchronous else "")
    try:
        return await hub.call("POST", path, event, headers=headers)
    except aiohttp.ContentTypeError as exc:  # not JSON: a bug as much as a 500 is
        return exc.status, None, None


async def _invocation(hub: HubProcess, invocation_id: str) -> dict[str, Any]:
    status, body, _ = await hub.call("GET", f"/v1/invocations/{invocation_id}")
    return body if status == 200 else {"status": f"HTTP {status}"}


async def _all_final(hub: HubProcess, ids: list[str]) -> dict[str, str]:
    return {i: (await _invocation(hub, i))["status"] for i in ids}


def _marks(directory: Path) -> dict[str, int]:
    return {p.name: len(p.read_text()) for p in directory.iterdir()}


async def _invocations_through_a_cut(
    hub: HubProcess, cut: Callable[[], object], heal: Callable[[], object], marks: Path, *, cut_s: float
) -> None:
    """Sync (with and without an Idempotency-Key) and async invocations of a 1 s function, the
    store cut off for ``cut_s`` while they run and while more arrive; then every one is checked."""
    status, body, _ = await hub.call("POST", "/v1/functions", {**SLEEPER, "env": {"MARKS": str(marks)}})
    assert status in (200, 201), body
    status, body, _ = await _invoke(hub, {"id": "warm", "sleep": 0.0})
    assert status == 200, body

    def new_event() -> dict[str, Any]:
        return {"id": uuid.uuid4().hex, "sleep": 1.0}

    before = [new_event() for _ in range(12)]
    sync_before = [
        asyncio.create_task(_invoke(hub, event, key=event["id"] if i % 2 else None))
        for i, event in enumerate(before[:6])
    ]
    async_before = await asyncio.gather(*(_invoke(hub, event, asynchronous=True) for event in before[6:]))
    assert all(answer[0] == 202 for answer in async_before), async_before
    await asyncio.sleep(0.3)  # they are running now
    cut()
    cut_at = time.monotonic()
    during = [new_event() for _ in range(6)]
    sync_during = [asyncio.create_task(_invoke(hub, event, key=event["id"])) for event in during[:3]]
    async_during = [asyncio.create_task(_invoke(hub, event, asynchronous=True)) for event in during[3:]]
    await asyncio.sleep(1.0)
    status, health, _ = await hub.call("GET", "/healthz")
    assert (status, health["database"]) == (503, False), health
    await asyncio.sleep(max(0.0, cut_s - (time.monotonic() - cut_at)))
    heal()

    answers = {e["id"]: a for e, a in zip(before[:6], await asyncio.gather(*sync_before), strict=True)}
    answers |= {e["id"]: a for e, a in zip(during[:3], await asyncio.gather(*sync_during), strict=True)}
    queued = {a[1]["invocation_id"]: e["id"] for e, a in zip(before[6:], async_before, strict=True)}
    for event, answer in zip(during[3:], await asyncio.gather(*async_during), strict=True):
        assert answer[0] in (202, 503), answer
        if answer[0] == 202:
            queued[answer[1]["invocation_id"]] = event["id"]
        else:
            assert answer[2]["Retry-After"] == "2" and answer[1]["error"]["code"] == "unavailable"
    for event_id, (status, body, headers) in answers.items():
        assert status in (200, 503), (status, body)  # never a 500
        if status == 200:
            assert body == {"id": event_id}
        else:
            assert headers["Retry-After"] == "2" and body["error"]["code"] == "unavailable", body

    # Every async invocation ends (timeout 10 s + the sweep's bound), none stays Running.
    final = await wait_for(
        lambda: _all_final(hub, list(queued)),
        lambda states: all(s in ("Succeeded", "Failed") for s in states.values()),
        timeout=60,
        every=0.5,
    )
    marks_seen = _marks(marks)
    assert all(count == 1 for count in marks_seen.values()), marks_seen  # nothing ran twice
    for invocation_id, state in final.items():
        if state == "Succeeded":  # (a loaded machine may time one out: an outcome too, not lost)
            assert marks_seen.get(queued[invocation_id]) == 1
    assert list(final.values()).count("Succeeded") >= len(final) // 2, final
    for event_id, (status, _, _) in answers.items():
        assert marks_seen.get(event_id, 0) == (1 if status == 200 else 0), (event_id, status)
    status, _, _ = await hub.call("GET", "/healthz")
    assert status == 200
    text = await _read(hub.log)
    assert "never retrieved" not in text and "unhandled error" not in text, text[-3000:]
    # One line per interval and part, not a traceback per request or round.
    others = [line for line in text.splitlines() if "edgeplane.access" not in line]
    assert "Traceback" not in text and len(others) < 40, others


@pytest.mark.postgres
async def test_a_database_cut_mid_invocation_strands_nothing_and_answers_no_500(
    nats_server, postgres_url, tmp_path, shared_dir
):
    """Was: 53 of 100 async invocations stayed Running for good and 56 of 100 sync ones answered
    500 when PostgreSQL went away for 10 s."""
    url = make_url(postgres_url)
    relay = await CuttableRelay(url.host or "127.0.0.1", url.port or 5432).start()
    relayed = url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
    agent = spawn_agent(
        nats_server.url, "pg-edge", tmp_path, cpu="4", memory="4Gi", run_as=PYTHON_FUNCTIONS.get("run_as")
    )
    try:
        async with hub_process(tmp_path, nats_server.url, tmp_path / "hub", "--database-url", relayed) as hub:
            await wait_for(
                lambda: hub.call("GET", "/v1/nodes/pg-edge"),
                lambda a: a[0] == 200 and a[1]["status"] == "Ready",
                timeout=40,
                every=0.2,
            )
            await _invocations_through_a_cut(hub, relay.cut, relay.heal, shared_dir, cut_s=5.0)
    finally:
        await _stop(agent)
        await relay.close()


async def test_a_full_disk_during_invocations_strands_nothing_and_answers_no_500(
    nats_server, tmp_path, shared_dir
):
    """The same on SQLite, its data dir's disk full for 5 s instead of the database cut off."""
    with small_filesystem(tmp_path / "data", "24m") as data_dir:
        filler = data_dir / "filler"
        agent = spawn_agent(
            nats_server.url,
            "disk-edge",
            tmp_path,
            cpu="4",
            memory="4Gi",
            run_as=PYTHON_FUNCTIONS.get("run_as"),
        )
        try:
            async with hub_process(tmp_path, nats_server.url, data_dir) as hub:
                await wait_for(
                    lambda: hub.call("GET", "/v1/nodes/disk-edge"),
                    lambda a: a[0] == 200 and a[1]["status"] == "Ready",
                    timeout=40,
                    every=0.2,
                )
                await _invocations_through_a_cut(
                    hub, lambda: fill(filler), filler.unlink, shared_dir, cut_s=5.0
                )
        finally:
            await _stop(agent)


@pytest.mark.postgres
async def test_outcomes_the_retries_could_not_store_are_written_by_the_sweep_and_stale_ones_resolved(
    nats_server, postgres_url, tmp_path, shared_dir, monkeypatch, caplog
):
    """The database away for longer than the retries last: the finished outcomes wait in memory
    (a synchronous caller still gets its result) and the sweep writes them once it is back; a
    Running invocation long past its timeout that no node knows is failed ``timeout``."""
    from harness import running_agents, running_hub

    from controlplane.serverless import records
    from controlplane.store.models import InvocationRow

    monkeypatch.setattr(records, "REQUEST_RETRY_S", 0.3)
    monkeypatch.setattr(records, "BACKGROUND_RETRY_S", 0.3)
    monkeypatch.setattr(records, "SWEEP_EVERY_S", 0.5)
    url = make_url(postgres_url)
    relay = await CuttableRelay(url.host or "127.0.0.1", url.port or 5432).start()
    relayed = url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
    try:
        async with (
            running_hub(nats_server.url, relayed) as (running, api),
            running_agents(nats_server.url, tmp_path, ["sw1"], **PYTHON_FUNCTIONS),
        ):
            status, body = await api.call(
                "POST", "/v1/functions", {**SLEEPER, "env": {"MARKS": str(shared_dir)}}
            )
            assert status in (200, 201), body
            events = [{"id": uuid.uuid4().hex, "sleep": 2.0} for _ in range(4)]

            async def invoke(event: dict[str, Any], **params: str) -> tuple[int, Any]:
                return await api.call(
                    "POST", "/v1/functions/sleeper/invoke", event, params=params, timeout_s=60,
                    headers={"Idempotency-Key": event["id"]},
                )  # fmt: skip

            sync = [asyncio.create_task(invoke(event)) for event in events[:2]]
            queued = [await invoke(event, **{"async": "true"}) for event in events[2:]]
            assert [q[0] for q in queued] == [202, 202], queued
            await wait_for(lambda: _async(_marks(shared_dir)), lambda m: len(m) == 4, timeout=30)
            relay.cut()  # every one is running: their outcomes come while the store is away
            answers = await asyncio.gather(*sync)
            assert [(a[0], a[1]) for a in answers] == [(200, {"id": e["id"]}) for e in events[:2]], answers
            await asyncio.sleep(1.5)
            relay.heal()

            ids = [q[1]["invocation_id"] for q in queued]
            final = await wait_for(
                lambda: _states(api, ids), lambda s: set(s.values()) == {"Succeeded"}, timeout=30
            )
            assert len(final) == 2
            stored = await wait_for(  # the synchronous ones' records too
                lambda: _stored_states(running.hub.store),
                lambda states: states == ["Succeeded"] * 4,
                timeout=10,
            )
            assert stored == ["Succeeded"] * 4
            assert "invocation outcomes kept in memory" in caplog.text, caplog.text[-2000:]
            assert all(count == 1 for count in _marks(shared_dir).values())

            # A Running record no node knows, long past its timeout: failed "timeout" by the sweep.
            stale_id = uuid.uuid4().hex
            async with running.hub.store.session() as s:
                s.add(
                    InvocationRow(
                        id=stale_id, function="sleeper", version=1, status="Running", event={"value": {}},
                        created_at=time.time() - 3600,
                    )
                )  # fmt: skip
            stale = await wait_for(
                lambda: api.get(f"/v1/invocations/{stale_id}"), lambda i: i["status"] != "Running", timeout=30
            )
            assert (stale["status"], stale["error"]["code"]) == ("Failed", "timeout"), stale
    finally:
        await relay.close()


async def _async(value: Any) -> Any:
    return value


async def _states(api: Any, ids: list[str]) -> dict[str, str]:
    return {i: (await api.get(f"/v1/invocations/{i}"))["status"] for i in ids}


async def _stored_states(store: Any) -> list[str]:
    from sqlalchemy import select

    from controlplane.store.models import InvocationRow

    async with store.session() as s:
        return sorted(
            await s.scalars(select(InvocationRow.status).where(InvocationRow.idempotency_key.is_not(None)))
        )
