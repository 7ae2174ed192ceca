"""The client's pure parts: which API a document goes to, where the config is looked for and what
overrides it, and how quantities and tables print."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.client.config import ClientConfigError, Overrides, load_client_config
from controlplane.client.documents import DocumentError, classify, load_documents
from controlplane.client.render import memory, table


@pytest.mark.parametrize(
    ("document", "kind", "sent_kind"),
    [
        ({"kind": "Function", "name": "f", "command": ["x"]}, "function", None),
        ({"kind": "workload", "name": "w", "source": "?"}, "workload", None),
        ({"name": "f", "source": "def h(e, c): pass", "handler": "h"}, "function", None),
        ({"name": "f", "runtime": "command", "command": ["cat"]}, "function", None),
        ({"name": "w", "command": ["true"]}, "workload", None),
        ({"name": "w", "command": ["true"], "kind": "service"}, "workload", "service"),
    ],
)
def test_a_document_goes_to_the_api_its_kind_or_shape_names(document, kind, sent_kind):
    got, body = classify(document)
    assert got == kind and body.get("kind") == sent_kind


def test_documents_come_from_yaml_streams_and_json_lists_in_order(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\ncommand: [x]\n---\nname: f\nhandler: h\nsource: s\n")
    (tmp_path / "b.json").write_text('[{"name": "b", "command": ["y"]}]')
    docs = load_documents([str(tmp_path / "a.yaml"), str(tmp_path / "b.json")])
    assert [(d.kind, d.name, d.origin.rsplit("/", 1)[1]) for d in docs] == [
        ("workload", "a", "a.yaml#1"),
        ("function", "f", "a.yaml#2"),
        ("workload", "b", "b.json"),
    ]
    (tmp_path / "bad.yaml").write_text("- 1\n- [2]\n")
    with pytest.raises(DocumentError, match=r"bad\.yaml#1: a document must be a mapping"):
        load_documents([str(tmp_path / "bad.yaml")])
    with pytest.raises(DocumentError, match=r"missing\.yaml: cannot read"):
        load_documents([str(tmp_path / "missing.yaml")])


def _config(path: Path, url: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "t").write_text("tok-" + url[-1] + "\n")
    path.write_text(f"url: {url}/\ntoken_file: t\n")


def test_config_precedence_flag_then_env_then_cwd_then_home(tmp_path):
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    _config(home / ".config" / "edgeplane" / "client.yaml", "http://h:1")
    env: dict[str, str] = {}

    def load(**overrides: str):  # type: ignore[no-untyped-def]
        return load_client_config(Overrides(**overrides), environ=env, cwd=cwd, home=home)

    assert (load().url, load().token) == ("http://h:1", "tok-1")
    _config(cwd / ".edgeplane" / "client.yaml", "http://c:2")
    assert load().url == "http://c:2"
    _config(tmp_path / "env" / "client.yaml", "http://e:3")
    env["EDGEPLANE_CONFIG"] = str(tmp_path / "env" / "client.yaml")
    assert load().url == "http://e:3"
    _config(tmp_path / "flag" / "client.yaml", "http://f:4")
    flagged = load(config=str(tmp_path / "flag" / "client.yaml"))
    assert (flagged.url, flagged.token) == ("http://f:4", "tok-4")
    assert load(url="http://u:5").url == "http://u:5"  # the file's token, another URL
    assert "tok" not in repr(flagged)


def test_a_config_error_names_the_file_and_never_the_value(tmp_path):
    path = tmp_path / "client.yaml"
    path.write_text("url: http://x\ntoken: [s3cret]\n")
    with pytest.raises(ClientConfigError) as caught:
        load_client_config(Overrides(config=str(path)))
    assert str(path) in str(caught.value) and "s3cret" not in str(caught.value)
    path.write_text("url: http://x\ntokn: s3cret\n")
    with pytest.raises(ClientConfigError, match="unknown key 'tokn'"):
        load_client_config(Overrides(config=str(path)))


def test_quantities_and_tables_print_as_people_read_them():
    assert [memory(64 * 2**20), memory(1536 * 2**20), memory(512), memory(None)] == [
        "64Mi",
        "1.5Gi",
        "512",
        "-",
    ]
    assert table(("A", "LONGER"), [("x", None), ("yyyy", [1, 2])]) == "A      LONGER\nx      -\nyyyy   1,2"
