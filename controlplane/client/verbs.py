"""The client verbs: each takes a HubClient and the parsed arguments, prints its answer on
stdout and returns the exit status; failures raise ClientError (``commands/client_options``
prints them as one line)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from typing import Any

from controlplane.client.describe import describe_node, describe_workload
from controlplane.client.documents import load_documents
from controlplane.client.http import ApiError, ClientError, HubClient
from controlplane.client.render import dump, table
from controlplane.client.tables import RESOURCES, TOP_NODES, Resource, TableSpec

__all__ = [
    "INVOKE_TIMEOUT_S",
    "LOGS_TIMEOUT_S",
    "apply",
    "delete",
    "describe",
    "get",
    "invoke",
    "logs",
    "top",
]

# A synchronous invocation waits for the function (cold start and its own timeout_s).
INVOKE_TIMEOUT_S = 120.0
# A log of up to limit_bytes comes in chunks the hub fetches from the node one by one.
LOGS_TIMEOUT_S = 60.0
_EVENTS_PAGE = 1000
_EVENTS_MAX_PAGES = 100  # the newest N of at most 100k events


def _print_items(items: list[dict[str, Any]], spec: TableSpec, output: str) -> None:
    if output != "table":
        print(dump(items, output))
    elif items:
        print(table(spec.header, [spec.row(item) for item in items]))
    else:
        print("No resources found.", file=sys.stderr)


def _filters(resource: Resource, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """The list's query filters from ``get --status/--name/--node/--cluster``; ClientError for one
    the kind's list does not take (never silently ignored)."""
    given = {f: getattr(args, f"filter_{f}", None) for f in ("status", "name", "node", "cluster")}
    for flag, value in given.items():
        if value is not None and (flag not in resource.filters or args.name):
            takes = ", ".join(f"--{f}" for f in resource.filters) or "no filters"
            where = f"one {resource.singular} by name" if args.name else f"`get {kind}` (it takes {takes})"
            raise ClientError(f"--{flag} does not apply to {where}")
    if getattr(args, "offset", 0) and (not resource.paged or args.name):
        raise ClientError(f"--offset applies to the lists of nodes and workloads, not to `get {kind}`")
    if getattr(args, "continue_token", None) is not None:
        if kind != "workloads" or args.name:
            raise ClientError(f"--continue applies to the list of workloads, not to `get {kind}`")
        if getattr(args, "offset", 0):
            raise ClientError("--continue and --offset do not go together (the token says where)")
    return {f: v for f, v in given.items() if v is not None}


def _print_resource(items: list[dict[str, Any]], resource: Resource, output: str) -> None:
    if output == "name":
        for item in items:
            print(resource.name_of(item))
    elif output == "wide":
        _print_items(items, resource.wide or resource.table, "table")
    else:
        _print_items(items, resource.table, output)


def get(client: HubClient, args: argparse.Namespace) -> int:
    kind = args.kind  # plural, as commands/get.py spells it
    resource = RESOURCES[kind]
    filters = _filters(resource, kind, args)
    if args.name:
        if not resource.by_name:
            raise ClientError(f"{kind} cannot be fetched one by name; use `controlplane get {kind}`")
        item = client.get(f"{resource.path}/{args.name}")
        if args.output in ("json", "yaml"):  # one object, as the API answers it
            print(dump(item, args.output))
        else:
            _print_resource([item], resource, args.output)
        return 0
    if kind == "events":
        items = _newest_events(client, args.limit, args.event_kind)
    elif resource.paged:
        offset = getattr(args, "offset", 0)
        query = {**filters, "limit": args.limit, "offset": offset}
        query["continue"] = getattr(args, "continue_token", None)
        body = client.get(resource.path, query)
        items = body["items"]
        total = body.get("total", 0)
        if body.get("continue"):  # workloads: a keyset token, stable while new work arrives
            print(
                f"({len(items)} of {total}, newest first; --continue {body['continue']} shows the next)",
                file=sys.stderr,
            )
        elif kind != "workloads" and total > offset + len(items):
            print(
                f"({len(items)} of {total}, by name; --offset {offset + len(items)} shows the next)",
                file=sys.stderr,
            )
    else:
        items = client.get(resource.path)["items"][: args.limit]
    _print_resource(items, resource, args.output)
    return 0


def _newest_events(client: HubClient, limit: int, kind: str | None) -> list[dict[str, Any]]:
    """The newest ``limit`` events, oldest first (the API pages forward from an event id)."""
    newest: deque[dict[str, Any]] = deque(maxlen=limit)
    after = 0
    for _ in range(_EVENTS_MAX_PAGES):
        page = client.get("/v1/events", {"after": after, "limit": _EVENTS_PAGE, "kind": kind})
        newest.extend(page["items"])
        after = page["next_after"]
        if len(page["items"]) < _EVENTS_PAGE:
            break
    return list(newest)


