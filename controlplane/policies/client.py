"""``controlplane policy push|list|rollout|promote|rollback|canary``: the policy versions of a
running hub, through its API; ``policy collect``: the nodes' decision logs, for retraining;
``policy profile-canary``: a change of the hub's scheduling profile, rolled out as a canary."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any

from controlplane.client.http import ClientError, HubClient
from controlplane.client.render import dump, table

__all__ = [
    "VERBS",
    "canary",
    "collect",
    "configure_client",
    "list_policies",
    "profile_canary",
    "promote",
    "push",
    "rollback",
    "rollout",
]

_HEADER = ["VERSION", "STATE", "SHA256", "BYTES", "AGREEMENT", "REWARD", "VS", "CREATED", "DESCRIPTION"]


def configure_client(sub: Any) -> None:
    from controlplane.commands.client_options import add_client_arguments, add_output_argument

    push_parser = sub.add_parser("push", help="upload a model to the hub as a new policy version")
    push_parser.add_argument("model", metavar="MODEL.onnx", help="the ONNX model file")
    push_parser.add_argument(
        "--metadata", metavar="FILE", help="its metadata.json (default: metadata.json next to the model)"
    )
    push_parser.add_argument(
        "--description", default="", help="what this version is (at most 200 characters)"
    )
    push_parser.add_argument(
        "--min-agreement",
        type=float,
        metavar="SHARE",
        help="share of held-out decisions on which it must agree with the version in force "
        "(0-1; the hub's default 0.5)",
    )
    add_output_argument(push_parser)
    add_client_arguments(push_parser)
    list_parser = sub.add_parser("list", help="the hub's policy versions")
    add_output_argument(list_parser)
    add_client_arguments(list_parser)
    rollout = sub.add_parser("rollout", help="run a version on some nodes (a canary)")
    rollout.add_argument("version", help="a version (3 or v3)")
    target = rollout.add_mutually_exclusive_group(required=True)
    target.add_argument("--nodes", metavar="A,B", help="these nodes")
    target.add_argument("--clusters", metavar="C,D", help="every node of these clusters")
    target.add_argument(
        "--labels", metavar="K=V,..", help="every node that has all these labels (as it registered them)"
    )
    target.add_argument("--percent", type=int, metavar="P", help="this share of all nodes (1-100)")
    add_client_arguments(rollout)
    promote = sub.add_parser("promote", help="make a version the fleet's")
    promote.add_argument("version", help="a version (3 or v3)")
    add_client_arguments(promote)
    canary = sub.add_parser(
        "canary", help="roll a version out step by step under the canary controller (or --status)"
    )
    canary.add_argument("version", help="a version (3 or v3)")
    canary.add_argument("--status", action="store_true", help="show its canary instead of starting one")
    canary.add_argument("--steps", metavar="P,Q,..", help="percents of nodes, rising (default 10,50,100)")
    canary.add_argument("--dwell", type=float, metavar="S", help="seconds each step is held (default 300)")
    canary.add_argument("--threshold", type=float, help="anomaly score that rolls it back (default 0.25)")
    canary.add_argument("--sustain", type=float, metavar="S", help="for this long (default 60 s)")
    canary.add_argument("--min-samples", type=int, metavar="N", help="samples a step needs (default 30)")
    add_output_argument(canary)
    add_client_arguments(canary)
    profile = sub.add_parser(
        "profile-canary",
        help="place a growing share of new workloads with another scheduling profile; the controller "
        "promotes it or reverts it on its placement delays (or --status)",
    )
    profile.add_argument(
        "profile", nargs="?", help="a built-in profile's name, or a YAML/JSON file holding a profile"
    )
    profile.add_argument(
        "--status", action="store_true", help="show the last profile canary and the profile in force"
    )
    profile.add_argument(
        "--steps", metavar="P,Q,..", help="percents of new workloads, rising (default 10,50,100)"
    )
    profile.add_argument("--dwell", type=float, metavar="S", help="seconds each step is held (default 300)")
    profile.add_argument("--threshold", type=float, help="anomaly score that reverts it (default 1.0)")
    profile.add_argument("--sustain", type=float, metavar="S", help="for this long (default 30 s)")
    profile.add_argument("--min-samples", type=int, metavar="N", help="samples a step needs (default 20)")
    add_output_argument(profile)
    add_client_arguments(profile)
    collect_parser = sub.add_parser(
        "collect", help="collect the nodes' decision logs (noised rewards) into a JSON Lines file"
    )
    collect_parser.add_argument("--out", required=True, metavar="FILE", help="one JSON object per decision")
    collect_parser.add_argument(
        "--limit", type=int, default=1000, metavar="N", help="newest entries per node (1-10000; default 1000)"
    )
    collect_parser.add_argument("--nodes", metavar="A,B", help="these nodes only (default: every Ready node)")
    collect_parser.add_argument(
        "--deadline", type=float, default=5.0, metavar="S", help="seconds to wait for the nodes (default 5)"
    )
    add_client_arguments(collect_parser)
    rollback = sub.add_parser("rollback", help="take a version off every node")
    rollback.add_argument("version", help="a version (3 or v3)")
    rollback.add_argument("--reason", default="", help="why (recorded in the event)")
    add_client_arguments(rollback)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def push(client: HubClient, args: argparse.Namespace) -> int:
    model_path = Path(args.model)
    metadata_path = Path(args.metadata) if args.metadata else model_path.parent / "metadata.json"
    model = _read(model_path, "model")
    try:
        metadata = json.loads(_read(metadata_path, "metadata"))
    except ValueError as exc:
        raise ClientError(f"{metadata_path} is not JSON: {exc}") from None
    body: dict[str, Any] = {
        "model": base64.b64encode(model).decode(),
        "metadata": metadata,
        "description": args.description,
    }
    if args.min_agreement is not None:
        body["min_agreement"] = args.min_agreement
    reply = client.call("POST", "/v1/policies", body)
    policy = reply.body
    if args.output != "table":
        print(dump(policy, args.output))
        return 0
    e = policy["evaluation"]
    verb = "registered" if reply.status == 201 else "is already registered (the same model)"
    print(
        f"policy v{policy['version']} {verb}: agrees with {e['reference']} on {e['agreement']:.1%} of "
        f"{e['cases']} held-out decisions; mean reward {e['mean_reward']:.4f} "
        f"(the reference's {e['reference_mean_reward']:.4f})"
    )
    return 0


def _row(p: dict[str, Any]) -> list[str]:
    e = p["evaluation"]
    return [
        f"v{p['version']}",
        p["state"],
        p["sha256"][:12],
        str(p["size"]),
        f"{e['agreement']:.1%}",
        f"{e['mean_reward']:.4f}",
        e["reference"],
        p["created_at"],
        p["description"],
    ]


def list_policies(client: HubClient, args: argparse.Namespace) -> int:
    items = client.get("/v1/policies")["items"]
    if args.output != "table":
        print(dump(items, args.output))
    elif items:
        print(table(_HEADER, [_row(p) for p in items]))
    else:
        print("No policy versions yet (the agents run the model they ship with).", file=sys.stderr)
    return 0


def _path(version: str, action: str) -> str:
    if not version.removeprefix("v").isdigit():
        raise ClientError(f"{version!r} is not a policy version (e.g. 3 or v3)")
    return f"/v1/policies/{version.removeprefix('v')}/{action}"


def _names(raw: str) -> list[str]:
    return [n.strip() for n in raw.split(",") if n.strip()]


def rollout(client: HubClient, args: argparse.Namespace) -> int:
    if args.nodes:
        body: dict[str, Any] = {"nodes": _names(args.nodes)}
    elif args.clusters:
        body = {"clusters": _names(args.clusters)}
    elif args.labels:
        body = {"labels": _labels(args.labels)}
    else:
        body = {"percent": args.percent}
    result = client.call("POST", _path(args.version, "rollout"), body).body
    nodes = ", ".join(result["nodes"]) or "no node"
    print(f"policy v{result['version']} rolled out to {nodes} ({len(result['changed'])} changed)")
    return 0


def _labels(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` as a mapping; a pair without ``=`` is an error naming the flag."""
    labels: dict[str, str] = {}
    for pair in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"controlplane policy rollout: --labels: {pair!r} is not NAME=VALUE")
        labels[key.strip()] = value.strip()
    return labels


