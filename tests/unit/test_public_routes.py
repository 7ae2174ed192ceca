"""The routes the API serves without a token are exactly the ones docs/security.md lists.

Issue 20, finding 8: the docs said every route but ``/healthz`` needs a token while ``/console``
and ``POST /v1/join`` were public too. Here every route of the real app is asked whether the auth
middleware lets it through without a token, and the answer is compared with the table of public
routes in docs/security.md, so that neither can change without the other.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from aiohttp.test_utils import make_mocked_request

from controlplane.api.app import create_app
from controlplane.api.auth import AuthSettings, _is_public

SECURITY_MD = Path(__file__).resolve().parents[2] / "docs" / "security.md"
ROUTE = re.compile(r"`(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^`\s]*)`")
PUBLIC_METRICS_FLAG = "--public-metrics"


def _documented() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(always public, public only with --public-metrics), from the "public route" table."""
    lines = SECURITY_MD.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("| public route |"))
    always: set[tuple[str, str]] = set()
    optional: set[tuple[str, str]] = set()
    for line in lines[start + 2 :]:
        if not line.strip().startswith("|"):
            break
        first = line.strip().split("|")[1]
        routes = set(ROUTE.findall(first))
        assert routes, f"a row of the public routes table names no route: {line!r}"
        (optional if PUBLIC_METRICS_FLAG in first else always).update(routes)
    return always, optional


def _public(auth: AuthSettings) -> set[tuple[str, str]]:
    """The (method, path) routes of the real app that the auth middleware lets through tokenless."""
    app = create_app(hub=SimpleNamespace(store=None), auth=auth)  # type: ignore[arg-type]
    public = set()
    for route in app.router.routes():
        # A path parameter gets a sample value: a route is public for every value or none.
        path = re.sub(r"\{[^}]+\}", "x", route.resource.canonical)  # type: ignore[union-attr]
        if _is_public(make_mocked_request(route.method, path, app=app)):
            public.add((route.method, route.resource.canonical))  # type: ignore[union-attr]
    return public


def test_the_routes_open_without_a_token_are_the_ones_the_security_docs_list():
    always, optional = _documented()
    assert ("POST", "/v1/join") in always and ("GET", "/console") in always  # the table was read
    assert _public(AuthSettings()) == always
    assert _public(AuthSettings(public_metrics=True)) == always | optional
