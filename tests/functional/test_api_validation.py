"""Every bad POST gets a 4xx with a JSON error naming the field; the OpenAPI document matches the routes."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from types import SimpleNamespace

import pytest
from harness import PYTHON_FUNCTIONS, running_agents, running_hub, wait_for

from controlplane.api.app import create_app
from controlplane.api.auth import PUBLIC_ROUTES, required_scope
from controlplane.api.openapi import PUBLIC_OPERATIONS, openapi_document
from controlplane.api.request import MAX_BODY, MAX_JSON_DEPTH
from controlplane.bus.hub_bus import HubBus
from controlplane.natsd import NatsServer
from controlplane.serverless.service import FunctionService, InvocationOutcome
from controlplane.serverless.spec import FunctionSpec

BASE = {"name": "ok", "command": ["true"]}

BAD_BODIES = [
    ({**BASE, "name": None}, "name"),
    ({"command": ["true"]}, "name"),
    ({**BASE, "name": "Not_Valid!"}, "name"),
    ({"name": "x"}, "command"),
    ({**BASE, "command": "ls -l"}, "command"),
    ({**BASE, "command": []}, "command"),
    ({**BASE, "command": ["ls", 3]}, "command"),
    ({**BASE, "env": {"A": 1}}, "env"),
    ({**BASE, "resources": []}, "resources"),
    ({**BASE, "resources": {"cpu": -1}}, "resources.cpu"),
    ({**BASE, "resources": {"cpu": "lots"}}, "resources.cpu"),
    ({**BASE, "resources": {"memory": "64Mb"}}, "resources.memory"),
    ({**BASE, "resources": {"memory": 0}}, "resources.memory"),
    ({**BASE, "resources": {"gpu": -1}}, "resources.gpu"),
    ({**BASE, "resources": {"gpu": True}}, "resources.gpu"),
    ({**BASE, "resources": {"mig": "9g.90gb"}}, "resources.mig"),
    ({**BASE, "resources": {"gpu": 1, "mig": "1g.5gb"}}, "resources.mig"),
    ({**BASE, "resources": {"disk": "1Gi"}}, "resources.disk"),
    ({**BASE, "replicas": 0}, "replicas"),
    ({**BASE, "replicas": 1.5}, "replicas"),
    ({**BASE, "priority": "high"}, "priority"),
    ({**BASE, "affinity": {"clusters": "default"}}, "affinity.clusters"),
    ({**BASE, "affinity": {"clusters": ["nowhere"]}}, "affinity.clusters"),
    ({**BASE, "affinity": {"zone": "a"}}, "affinity.zone"),
    ({**BASE, "anti_affinity": {"node_labels": {}}}, "anti_affinity.node_labels"),
    ({**BASE, "gang": "yes"}, "gang"),
    ({**BASE, "kind": "daemon"}, "kind"),
    ({**BASE, "timeout_s": -5}, "timeout_s"),
    ({**BASE, "sla_latency_s": "fast"}, "sla_latency_s"),
    ({**BASE, "restart_policy": "sometimes"}, "restart_policy"),
    ({**BASE, "restart_policy": 1}, "restart_policy"),
    ({**BASE, "max_restarts": -1}, "max_restarts"),
    ({**BASE, "max_restarts": "3"}, "max_restarts"),
    ({**BASE, "surprise": 1}, "surprise"),
    ([BASE], "<body>"),
    ("just a string", "<body>"),
]


async def test_every_bad_workload_body_gets_a_4xx_naming_its_field(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        for body, field in BAD_BODIES:
            status, reply = await api.call("POST", "/v1/workloads", body)
            assert status == 422, (body, status, reply)
            assert reply["error"]["field"] == field, (body, reply)
            assert reply["error"]["code"] == "invalid"
        assert (await api.get("/v1/workloads"))["total"] == 0, "nothing bad was stored"


@pytest.mark.parametrize(
    ("raw", "field"),
    [(b"{not json", "<body>"), (b"", "<body>"), (b"\xff\xfe", "<body>")],
)
async def test_unparseable_bodies_get_a_400_or_422_json_error(nats_server, sqlite_url, raw, field):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        headers = {"Content-Type": "application/json"}  # else the auth middleware's 415 comes first
        async with api.session.post(api.base + "/v1/workloads", data=raw, headers=headers) as response:
            body = await response.json()
            assert response.status in (400, 422)
            assert body["error"]["field"] == field


async def test_a_bad_idempotency_key_is_refused(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        status, body = await api.call("POST", "/v1/workloads", BASE, headers={"Idempotency-Key": "k" * 200})
        assert status == 422 and body["error"]["field"] == "Idempotency-Key"


async def test_a_wrong_method_gets_a_json_405(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        status, body = await api.call("PUT", "/v1/workloads")
        assert status == 405 and body["error"]["code"] == "method_not_allowed"


def test_the_openapi_document_lists_exactly_the_apps_routes():
    app = create_app(hub=SimpleNamespace(store=None))  # type: ignore[arg-type]
    served = {
        (route.resource.canonical, route.method.lower())
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }
    documented = {
        (path, method) for path, operations in openapi_document()["paths"].items() for method in operations
    }
    assert served == documented


async def test_the_openapi_document_is_served(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        doc = await api.get("/openapi.json")
        assert doc["openapi"].startswith("3.")
        assert "/v1/workloads/{id}" in doc["paths"]
        health = await api.get("/healthz")
        assert health["status"] == "ok" and health["database"] and health["nats"]


# --- found by fuzzing the API against its own document (issue 10) ---------------------------

ECHO = {"name": "echo", "source": "def handle(event, context):\n    return event\n", "handler": "handle"}


async def _post_utf8(api, path: str, body: object) -> tuple[int, dict]:
    """POST JSON as UTF-8 (aiohttp's json= escapes non-ASCII, six bytes a character)."""
    return await _post_raw(api, path, json.dumps(body, ensure_ascii=False).encode())


async def _post_raw(api, path: str, raw: bytes) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    async with api.session.post(api.base + path, data=raw, headers=headers) as response:
        return response.status, await response.json()


async def _raw_http(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request written by hand (a Content-Length no client library would send)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), headers, body
    finally:
        writer.close()


async def test_a_function_registered_again_after_delete_gets_a_new_version_and_the_list_keeps_working(
    nats_server, sqlite_url
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        assert (await api.call("POST", "/v1/functions", ECHO))[0] == 201
        assert (await api.call("DELETE", "/v1/functions/echo"))[0] == 200
        assert (await api.get("/v1/functions"))["items"] == []
        status, again = await api.call("POST", "/v1/functions", ECHO)
        assert status == 201, again
        assert again["version"] == 2 and again["versions"] == [2], "a deleted version's number is not reused"
        assert [f["name"] for f in (await api.get("/v1/functions"))["items"]] == ["echo"]
        assert (await api.get("/v1/functions/echo"))["version"] == 2
        # A deleted version comes back with its own content, never with other content.
        await api.call("DELETE", "/v1/functions/echo")
        status, conflict = await api.call("POST", "/v1/functions", {**ECHO, "handler": "x", "version": 1})
        assert status == 422  # (x is not defined in source)
        other = {**ECHO, "source": ECHO["source"] + "# changed\n", "version": 1}
        status, conflict = await api.call("POST", "/v1/functions", other)
        assert status == 409 and conflict["error"]["field"] == "version"
        status, revived = await api.call("POST", "/v1/functions", {**ECHO, "version": 1})
        assert status == 201 and revived["versions"] == [1]
        assert (await api.get("/v1/functions"))["total"] == 1


async def test_deeply_nested_json_is_refused_naming_the_field_never_a_500(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        deep = b"[" * 5000 + b"]" * 5000
        status, body = await _post_raw(api, "/v1/workloads", b'{"name": "ok", "command": ' + deep + b"}")
        assert status in (400, 422) and body["error"]["field"], body
        nested: object = "x"
        for _ in range(MAX_JSON_DEPTH + 5):
            nested = {"k": nested}
        status, body = await api.call("POST", "/v1/workloads", {**BASE, "env": nested})
        assert status == 422 and body["error"]["field"].startswith("env.k.k"), body
        assert "nested deeper" in body["error"]["message"]
        status, body = await _post_raw(api, "/v1/functions/echo/invoke", deep)
        assert status == 404, "an unknown function is named before its event is parsed"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000])
async def test_non_finite_or_oversized_numbers_are_refused_naming_the_field(nats_server, sqlite_url, literal):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        raw = b'{"name": "ok", "command": ["true"], "resources": {"memory": %s}}' % literal.encode()
        status, body = await _post_raw(api, "/v1/workloads", raw)
        assert status == 422 and body["error"]["field"] == "resources.memory", body
        raw = b'{"name": "echo", "source": "def h(e, c):\\n    return e\\n", "handler": "h", "cpu": %s}'
        status, body = await _post_raw(api, "/v1/functions", raw % literal.encode())
        assert status == 422 and body["error"]["field"] == "cpu", body
        # The same for an event: it is strict JSON too.
        await api.call("POST", "/v1/functions", ECHO)
        status, body = await _post_raw(api, "/v1/functions/echo/invoke", b'{"x": [1, %s]}' % literal.encode())
        assert status == 422 and body["error"]["field"] == "x[1]", body


async def test_memory_quantities_beyond_a_float_are_a_422(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        for memory in ("9" * 400, "76ki"):
            status, body = await api.call("POST", "/v1/workloads", {**BASE, "resources": {"memory": memory}})
            assert status == 422 and body["error"]["field"] == "resources.memory", (memory, body)


async def test_bodies_over_the_limit_get_a_413_json_error_with_or_without_content_length(
    nats_server, sqlite_url
):
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        token = api.session.headers["Authorization"]
        status, headers, raw = await _raw_http(
            running.url,
            b"POST /v1/workloads HTTP/1.1\r\nHost: hub\r\nAuthorization: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (token.encode(), 50 * 2**20),
        )
        body = json.loads(raw)
        assert status == 413 and headers["content-type"].startswith("application/json")
        assert body["error"]["code"] == "too_large" and body["error"]["field"] == "<body>"

        async def chunks():  # no Content-Length: aiohttp's client_max_size trips while reading
            yield b'{"name": "ok", "command": ["' + b"a" * MAX_BODY
            yield b'"]}'

        for path in ("/v1/workloads", "/v1/functions"):
            async with api.session.post(
                api.base + path, data=chunks(), headers={"Content-Type": "application/json"}
            ) as response:
                body = await response.json()
                assert response.status == 413, body
                assert body["error"] == {
                    "code": "too_large",
                    "message": body["error"]["message"],
                    "field": "<body>",
                }


def _big_text(chars: int) -> str:
    # Non-ASCII: 2 bytes in the body and in a NATS message (the codec writes UTF-8).
    return "é" * chars


async def test_a_spec_or_event_that_cannot_fit_in_one_nats_message_is_refused_naming_the_field(
    nats_server, sqlite_url, monkeypatch
):
    # A server whose max_payload is below the API's 1 MiB body limit (an operator's choice; the
    # default is 1 MiB too): a body the API takes may not fit one NATS message.
    monkeypatch.setattr(HubBus, "max_payload", property(lambda self: 256 << 10))
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        assert running.hub.bus.max_payload == 256 << 10
        status, body = await _post_utf8(api, "/v1/workloads", {**BASE, "env": {"BIG": _big_text(400_000)}})
        assert status == 413 and body["error"]["field"] == "env.BIG", body
        status, body = await _post_utf8(
            api, "/v1/workloads", {**BASE, "command": ["echo", _big_text(400_000)]}
        )
        assert status == 413 and body["error"]["field"] == "command[1]", body
        many = {f"K{i}": _big_text(40) for i in range(5000)}
        status, body = await _post_utf8(api, "/v1/workloads", {**BASE, "env": many})
        assert status == 413 and body["error"]["field"] == "env", body
        assert (await api.get("/v1/workloads"))["total"] == 0

        source = "# " + _big_text(200_000) + "\ndef handle(event, context):\n    return event\n"
        status, body = await _post_utf8(api, "/v1/functions", {**ECHO, "source": source})
        assert status == 413 and body["error"]["field"] == "source", body

        assert (await api.call("POST", "/v1/functions", ECHO))[0] == 201
        for query in ("", "?async=1"):
            status, body = await _post_utf8(
                api, "/v1/functions/echo/invoke" + query, {"x": _big_text(400_000)}
            )
            assert status == 413 and body["error"] == {
                "code": "too_large",
                "message": body["error"]["message"],
                "field": "<body>",
            }, body


async def test_a_run_command_that_still_fails_for_size_fails_the_workload_with_a_reason(
    sqlite_url, tmp_path, monkeypatch, caplog
):
    # As if the API's check had passed (an older hub stored the spec, or the server's limit fell):
    # a server of its own that takes at most 256 KiB a message, and a hub that checks against 64 MiB.
    config = tmp_path / "nats.conf"
    config.write_text("max_payload: 262144\n")
    server = NatsServer(config_file=config).start()
    monkeypatch.setattr(HubBus, "max_payload", property(lambda self: 64 << 20))
    try:
        await _a_command_too_large_for_the_server_fails_its_workload(server.url, sqlite_url, tmp_path, caplog)
    finally:
        server.stop()


async def _a_command_too_large_for_the_server_fails_its_workload(url, sqlite_url, tmp_path, caplog):
    async with (
        running_hub(url, sqlite_url) as (_, api),
        running_agents(url, tmp_path, ["n1"]),
    ):
        status, workload = await _post_utf8(
            api, "/v1/workloads", {**BASE, "env": {"BIG": _big_text(200_000)}}
        )
        assert status == 201, workload
        workload = await api.wait_status(workload["id"], "Failed")
        assert "exceeds the NATS max payload" in workload["message"], workload["message"]
        assert any(r.levelno == logging.WARNING and "not sent" in r.getMessage() for r in caplog.records), (
            "the refusal is logged at WARNING"
        )


async def test_a_handler_result_that_is_not_strict_json_is_a_structured_502(
    nats_server, sqlite_url, tmp_path
):
    source = "def handle(event, context):\n    return {'x': float(event)}\n"
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS),
    ):
        assert (
            await api.call("POST", "/v1/functions", {"name": "nan", "source": source, "handler": "handle"})
        )[0] == 201
        for event in ("nan", "inf", "-inf"):
            status, body = await api.call("POST", "/v1/functions/nan/invoke", event)
            assert status == 502, body
            assert body["error"]["code"] == "bad_result" and body["error"]["type"] == "ResultNotJSON"
        status, body = await api.call("POST", "/v1/functions/nan/invoke", "1.5")
        assert status == 200 and body == {"x": 1.5}
        status, queued = await api.call("POST", "/v1/functions/nan/invoke?async=1", "nan")
        assert status == 202
        invocation = await wait_for(
            lambda: api.get(f"/v1/invocations/{queued['invocation_id']}"),
            lambda i: i["status"] in ("Succeeded", "Failed"),
        )
        assert invocation["status"] == "Failed" and invocation["error"]["code"] == "bad_result"


