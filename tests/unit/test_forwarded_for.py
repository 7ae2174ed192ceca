"""The header a standby signs for the client it forwards: only the replicas' key makes one."""

from __future__ import annotations

from controlplane.coordination.forwarded import MAX_AGE_S, forwarded_client, forwarded_header
from controlplane.store.secrets import EnvCipher

KEY = EnvCipher(bytes(range(32))).derive("edgeplane/forwarded-for/v1")
NOW = 1_800_000_000.0


def test_a_signed_header_names_its_client() -> None:
    value = forwarded_header(KEY, "203.0.113.7", "POST", "/v1/join", now=NOW)
    assert forwarded_client(KEY, value, "POST", "/v1/join", now=NOW + 1) == "203.0.113.7"


def test_a_header_made_without_the_key_or_altered_is_ignored() -> None:
    other = EnvCipher(bytes(32)).derive("edgeplane/forwarded-for/v1")
    value = forwarded_header(other, "203.0.113.7", "POST", "/v1/join", now=NOW)
    assert forwarded_client(KEY, value, "POST", "/v1/join", now=NOW) is None
    good = forwarded_header(KEY, "203.0.113.7", "POST", "/v1/join", now=NOW)
    client, at, mac = good.split(";")
    assert forwarded_client(KEY, f"198.51.100.1;{at};{mac}", "POST", "/v1/join", now=NOW) is None
    assert forwarded_client(KEY, good, "POST", "/v1/workloads", now=NOW) is None  # another path
    assert forwarded_client(KEY, good, "GET", "/v1/join", now=NOW) is None  # another method
    for junk in ("", "x", "a;b", "a;b;c;d", f"{client};notatime;{mac}", f";{at};{mac}"):
        assert forwarded_client(KEY, junk, "POST", "/v1/join", now=NOW) is None, junk


def test_a_stale_header_or_a_hub_without_the_key_ignores_it() -> None:
    value = forwarded_header(KEY, "203.0.113.7", "POST", "/v1/join", now=NOW)
    assert forwarded_client(KEY, value, "POST", "/v1/join", now=NOW + MAX_AGE_S + 1) is None
    assert forwarded_client(None, value, "POST", "/v1/join", now=NOW) is None


def test_the_derived_key_depends_on_the_label_and_never_is_the_key() -> None:
    raw = bytes(range(32))
    cipher = EnvCipher(raw)
    assert cipher.derive("a") != cipher.derive("b") and len(cipher.derive("a")) == 32
    assert raw not in (cipher.derive("a"), cipher.derive("b"))
    assert raw.hex() not in repr(cipher) and str(raw) not in repr(cipher)
