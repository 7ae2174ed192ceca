"""The configurations of a hub-side NATS cluster and of a site's leaf server: what each admits,
refused inputs, and nats-server's own check of the files (``nats-server -t``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from edgeplane_contract.credentials import new_user_seed, public_key_of

from controlplane.bus.nats_auth import (
    ClusterRoutes,
    NodeIdentity,
    SiteIdentity,
    render_leaf_config,
    render_server_config,
    site_permissions,
)
from controlplane.natsd import find_nats_server

HUB = public_key_of(new_user_seed())
SITE_SEED = new_user_seed()
SITE = SiteIdentity(cluster="site-a", prefix="edgeplane.v1", public_key=public_key_of(SITE_SEED))
NODE = NodeIdentity(
    node="a1", cluster="site-a", prefix="edgeplane.v1", public_key=public_key_of(new_user_seed())
)
ROUTES = ClusterRoutes(
    name="edgeplane",
    listen=("127.0.0.1", 16222),
    routes=(("127.0.0.1", 16223), ("127.0.0.1", 16224)),
    leafnodes=("127.0.0.1", 17422),
)


def test_a_site_carries_its_own_clusters_agent_subjects_only() -> None:
    perms = site_permissions(SITE)
    every = perms.publish + perms.subscribe
    assert all(
        s.startswith("edgeplane.v1.site-a.") or s.startswith(("_INBOX", "edgeplane.v1.hub.")) for s in every
    )
    assert "edgeplane.v1.site-a.node.*.register" in perms.publish
    assert "edgeplane.v1.site-a.node.*.cmd" in perms.subscribe and "_INBOX_site-a.>" in perms.subscribe
    assert ">" not in every and "edgeplane.v1.>" not in every


def test_the_hub_side_server_admits_the_site_and_routes_to_the_others(tmp_path: Path) -> None:
    text = render_server_config(
        hub_public_key=HUB, nodes=[], listen=("127.0.0.1", 14222), sites=[SITE], cluster=ROUTES
    )
    assert SITE.public_key in text and '"nats-route://127.0.0.1:16223"' in text
    assert "nats-route://127.0.0.1:16222" not in text  # not a route to itself
    assert 'listen: "127.0.0.1:17422"' in text
    _nats_server_accepts(tmp_path / "core.conf", text)


def test_the_leaf_server_admits_its_nodes_and_connects_out_with_the_sites_seed(tmp_path: Path) -> None:
    text = render_leaf_config(
        site=SITE,
        site_seed=SITE_SEED,
        nodes=[NODE],
        listen=("127.0.0.1", 15222),
        remotes=[("127.0.0.1", 17422)],
    )
    assert NODE.public_key in text and SITE_SEED in text and "nats-leaf://127.0.0.1:17422" in text
    _nats_server_accepts(tmp_path / "leaf.conf", text)
    empty = render_leaf_config(
        site=SITE, site_seed=SITE_SEED, nodes=[], listen=("127.0.0.1", 15222), remotes=[("127.0.0.1", 17422)]
    )
    assert '"user": "nobody"' in empty  # no node yet: still no anonymous clients
    _nats_server_accepts(tmp_path / "empty.conf", empty)
    # The same nodes render the same text (the sync loop reloads a server only when its file
    # changes: a fresh password per render reloaded an empty site every pass).
    again = render_leaf_config(
        site=SITE, site_seed=SITE_SEED, nodes=[], listen=("127.0.0.1", 15222), remotes=[("127.0.0.1", 17422)]
    )
    assert again == empty


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": [NodeIdentity("b1", "site-b", "edgeplane.v1", NODE.public_key)]}, "is not in site"),
        ({"site_seed": "not-a-seed"}, "not an nkey user seed"),
        ({"remotes": []}, "at least one hub-side server"),
        ({"listen": ("bad host!", 1)}, "bad address"),
    ],
)
def test_bad_leaf_inputs_are_refused(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "site": SITE,
        "site_seed": SITE_SEED,
        "nodes": [NODE],
        "listen": ("127.0.0.1", 15222),
        "remotes": [("127.0.0.1", 17422)],
    }
    with pytest.raises(ValueError, match=message):
        render_leaf_config(**{**args, **kwargs})  # type: ignore[arg-type]


def test_a_sites_key_used_twice_or_a_bad_route_is_refused() -> None:
    with pytest.raises(ValueError, match="used twice"):
        render_server_config(hub_public_key=HUB, nodes=[], sites=[SITE, SITE])
    with pytest.raises(ValueError, match="bad address"):
        render_server_config(
            hub_public_key=HUB,
            nodes=[],
            cluster=ClusterRoutes(name="edgeplane", listen=("127.0.0.1", 0), routes=()),
        )


def _nats_server_accepts(path: Path, text: str) -> None:
    path.write_text(text)
    done = subprocess.run(
        [find_nats_server(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr
