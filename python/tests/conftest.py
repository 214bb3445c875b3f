"""A real local cluster for the tests: ``farcache up`` with 3 servers on free ports in
a temporary data directory (farcache.testing.LocalCluster), killed at the end.

The binary: $FARCACHE_BIN, else target/release/farcache, else target/debug/farcache
(under $CARGO_TARGET_DIR if set, then the repository's target/).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import farcache
from farcache.testing import LocalCluster, find_binary

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    try:
        binary = find_binary(REPO)
    except FileNotFoundError as e:
        pytest.exit(str(e), returncode=2)
    c = LocalCluster(servers=3, data_dir=tmp_path_factory.mktemp("farcache"), binary=binary)
    yield c
    c.stop()


@pytest.fixture(scope="session")
def client(cluster: LocalCluster) -> farcache.Client:
    return cluster.client()


@pytest.fixture
def cache(client: farcache.Client):
    """A fresh 4 MiB cache over 4 regions of 1 MiB (so on several servers)."""
    name = unique("t")
    c = client.create(name, 4 << 20)
    yield c
    client.delete(name)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
