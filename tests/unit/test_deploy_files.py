"""The files under deploy/ stay true to the code: they parse, the Kubernetes objects are well
formed, every ``controlplane``/``edge-agent`` flag they use exists (a renamed option fails here,
not at someone's 3 a.m. rollout), the Dockerfile copies what exists, and systemd accepts the units.

Docker and a Kubernetes API server are not needed (nor available in CI): these are the checks
that run offline.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from controlplane.api.app import create_app
from controlplane.cli import build_parser as controlplane_parser
from controlplane.federation.config import load_federation
from edge_agent.cli import build_parser as agent_parser
from edge_agent.config import load_agent_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
K8S_FILES = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Where one shell command ends and the next begins.
SEPARATORS = re.compile(r"&&|\|\||;|\||>|\n|\$\(|\)")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser, words: list[str]) -> tuple[str, set[str]]:
    """The flags of the (sub)command ``words`` name, as its ``--help`` lists them, with the
    flags of the parsers above it (argparse takes those before the verb)."""
    flags: set[str] = set()
    path = []
    for word in words:
        flags |= {s for a in parser._actions for s in a.option_strings}
        nested = _subparsers(parser)
        if word not in nested:
            break
        parser = nested[word]
        path.append(word)
    flags |= {s for a in parser._actions for s in a.option_strings}
    return " ".join(path), flags


PROGRAMS = {"controlplane": controlplane_parser, "edge-agent": agent_parser}


def _invocations(text: str) -> list[tuple[str, list[str]]]:
    """(program, words after it) for every ``controlplane ...`` or ``edge-agent ...`` command."""
    found = []
    for segment in SEPARATORS.split(text):
        words = segment.split()
        for index, word in enumerate(words):
            program = Path(word.strip("'\"")).name
            if program in PROGRAMS and (index == 0 or not words[index - 1].startswith("--")):
                found.append((program, words[index + 1 :]))
                break
    return found


def _command_lines(path: Path) -> list[str]:
    """The command lines a deploy file runs, one string each."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".service":
        joined = text.replace("\\\n", " ")
        return [line.split("=", 1)[1] for line in joined.splitlines() if re.match(r"^Exec\w+=", line)]
    lines: list[str] = []
    for doc in yaml.safe_load_all(text):
        _collect_commands(doc, lines)
    return lines


def _collect_commands(node: Any, out: list[str]) -> None:
    if isinstance(node, dict):
        command, args = node.get("command"), node.get("args")
        if command is not None or args is not None:
            parts = [*_as_list(command), *_as_list(args)]
            out.append(" ".join(str(p) for p in parts).replace("\\\n", " "))
        for value in node.values():
            _collect_commands(value, out)
    elif isinstance(node, list):
        for value in node:
            _collect_commands(value, out)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path: Path) -> None:
    docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    assert docs, f"{path} is empty"