def promote(client: HubClient, args: argparse.Namespace) -> int:
    policy = client.call("POST", _path(args.version, "promote"), send_body=False).body
    print(f"policy v{policy['version']} promoted: every node without a canary assignment runs it")
    return 0


def rollback(client: HubClient, args: argparse.Namespace) -> int:
    policy = client.call("POST", _path(args.version, "rollback"), {"reason": args.reason}).body
    print(f"policy v{policy['version']} rolled back: its nodes return to the fleet's version")
    return 0


def collect(client: HubClient, args: argparse.Namespace) -> int:
    """Write every collected decision as one JSON line (its node and the node's epsilon added)."""
    body: dict[str, Any] = {"limit": args.limit, "deadline_s": args.deadline}
    if args.nodes:
        body["nodes"] = _names(args.nodes)
    logs = client.call("POST", "/v1/decision-logs", body).body
    out = Path(args.out)
    try:
        with out.open("w", encoding="utf-8") as f:
            for node in logs["nodes"]:
                for entry in node["entries"]:
                    f.write(json.dumps({"node": node["node"], "epsilon": node["epsilon"], **entry}) + "\n")
    except OSError as exc:
        raise ClientError(f"cannot write {out}: {exc.strerror or exc}") from None
    nodes = logs["nodes"]
    truncated = [n["node"] for n in nodes if n["truncated"]]
    print(
        f"collected {logs['entries']} decisions from {len(nodes)} node(s) into {out}"
        + (f"; truncated (did not fit one message): {', '.join(truncated)}" if truncated else "")
    )
    for missing in logs["missing"]:
        print(f"  {missing['node']}: nothing collected ({missing['reason']})", file=sys.stderr)
    return 0


