"""Fixtures for functional tests (the servers themselves are in tests/conftest.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory that confined user code can reach and write, for tests that look at what it
    wrote: pytest's ``tmp_path`` is not one (its root is 0700, and an agent running as root runs
    user code as another user). Mode 0777 under the system temp dir; removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="edgeplane-shared-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