async def test_a_result_too_large_for_the_bus_is_a_structured_502_not_a_timeout(
    nats_server, sqlite_url, tmp_path
):
    source = "def handle(event, context):\n    return 'x' * int(event)\n"
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS),
    ):
        body = {"name": "big", "source": source, "handler": "handle", "timeout_s": 20}
        assert (await api.call("POST", "/v1/functions", body))[0] == 201
        started = time.monotonic()
        status, reply = await api.call("POST", "/v1/functions/big/invoke", 2_000_000)
        assert status == 502 and reply["error"]["code"] == "result_too_large", reply
        assert time.monotonic() - started < 10, "answered at once, not at the function's timeout"
        status, reply = await api.call("POST", "/v1/functions/big/invoke", 1000)
        assert status == 200 and reply == "x" * 1000  # the instance still serves


async def test_a_command_function_whose_program_is_missing_is_an_init_error(
    nats_server, sqlite_url, tmp_path
):
    body = {"name": "ghost", "runtime": "command", "command": ["/nonexistent/edgeplane-handler"]}
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"]),
    ):
        assert (await api.call("POST", "/v1/functions", body))[0] == 201
        status, reply = await api.call("POST", "/v1/functions/ghost/invoke", {})
        assert status == 502 and reply["error"]["code"] == "init_error", reply
        assert "/nonexistent/edgeplane-handler" in reply["error"]["message"]


