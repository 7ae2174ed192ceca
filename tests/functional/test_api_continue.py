"""``GET /v1/workloads?continue=``: Kubernetes-style paging with an opaque token (a keyset on the
newest-first order), so that pages neither repeat nor skip work while new workloads arrive."""

from __future__ import annotations

import base64

import pytest
from harness import running_hub

from controlplane.api.openapi import openapi_document


async def test_continue_tokens_page_through_without_repeats_while_new_work_arrives(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        for index in range(5):
            await api.post_workload({"name": f"w{index}", "command": ["true"], "resources": {"cpu": 512}})
        first = await api.get("/v1/workloads?limit=2")
        assert [w["name"] for w in first["items"]] == ["w4", "w3"]
        assert first["total"] == 5 and isinstance(first["continue"], str)
        # New work arrives between pages: an offset would now repeat w3; the token does not.
        await api.post_workload({"name": "late", "command": ["true"], "resources": {"cpu": 512}})
        second = await api.get(f"/v1/workloads?limit=2&continue={first['continue']}")
        assert [w["name"] for w in second["items"]] == ["w2", "w1"]
        assert second["total"] == 6  # every match, on all pages
        last = await api.get(f"/v1/workloads?limit=2&continue={second['continue']}")
        assert [w["name"] for w in last["items"]] == ["w0"] and last["continue"] is None
        # The token keeps the filters the caller passes with it.
        named = await api.get(f"/v1/workloads?name=w1&continue={first['continue']}")
        assert [w["name"] for w in named["items"]] == ["w1"] and named["continue"] is None
        exact = await api.get("/v1/workloads?limit=6")
        assert len(exact["items"]) == 6 and exact["continue"] is None  # no empty last page


async def test_a_bad_continue_token_is_a_400_naming_the_field(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        await api.post_workload({"name": "w", "command": ["true"], "resources": {"cpu": 512}})
        forged = base64.urlsafe_b64encode(b'[2,1.0,"x"]').decode()
        for token in ("garbage!", "bm90IGpzb24", forged, "WzEsIm5vdCBhIHRpbWUiLCJ4Il0"):
            status, body = await api.call("GET", f"/v1/workloads?continue={token}")
            assert status == 400, (token, body)
            assert body["error"]["field"] == "continue" and body["error"]["code"] == "invalid_continue"
        assert "400" in openapi_document()["paths"]["/v1/workloads"]["get"]["responses"]
        token = (await api.get("/v1/workloads?limit=1"))["continue"]
        assert token is None  # one workload: nothing more
        await api.post_workload({"name": "w2", "command": ["true"], "resources": {"cpu": 512}})
        token = (await api.get("/v1/workloads?limit=1"))["continue"]
        status, body = await api.call("GET", f"/v1/workloads?continue={token}&offset=1")
        assert status == 400 and body["error"]["field"] == "continue", body


async def test_the_document_describes_the_page_with_its_continue_key(nats_server, sqlite_url):
    validator = pytest.importorskip("jsonschema_rs")
    doc = openapi_document()
    schema = {"$ref": "#/components/schemas/WorkloadPage", "components": doc["components"]}
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        for name in ("a", "b"):
            await api.post_workload({"name": name, "command": ["true"], "resources": {"cpu": 512}})
        first = await api.get("/v1/workloads?limit=1")
        last = await api.get(f"/v1/workloads?limit=1&continue={first['continue']}")
    for page in (first, last):
        assert not [str(e) for e in validator.validator_for(schema).iter_errors(page)]
    assert first["continue"] and last["continue"] is None
    assert doc["components"]["schemas"]["WorkloadPage"]["properties"]["continue"]["type"] == [
        "string",
        "null",
    ]