def describe(client: HubClient, args: argparse.Namespace) -> int:
    if args.kind == "workload":
        workload = client.get(f"/v1/workloads/{args.name}")
        placement = client.get(f"/v1/workloads/{args.name}/placement")
        print(describe_workload(workload, placement))
        return 0
    node = client.get(f"/v1/nodes/{args.name}")
    print(describe_node(node, _latest_workloads_on(client, args.name, 20)))
    return 0


def _latest_workloads_on(client: HubClient, node: str, count: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.get("/v1/workloads", {"node": node, "limit": count})["items"]
    return items  # the API lists newest first


def apply(client: HubClient, args: argparse.Namespace) -> int:
    """Every document is read before anything is sent; then each is sent, and a refused one does
    not stop the others (the exit status says one failed)."""
    documents = load_documents(args.filename)
    failed = 0
    for document in documents:
        path = "/v1/workloads" if document.kind == "workload" else "/v1/functions"
        try:
            reply = client.call("POST", path, document.body)
        except ApiError as exc:
            failed += 1
            print(f"{document.origin}: {document.kind}/{document.name}: {exc}", file=sys.stderr)
            continue
        body = reply.body
        if document.kind == "workload":
            print(f"workload/{body['name']} created (id {body['id']})")
        else:
            verb = "created" if reply.status == 201 else "unchanged"
            print(f"function/{body['name']} {verb} (version {body['version']})")
    return 1 if failed else 0


def delete(client: HubClient, args: argparse.Namespace) -> int:
    if getattr(args, "force", False) and args.kind != "node":
        raise ClientError("--force applies to `delete node` only")
    if args.kind == "workload":
        body = client.call("DELETE", f"/v1/workloads/{args.name}").body
        print(f"workload/{args.name} deleted (status {body.get('status')})")
    elif args.kind == "node":
        query = {"forget": "true", "force": "true" if args.force else None}
        body = client.call("DELETE", f"/v1/nodes/{args.name}", query=query).body
        lost = len(body.get("placements_lost") or [])
        print(f"node/{args.name} deleted" + (f" ({lost} placement(s) placed again)" if lost else ""))
    else:
        client.call("DELETE", f"/v1/functions/{args.name}")
        print(f"function/{args.name} deleted")
    return 0


def invoke(client: HubClient, args: argparse.Namespace) -> int:
    """The function's result as JSON; a failed invocation raises its error (code, message, id)."""
    try:
        event = json.loads(args.data) if args.data is not None else None
    except ValueError as exc:
        raise ClientError(f"--data is not JSON: {exc}") from None
    try:
        reply = client.call(
            "POST",
            f"/v1/functions/{args.name}/invoke",
            event,
            send_body=True,
            timeout_s=args.timeout or INVOKE_TIMEOUT_S,
        )
    except ApiError as exc:
        raise _invocation_error(exc, verbose=args.verbose) from None
    if args.verbose:
        h = reply.headers
        print(
            f"invocation {h.get('X-Edgeplane-Invocation-Id')} on {h.get('X-Edgeplane-Node')}: "
            f"cold start {h.get('X-Edgeplane-Cold-Start')}, {h.get('X-Edgeplane-Total-Ms')} ms",
            file=sys.stderr,
        )
    print(json.dumps(reply.body))
    return 0


def _invocation_error(exc: ApiError, *, verbose: bool) -> ClientError:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") or {}
    if not body.get("invocation_id"):
        return exc  # refused before it ran (no such function, bad event, ...)
    kind = f"{error['type']}: " if error.get("type") else ""
    message = f"invocation {body['invocation_id']} failed ({exc.code}): {kind}{exc.message}"
    if verbose and error.get("traceback"):
        message += "\n" + str(error["traceback"]).rstrip()
    return ClientError(message)


def top(client: HubClient, args: argparse.Namespace) -> int:
    items = client.get("/v1/nodes", {"limit": args.limit})["items"]
    _print_items(items, TOP_NODES, args.output)
    return 0


def logs(client: HubClient, args: argparse.Namespace) -> int:
    """A workload replica's output as it is (``-f``: until the replica ends, or Ctrl-C)."""
    query = {"replica": args.replica, "tail": args.tail, "follow": "1" if args.follow else None}
    timeout = None if args.follow else (args.timeout or LOGS_TIMEOUT_S)
    out = sys.stdout.buffer
    try:
        for chunk in client.stream(f"/v1/workloads/{args.workload}/logs", query, timeout_s=timeout):
            out.write(chunk)
            out.flush()
    except KeyboardInterrupt:
        return 130
    return 0