async def test_the_hub_refuses_a_non_strict_result_even_from_an_agent_that_sends_one():
    service = FunctionService(SimpleNamespace())  # type: ignore[arg-type]
    spec = FunctionSpec.parse(ECHO)
    spec.version = 1
    outcome = InvocationOutcome("i", "echo", 1, "n1", ok=False)
    reply = json.dumps({"v": 1, "invocation_id": "i", "ok": True, "result": [float("nan")]}).encode()
    service._apply_result(outcome, reply, time.perf_counter(), spec, "n1")
    assert not outcome.ok and outcome.error is not None and outcome.error["code"] == "bad_result"


async def test_nullable_fields_come_back_null_and_the_document_says_so(nats_server, sqlite_url):
    validator = pytest.importorskip("jsonschema_rs")
    doc = openapi_document()

    def check(schema_name: str, value: object) -> None:
        schema = {"$ref": f"#/components/schemas/{schema_name}", "components": doc["components"]}
        errors = [str(e) for e in validator.validator_for(schema).iter_errors(value)]
        assert not errors, errors

    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        workload_id = await api.post_workload(BASE)
        workload = await api.workload(workload_id)
        assert workload["spec"]["timeout_s"] is None and workload["spec"]["sla_latency_s"] is None
        check("Workload", workload)
        status, function = await api.call("POST", "/v1/functions", ECHO)
        assert status == 201
        assert function["spec"]["mig"] is None and function["spec"]["sla_latency_ms"] is None
        check("Function", function)