def test_the_example_configs_load_as_the_programs_load_them() -> None:
    federation = load_federation(DEPLOY / "federation.yaml")
    assert federation.default_cluster == "edge-eu"
    agent = load_agent_config(str(DEPLOY / "agent.example.yaml"), {})
    assert agent.name == "edge-eu-01"


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: p.name)
def test_kubernetes_objects_are_well_formed(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if doc is None:
            continue
        assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"], doc
        assert isinstance(doc.get("kind"), str) and doc["kind"], doc
        if doc["apiVersion"].startswith("kubescheduler.config.k8s.io/"):
            continue  # a component's configuration file, not an API object: it has no metadata
        assert re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", doc.get("metadata", {}).get("name", "")), doc
        template = doc.get("spec", {}).get("template")
        if template is None:
            continue
        # Workloads: the selector selects the pods it makes, and every container has an image.
        selector = doc["spec"]["selector"]["matchLabels"]
        assert selector.items() <= template["metadata"]["labels"].items(), doc["metadata"]["name"]
        pod = template["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert container.get("image"), container
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in {v["name"] for v in pod.get("volumes", [])}, mount


def test_the_agent_daemonset_runs_on_edge_nodes_only() -> None:
    (daemonset,) = [
        doc
        for doc in yaml.safe_load_all((DEPLOY / "kubernetes" / "agent.yaml").read_text(encoding="utf-8"))
        if doc and doc["kind"] == "DaemonSet"
    ]
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"]


DEPLOY_COMMANDS = sorted(
    [*UNITS, DEPLOY / "compose.yaml", *K8S_FILES], key=lambda p: str(p.relative_to(DEPLOY))
)


@pytest.mark.parametrize("path", DEPLOY_COMMANDS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_flag_a_deploy_file_passes_exists(path: Path) -> None:
    invocations = [inv for line in _command_lines(path) for inv in _invocations(line)]
    if path.name != "kube-scheduler-config.yaml":  # another file set's; it runs no command
        assert invocations, f"{path.name} runs neither controlplane nor edge-agent"
    for program, words in invocations:
        command, known = _options(PROGRAMS[program](), words)
        assert command, f"{path.name}: `{program} {' '.join(words[:2])}` is not a command"
        used = set(FLAG.findall(" ".join(words)))
        unknown = used - known
        assert not unknown, f"{path.name}: `{program} {command}` has no {sorted(unknown)}"


def test_the_flag_check_catches_a_renamed_option() -> None:
    (invocation,) = _invocations("exec edge-agent run --name a --hub-url http://hub:8080")
    _, known = _options(agent_parser(), invocation[1])
    assert "--hub-url" not in known and "--hub" in known


def test_the_dockerfile_copies_what_exists() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    sources = []
    for line in dockerfile.replace("\\\n", " ").splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"deploy/Dockerfile copies {source}, which does not exist"
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert not set(sources) & set(ignored), "the Dockerfile copies what .dockerignore leaves out"


def test_the_compose_agents_enrol_with_tokens_that_hub_init_makes() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    init = " ".join(services["hub-init"]["command"])
    agents = [name for name in services if name.startswith("agent-")]
    assert len(agents) == 2
    for name in agents:
        line = " ".join(services[name]["command"])
        assert f"/var/lib/edgeplane/enrol/{name}.token" in line and "--join" in line
        assert f"--name {name}" in line
    assert "for agent in agent-1 agent-2" in init and "agent-token create" in init
    nats = [name for name in services if name.startswith("nats-")]
    assert len(nats) == 3
    for name in [*nats, "postgres", "hub", *agents]:
        assert "healthcheck" in services[name], name


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_accepts_the_unit(unit: Path, tmp_path: Path) -> None:
    # verify insists that ExecStart's binary exists: point it at this environment's.
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "controlplane").exists():
        pytest.skip(f"the entry points are not installed in {bin_dir}")
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text(encoding="utf-8").replace("/usr/local/bin/", f"{bin_dir}/"))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in result.stderr.splitlines() if unit.name in line]
    assert result.returncode == 0 and not problems, result.stderr


def _hub_objects() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "kubernetes" / "hub.yaml").read_text(encoding="utf-8"))
    return {doc["kind"]: doc for doc in docs if doc}


