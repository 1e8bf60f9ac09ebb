"""Fixtures shared by the binding's tests."""

import os
import pathlib
import shutil

import pytest

import cairn

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture
def ws(tmp_path):
    """An empty workspace directory."""
    d = tmp_path / "ws"
    d.mkdir()
    return d


@pytest.fixture
def store(ws):
    """A store on ``ws`` with durability "never" (fast; durability is tested on its own)."""
    with cairn.Store.open(ws, create=True, durability="never") as s:
        yield s


def cairn_binary():
    """The `cairn` command line the test command just built: $CAIRN_BIN,
    else target/debug/cairn, else target/release/cairn, else one on PATH."""
    candidates = [
        os.environ.get("CAIRN_BIN"),
        str(REPO / "target" / "debug" / "cairn"),
        str(REPO / "target" / "release" / "cairn"),
        shutil.which("cairn"),
    ]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture
def cli():
    """The path of the `cairn` binary (the test fails if none was built)."""
    b = cairn_binary()
    if b is None:
        pytest.fail("no cairn binary: build it (cargo build) or set CAIRN_BIN")
    return b
