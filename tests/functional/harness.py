"""Helpers for functional tests: a hub with its API on a free port, in-process agents, polling."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import nats

from edgeplane_contract.credentials import ensure_seed, public_key_of
from edgeplane_contract.messages import NodeResources, RegisterV1, Subjects, Telemetry, encode

from controlplane.api.auth import AuthSettings
from controlplane.bus.authority import NatsAuthority
from controlplane.bus.nats_auth import ServerTls
from controlplane.extender.settings import ExtenderSettings
from controlplane.federation.config import FederationConfig, single_cluster
from controlplane.hub.service import HubSettings
from controlplane.natsd import NatsServer
from controlplane.runtime.runner import RunningHub, start_hub
from controlplane.scheduling.profiles import load_profile
from controlplane.serverless.keepalive import make_policy
from controlplane.store.identities import IdentityStore
from edge_agent.agent import Agent
from edge_agent.config import AgentConfig
from edge_agent.confinement import RunUser, blocked_at, worker_python
from edge_agent.telemetry.gpu import StaticGpuReader
from edge_agent.telemetry.power import SysfsPowerReader

T = TypeVar("T")


async def wait_for(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], bool],
    *,
    timeout: float = 10.0,
    every: float = 0.05,
) -> T:
    """Poll ``probe`` until ``until(value)``; fail with the last value seen after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    value = await probe()
    while not until(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last value: {value!r}")
        await asyncio.sleep(every)
        value = await probe()
    return value


def poll(
    probe: Callable[[], T], until: Callable[[T], bool], *, timeout: float = 30.0, every: float = 0.1
) -> T:
    """``wait_for`` for blocking probes (tests that drive real processes over urllib): poll until
    ``until(value)``; fail with the last value seen after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not until(value):
        assert time.monotonic() < deadline, f"condition not met within {timeout}s; last value: {value!r}"
        time.sleep(every)
        value = probe()
    return value


@dataclass
class Api:
    """A tiny JSON client for the hub's API."""

    base: str
    session: aiohttp.ClientSession

    async def call(
        self, method: str, path: str, body: Any = None, *, timeout_s: float = 10.0, **kwargs: Any
    ) -> tuple[int, Any]:
        async with self.session.request(
            method, self.base + path, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s), **kwargs
        ) as response:
            return response.status, await response.json()

    async def get(self, path: str) -> Any:
        status, body = await self.call("GET", path)
        assert status == 200, (path, status, body)
        return body

    async def post_workload(self, body: dict[str, Any], **kwargs: Any) -> str:
        status, reply = await self.call("POST", "/v1/workloads", body, **kwargs)
        assert status == 201, reply
        return str(reply["id"])

    async def workload(self, workload_id: str) -> dict[str, Any]:
        body: dict[str, Any] = await self.get(f"/v1/workloads/{workload_id}")
        return body

    async def wait_status(self, workload_id: str, *statuses: str, timeout: float = 15.0) -> dict[str, Any]:
        return await wait_for(
            lambda: self.workload(workload_id), lambda w: w["status"] in statuses, timeout=timeout
        )

    async def nodes(self) -> list[dict[str, Any]]:
        return list((await self.get("/v1/nodes"))["items"])


def no_eviction_grace() -> FederationConfig:
    """One local cluster whose silent nodes' work is placed again as soon as their lease expires
    (the default holds it for 30 s first: tests of a dead node use this to stay short)."""
    federation = single_cluster()
    federation.clusters[0].eviction_grace_s = 0.0
    return federation


def register_message(
    node: str,
    *,
    cpu: float = 2.0,
    memory: int = 2**31,
    heartbeat_s: float = 0.25,
    agent_version: str = "test",
) -> RegisterV1:
    """A registration as an agent of ``node`` sends it (for tests that speak to the hub directly)."""
    return RegisterV1(
        node=node,
        cluster="default",
        boot_id=uuid.uuid4().hex,
        agent_version="test",
        resources=NodeResources(cpu=cpu, memory=memory),
        heartbeat_interval_s=heartbeat_s,
    )


async def register_fake(nc: Any, subjects: Subjects, name: str, boot: str, telemetry: Telemetry) -> None:
    """Register a fake node (64 cores, 256 GiB, 0.2 s heartbeats) as an agent would: retried until
    the hub's subscription is live."""
    register = RegisterV1(
        node=name,
        cluster="default",
        boot_id=boot,
        agent_version="test",
        resources=NodeResources(cpu=64, memory=2**38),
        heartbeat_interval_s=0.2,
        telemetry=telemetry,
    )
    for _ in range(50):
        try:
            await nc.request(subjects.register(name), encode(register), timeout=5)
            return
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"the hub never answered {name}'s registration")