def test_the_hub_probes_split_liveness_from_readiness() -> None:
    """Issue 22: /healthz (503 without NATS) as the livenessProbe restarted the hub in a NATS
    outage. Liveness is /livez (the process answers), readiness /readyz (store, NATS, hub)."""
    (hub,) = _hub_objects()["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert hub["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert hub["readinessProbe"]["httpGet"]["path"] == "/readyz"
    app_paths = {route.resource.canonical for route in _app_routes()}  # type: ignore[union-attr]
    assert {"/livez", "/readyz"} <= app_paths


def _app_routes() -> list[Any]:
    return list(create_app(hub=SimpleNamespace(store=None)).router.routes())  # type: ignore[arg-type]


def test_the_hub_keeps_its_admin_token_in_a_secret() -> None:
    """Issue 22: with an emptyDir data dir every restart made a new admin token."""
    spec = _hub_objects()["Deployment"]["spec"]["template"]["spec"]
    (hub,) = spec["containers"]
    data_dir = hub["args"][hub["args"].index("--data-dir") + 1]
    (mount,) = [m for m in hub["volumeMounts"] if m["mountPath"] == f"{data_dir}/admin.token"]
    assert mount["subPath"] == "admin.token"
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert {"key": "admin-token", "path": "admin.token"} in volume["secret"]["items"]


def test_the_hub_keeps_its_secrets_key_in_a_secret() -> None:
    """Issue 20's env sealing: a key made in an emptyDir would be a new one per pod, and the values
    sealed with the old one unreadable (the hub refuses to start on them)."""
    spec = _hub_objects()["Deployment"]["spec"]["template"]["spec"]
    (hub,) = spec["containers"]
    key_file = Path(hub["args"][hub["args"].index("--secrets-key") + 1])
    (mount,) = [m for m in hub["volumeMounts"] if m["mountPath"] == str(key_file.parent)]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert {"key": "secrets-key", "path": key_file.name} in volume["secret"]["items"]
    assert volume["secret"]["defaultMode"] & 0o077 == 0  # the hub refuses a key others may read


def test_the_hub_serves_the_extender_kube_scheduler_calls() -> None:
    """Issue 22: kube-scheduler-config.yaml called port 8888, which neither the Deployment nor the
    Service had, and the hub was not started with the extender."""
    objects = _hub_objects()
    config = yaml.safe_load(
        (DEPLOY / "kubernetes" / "kube-scheduler-config.yaml").read_text(encoding="utf-8")
    )
    (extender,) = config["extenders"]
    url = re.match(r"^(https?)://([^:/]+):(\d+)(/.*)$", extender["urlPrefix"])
    assert url, extender["urlPrefix"]
    scheme, host, port, path = url.groups()
    service = objects["Service"]
    assert host == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert path == "/extender"
    (service_port,) = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
    spec = objects["Deployment"]["spec"]["template"]["spec"]
    (hub,) = spec["containers"]
    (container_port,) = [p for p in hub["ports"] if p["name"] == service_port["targetPort"]]
    args = hub["args"]
    assert args[args.index("--extender-listen") + 1].endswith(f":{container_port['containerPort']}")
    assert scheme == "https" and extender["enableHTTPS"] is True
    # Off loopback the extender needs TLS with client certificates, from a mounted Secret.
    mounts = {m["mountPath"]: m["name"] for m in hub["volumeMounts"]}
    secrets = {v["name"] for v in spec["volumes"] if "secret" in v}
    for flag in ("--extender-tls-cert", "--extender-tls-key", "--extender-client-ca"):
        file = Path(args[args.index(flag) + 1])
        assert mounts.get(str(file.parent)) in secrets, f"{flag} {file} is not in a mounted Secret"


K8S_OBJECTS = [
    (path, doc)
    for path in K8S_FILES
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
    # kube-scheduler's configuration is a component's file: the API's schemas do not cover it.
    if doc and not doc["apiVersion"].startswith("kubescheduler.config.k8s.io/")
]


@pytest.mark.parametrize(
    ("path", "doc"), K8S_OBJECTS, ids=lambda v: v.name if isinstance(v, Path) else v["kind"]
)
def test_kubernetes_objects_validate_against_the_kubernetes_schemas(path: Path, doc: dict[str, Any]) -> None:
    """Strict validation (no unknown fields, right types) against the OpenAPI schemas of the
    Kubernetes API that kubernetes-validate ships: a misspelt or misplaced field fails here."""
    validator = pytest.importorskip("kubernetes_validate")
    try:
        validator.validate(doc, validator.latest_version(), strict=True)
    except validator.ValidationError as exc:
        where = ".".join(str(part) for part in exc.path)
        pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata']['name']}: {where}: {exc.message}")


def test_the_schema_check_catches_a_misspelt_field() -> None:
    validator = pytest.importorskip("kubernetes_validate")
    deployment = _hub_objects()["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGets"] = {}
    with pytest.raises(validator.ValidationError):
        validator.validate(deployment, validator.latest_version(), strict=True)


def test_the_hub_runs_several_replicas_that_share_one_leader() -> None:
    """Issue 24: three replicas on PostgreSQL, a lease, each reachable by the others at its own pod
    IP (where standbys forward the API), one pod at a time in an upgrade and in a drain."""
    objects = _hub_objects()
    deployment = objects["Deployment"]["spec"]
    assert deployment["replicas"] == 3
    assert deployment["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    (hub,) = deployment["template"]["spec"]["containers"]
    args = hub["args"]
    assert float(args[args.index("--hub-lease-s") + 1]) > 0
    assert args[args.index("--advertise-url") + 1] == "http://$(POD_IP):8080"
    (pod_ip,) = [e for e in hub["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert objects["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
