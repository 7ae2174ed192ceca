"""Every bad POST gets a 4xx with a JSON error naming the field; the OpenAPI document matches the routes."""

from __future__ import annotations

import pytest
from harness import running_hub

from controlplane.api.app import create_app
from controlplane.api.openapi import openapi_document

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
        async with api.session.post(api.base + "/v1/workloads", data=raw) as response:
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
    app = create_app(hub=None)  # type: ignore[arg-type]
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