def _controller_body(args: argparse.Namespace) -> dict[str, Any]:
    """The canary controller's rules a canary command was given (the hub's defaults for the rest)."""
    body: dict[str, Any] = {}
    if args.steps:
        try:
            body["steps"] = [int(p) for p in _names(args.steps)]
        except ValueError:
            raise ClientError(f"--steps: {args.steps!r} is not a list of percents") from None
    for flag, key in (
        ("dwell", "dwell_s"),
        ("threshold", "threshold"),
        ("sustain", "sustain_s"),
        ("min_samples", "min_samples"),
    ):
        if getattr(args, flag) is not None:
            body[key] = getattr(args, flag)
    return body


def canary(client: HubClient, args: argparse.Namespace) -> int:
    if args.status:
        status = client.get(_path(args.version, "canary"))
    else:
        status = client.call("POST", _path(args.version, "canary"), _controller_body(args)).body
    if args.output != "table":
        print(dump(status, args.output))
        return 0
    print(
        f"policy v{status['version']} canary: {status['state']} at {status['fraction']:.0%} of nodes "
        f"({', '.join(status['nodes']) or 'none'}); samples {status['samples']['canary']} canary, "
        f"{status['samples']['control']} control; scores {status['scores']['canary']:.2f} / "
        f"{status['scores']['control']:.2f}"
    )
    for e in status["events"]:
        print(f"  t={e['t_s']:8.1f} s  {e['kind']:<8} {e['fraction']:4.0%}  {e['reason']}")
    return 0


def _profile_body(raw: str) -> Any:
    """A built-in name as is; a file (YAML or JSON) as the profile it holds."""
    path = Path(raw)
    if not (path.suffix in (".yaml", ".yml", ".json") or path.exists()):
        return raw
    import yaml

    try:
        return yaml.safe_load(_read(path, "profile"))
    except yaml.YAMLError as exc:
        raise ClientError(f"{path}: not a YAML or JSON profile: {exc}") from None


def profile_canary(client: HubClient, args: argparse.Namespace) -> int:
    if args.status:
        status = client.get("/v1/scheduling-profiles/canary")
    else:
        if not args.profile:
            raise ClientError("name the candidate profile (a built-in name or a file), or pass --status")
        body = {"profile": _profile_body(args.profile), **_controller_body(args)}
        status = client.call("POST", "/v1/scheduling-profiles/canary", body).body
    if args.output != "table":
        print(dump(status, args.output))
        return 0
    print(
        f"scheduling profile {status['profile']!r} canary (profile in force then: {status['previous']!r}): "
        f"{status['state']} at {status['fraction']:.0%} of new workloads; samples "
        f"{status['samples']['canary']} canary, {status['samples']['control']} control; scores "
        f"{status['scores']['canary']:.2f} / {status['scores']['control']:.2f}"
    )
    for e in status["events"]:
        print(f"  t={e['t_s']:8.1f} s  {e['kind']:<8} {e['fraction']:4.0%}  {e['reason']}")
    return 0


VERBS = {
    "push": push,
    "list": list_policies,
    "rollout": rollout,
    "promote": promote,
    "rollback": rollback,
    "canary": canary,
    "profile-canary": profile_canary,
    "collect": collect,
}
