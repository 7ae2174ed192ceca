"""The extender's listener options, and the shipped kube-scheduler configuration."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from edgeplane_contract.resources import MIG_PROFILES

from controlplane.errors import ConfigError
from controlplane.extender.app import FILTER_VERB, PATH_PREFIX, PRIORITIZE_VERB, create_app
from controlplane.extender.settings import add_extender_arguments, extender_settings, is_loopback
from controlplane.extender.translate import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from controlplane.scheduling.scheduler import Scheduler

CONFIG = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes" / "kube-scheduler-config.yaml"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_extender_arguments(parser)
    return parser.parse_args(list(argv))


def test_off_unless_asked_and_loopback_by_default() -> None:
    assert extender_settings(_args()) is None
    settings = extender_settings(_args("--extender-listen", ":8888"))
    assert settings is not None and (settings.host, settings.port, settings.ssl_context) == (
        "127.0.0.1",
        8888,
        None,
    )
    for listen, host in (("localhost:1", "localhost"), ("[::1]:1", "::1"), ("127.0.0.2:1", "127.0.0.2")):
        settings = extender_settings(_args("--extender-listen", listen))
        assert settings is not None and settings.host == host


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--extender-listen", "0.0.0.0:8888"], "0.0.0.0 is not a loopback address"),
        (["--extender-listen", "hub.example:8888"], "is not a loopback address"),
        (
            ["--extender-listen", "10.0.0.5:1", "--extender-tls-cert", "c", "--extender-tls-key", "k"],
            "loopback",
        ),
        (["--extender-listen", "127.0.0.1:http"], "expected HOST:PORT"),
        (["--extender-listen", "127.0.0.1:70000"], "expected HOST:PORT"),
        (["--extender-listen", ":1", "--extender-tls-cert", "c"], "go together"),
        (["--extender-listen", ":1", "--extender-client-ca", "ca"], "needs --extender-tls-cert"),
        (["--extender-tls-cert", "c", "--extender-tls-key", "k"], "need --extender-listen"),
        (
            ["--extender-listen", ":1", "--extender-tls-cert", "/no/c", "--extender-tls-key", "/no/k"],
            "cannot load",
        ),
    ],
)
def test_a_wrong_listener_is_one_config_error(argv: list[str], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        extender_settings(_args(*argv))
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")


def test_the_shipped_kube_scheduler_config_names_the_verbs_this_server_serves() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    [extender] = config["extenders"]
    routes = {r.resource.canonical for r in create_app(Scheduler("edgeplane")).router.routes()}  # type: ignore[union-attr]
    path = urlparse(extender["urlPrefix"]).path
    assert path == PATH_PREFIX
    assert (extender["filterVerb"], extender["prioritizeVerb"]) == (FILTER_VERB, PRIORITIZE_VERB)
    assert {f"{path}/{extender['filterVerb']}", f"{path}/{extender['prioritizeVerb']}"} <= routes
    assert "bindVerb" not in extender and "preemptVerb" not in extender
    assert extender["nodeCacheCapable"] is True and extender["enableHTTPS"] is True
    assert set(extender["tlsConfig"]) == {"certFile", "keyFile", "caFile"}
    assert extender["httpTimeout"].endswith("s") and float(extender["httpTimeout"][:-1]) <= 5
    assert isinstance(extender["ignorable"], bool) and 1 <= extender["weight"]
    managed = {r["name"] for r in extender["managedResources"]}
    assert managed == {GPU_RESOURCE} | {MIG_RESOURCE_PREFIX + p for p in MIG_PROFILES}
    known = {
        "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
        "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable",
    }  # fmt: skip
    assert set(extender) <= known  # kube-scheduler rejects unknown keys (strict decoding)