def hub_settings(nats_url: str, federation: FederationConfig | None = None, **overrides: Any) -> HubSettings:
    values: dict[str, Any] = {
        "nats_url": nats_url,
        "federation": federation or single_cluster(),
        "lease_missed_heartbeats": 4,
        "reconcile_interval_s": 0.1,
        "command_timeout_s": 1.0,
        "nats_connect_within_s": 5.0,
    }
    values.update(overrides)
    # Tests name a keep-alive policy or profile; the hub takes them parsed (as the CLI does).
    if isinstance(values.get("function_policy"), str):
        values["function_policy"] = make_policy(values["function_policy"])
    if isinstance(values.get("scheduler"), str):
        values["scheduler"] = load_profile(values["scheduler"])
    return HubSettings(**values)


@dataclass
class SecuredNats:
    """A nats-server that admits the hub's nkey and enrolled nodes only (as ``controlplane up``'s)."""

    server: NatsServer
    authority: NatsAuthority
    hub_seed: str

    @property
    def url(self) -> str:
        return self.server.url

    def hub_overrides(self) -> dict[str, Any]:
        """running_hub's keyword arguments for a hub that authenticates and enrols on this server."""
        return {"nats_authority": self.authority, "nats_seed": self.hub_seed, "require_enrolment": True}


@contextlib.contextmanager
def secured_nats(
    data_dir: Path, federation: FederationConfig | None = None, *, tls: ServerTls | None = None
) -> Iterator[SecuredNats]:
    """A real nats-server started from the generated configuration (the hub's key only, at first)."""
    seed = ensure_seed(data_dir / "hub.nkey")
    config = data_dir / "nats-server.conf"
    server = NatsServer(
        log_file=data_dir / "nats-server.log", config_file=config, scheme="tls" if tls else "nats"
    )
    authority = NatsAuthority(
        config_path=config,
        hub_public_key=public_key_of(seed),
        federation=federation or single_cluster(),
        nats_url=server.url,
        listen=(server.host, server.port),
        tls=tls,
        server=server,
    )
    authority.write([])
    server.start()
    try:
        yield SecuredNats(server, authority, seed)
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def running_hub(
    nats_url: str,
    database_url: str,
    federation: FederationConfig | None = None,
    *,
    auth: AuthSettings | None = None,
    nats_authority: NatsAuthority | None = None,
    extender: ExtenderSettings | None = None,
    **overrides: Any,
) -> AsyncIterator[tuple[RunningHub, Api]]:
    """A hub with its API; the client sends an admin token (``Api.session``'s default header).

    ``nats_authority``: the hub enrols nodes (``POST /v1/join``) and keeps that server's users.
    ``extender``: the hub serves the Kubernetes scheduler extender too."""
    running = await start_hub(
        hub_settings(nats_url, federation, **overrides),
        database_url=database_url,
        host="127.0.0.1",
        port=0,
        auth=auth,
        nats_authority=nats_authority,
        extender=extender,
    )
    try:
        admin = await IdentityStore(running.hub.store).create_api_token("test-admin", ["admin"])
        headers = {"Authorization": f"Bearer {admin.token}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            yield running, Api(running.url, session)
    finally:
        await running.stop()


@dataclass
class AgentHandle:
    agent: Agent
    task: asyncio.Task[None]
    power_dir: Path
    extra: dict[str, Any] = field(default_factory=dict)

    async def stop(self) -> None:
        self.agent.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, timeout=10)


def write_power_supply(
    root: Path, *, on_battery: bool, percent: float = 80.0, power_w: float | None = None
) -> None:
    """A fake /sys/class/power_supply: an AC adapter and one battery (``power_w``: its discharge
    reading, ``power_now``)."""
    ac, battery = root / "AC", root / "BAT0"
    ac.mkdir(parents=True, exist_ok=True)
    battery.mkdir(parents=True, exist_ok=True)
    (ac / "type").write_text("Mains\n")
    (ac / "online").write_text("0\n" if on_battery else "1\n")
    (battery / "type").write_text("Battery\n")
    (battery / "present").write_text("1\n")
    (battery / "capacity").write_text(f"{int(percent)}\n")
    (battery / "status").write_text("Discharging\n" if on_battery else "Charging\n")
    if power_w is not None:
        (battery / "power_now").write_text(f"{round(power_w * 1e6)}\n")


# AgentConfig keys a test may set as they are (restart back-off, offline scale-down interval, ...).
_PASS_THROUGH = {
    "restart_backoff_s",
    "restart_backoff_max_s",
    "offline_scale_interval_s",
    "local_policy",
    "node_type",
    "run_as",
    "pids_max",
    "nats_seed",
    "inbox_prefix",
    "hub_public_key",
    "nats_tls",
    "metrics_listen",
    "privacy_epsilon",
}


@contextlib.asynccontextmanager
async def running_agents(
    nats_url: str,
    tmp_path: Path,
    names: list[str],
    *,
    cluster: str = "default",
    wait_registered: bool = True,
    **config: Any,
) -> AsyncIterator[list[AgentHandle]]:
    handles: list[AgentHandle] = []
    try:
        for name in names:
            power_dir = tmp_path / f"power-{name}"
            write_power_supply(power_dir, on_battery=False)
            cfg = AgentConfig(
                nats_url=nats_url,
                cluster=cluster,
                name=name,
                heartbeat_interval_s=config.get("heartbeat_interval_s", 0.25),
                work_dir=str(tmp_path / "agents" / name),
                cpu=config.get("cpu", 4.0),
                memory=config.get("memory", 8 * 2**30),
                stop_grace_s=2.0,
                labels=config.get("labels", {}),
                subject_prefix=config.get("subject_prefix", "edgeplane.v1"),
                **{k: v for k, v in config.items() if k in _PASS_THROUGH},
            )
            agent = Agent(
                cfg, power=SysfsPowerReader(power_dir), gpus=StaticGpuReader(config.get("gpus", []))
            )
            handles.append(AgentHandle(agent, asyncio.create_task(agent.run()), power_dir))
        for handle in handles if wait_registered else []:
            await asyncio.wait_for(handle.agent.registered.wait(), timeout=10)
        yield handles
    finally:
        for handle in handles:
            await handle.stop()


PY = sys.executable

# Agents keep their secure default in tests: as root, user code runs as an unprivileged user,
# which cannot reach what only root may (pytest's tmp_path; an interpreter under /root).
_OTHERS = RunUser("nobody", 65534, 65534)  # what the run user may reach: what anyone may
CONFINED = os.geteuid() == 0
# A Python interpreter confined workloads can run: this one, else the system's (None: neither).
CONFINED_PY: str | None = next(
    (
        py
        for py in (sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin"))
        if py and (not CONFINED or blocked_at(Path(py), uid=65534, gids={65534}, bits=5) is None)
    ),
    None,
)
# Function workers run sys.executable, or one of the same version where the run user cannot; with
# neither, the agent refuses Python functions (tests/functional/test_confinement.py checks that),
# so tests about other function behaviour opt out there, explicitly: these keys go to
# running_agents, --run-as to spawn_agent.
PYTHON_FUNCTIONS: dict[str, Any] = (
    {"run_as": "agent"} if CONFINED and worker_python(_OTHERS)[0] is None else {}
)


def spawn_agent(
    nats_url: str,
    name: str,
    tmp_path: Path,
    *,
    cpu: str = "1",
    memory: str = "2Gi",
    run_as: str | None = None,
) -> subprocess.Popen[bytes]:
    """A real ``edge-agent run`` process (work dir ``tmp_path/name``, no power supply, quiet)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_agent.cli",
            "run",
            "--nats",
            nats_url,
            "--name",
            name,
            "--heartbeat-interval",
            "0.25",
            "--cpu",
            cpu,
            "--memory",
            memory,
            "--work-dir",
            str(tmp_path / name),
            "--power-supply-path",
            str(tmp_path / "no-power-supply"),
            "--log-level",
            "WARNING",
            *(["--run-as", run_as] if run_as is not None else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# --- the client CLI and enrolment, as a user and a node do them ---------------------------------


def client_cli(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``controlplane ARGV`` in a process of its own, from ``cwd`` (its HOME too), reading the
    client config found there (``write_admin_config``)."""
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", *argv],
        cwd=cwd,
        env={**os.environ, "HOME": str(cwd), "EDGEPLANE_CONFIG": "", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def write_admin_config(running: RunningHub, home: Path) -> None:
    """The config file ``controlplane up`` writes, with an admin token, in ``home/.edgeplane``."""
    from controlplane.client.config import write_client_config

    admin = await IdentityStore(running.hub.store).create_api_token("cli", ["admin"])
    data_dir = home / ".edgeplane"
    data_dir.mkdir()
    (data_dir / "admin.token").write_text(admin.token + "\n")
    write_client_config(data_dir, running.url, data_dir / "admin.token")


async def enrol(running: RunningHub, name: str, cluster: str = "default") -> tuple[str, dict[str, Any]]:
    """Enrol node ``name`` as an agent does (``POST /v1/join`` with a fresh join token and key):
    its nkey seed and the hub's answer."""
    from edgeplane_contract.credentials import new_user_seed

    token = await IdentityStore(running.hub.store).create_join_token(cluster, 60.0)
    seed = new_user_seed()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            running.url + "/v1/join",
            json={"token": token.token, "node": name, "public_key": public_key_of(seed)},
            timeout=aiohttp.ClientTimeout(total=10),
        ) as response,
    ):
        reply = await response.json()
        assert response.status == 201, reply
    return seed, reply