async def test_every_status_a_route_answers_is_documented(nats_server, sqlite_url):
    paths = openapi_document()["paths"]
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        await api.call("POST", "/v1/functions", ECHO)
        seen = [
            (
                "/v1/functions/{name}/invoke",
                "post",
                await api.call("POST", "/v1/functions/echo/invoke?version=0"),
            ),
            ("/v1/functions/{name}/invoke", "post", await api.call("POST", "/v1/functions/none/invoke")),
            ("/v1/functions/{name}", "delete", await api.call("DELETE", "/v1/functions/none")),
            ("/v1/workloads", "get", await api.call("GET", "/v1/workloads?offset=-1")),
            ("/v1/events", "get", await api.call("GET", "/v1/events?after=x")),
            ("/v1/invocations/{id}", "get", await api.call("GET", "/v1/invocations/none")),
        ]
        for path, method, (status, body) in seen:
            assert str(status) in paths[path][method]["responses"], (path, method, status, body)


def test_the_document_lists_the_auth_answers_and_each_operations_scope():
    doc = openapi_document()
    assert doc["components"]["securitySchemes"]["bearer"] == {
        **doc["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    assert doc["security"] == [{"bearer": []}]
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            if (method, path) in PUBLIC_OPERATIONS:
                assert operation["security"] == [] and "401" not in responses
                continue
            scope = required_scope(method.upper(), path)
            assert operation["x-required-scope"] == scope and f"`{scope}`" in operation["description"]
            assert {"401", "403", "429"} <= set(responses), (path, method)
            assert "Retry-After" in responses["429"]["headers"]
            if "requestBody" in operation:
                assert {"413", "415"} <= set(responses), (path, method)
    scopes = {
        (method, path): op["x-required-scope"]
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if (method, path) not in PUBLIC_OPERATIONS
    }
    # What the document calls public is what the middleware lets through without a token.
    assert PUBLIC_OPERATIONS == {(m.lower(), p) for m, p in PUBLIC_ROUTES if m != "HEAD"}
    assert scopes[("delete", "/v1/nodes/{name}")] == "nodes"
    assert scopes[("get", "/v1/functions")] == "read"
    assert scopes[("post", "/v1/workloads")] == scopes[("delete", "/v1/workloads/{id}")] == "workloads"
    assert (
        scopes[("post", "/v1/functions/{name}/invoke")]
        == scopes[("delete", "/v1/functions/{name}")]
        == "functions"
    )


async def test_a_405_says_which_methods_are_allowed(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        async with api.session.put(api.base + "/v1/workloads") as response:
            body = await response.json()
            assert response.status == 405 and body["error"]["code"] == "method_not_allowed"
            assert {"GET", "POST"} <= {m.strip() for m in response.headers["Allow"].split(",")}
        async with api.session.patch(api.base + "/v1/functions/echo") as response:
            assert response.status == 405 and "DELETE" in response.headers["Allow"]


async def test_an_idempotency_key_that_is_not_utf8_is_a_422(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        token = api.session.headers["Authorization"]
        body = json.dumps(BASE).encode()
        status, _, raw = await _raw_http(
            running.url,
            b"POST /v1/workloads HTTP/1.1\r\nHost: hub\r\nAuthorization: %s\r\nIdempotency-Key: \xff\xfe\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (token.encode(), len(body), body),
        )
        assert status == 422 and json.loads(raw)["error"]["field"] == "Idempotency-Key"
