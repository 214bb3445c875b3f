"""The keyed store: get / put / delete / exists / mget / mput, TTLs, NX / XX."""

from __future__ import annotations

import time

import numpy as np
import pytest

import farcache
from conftest import unique


@pytest.fixture(scope="module")
def store(client: farcache.Client):
    name = unique("store")
    s = client.create_store(name, 8 << 20)
    yield s
    client.delete(name)


def test_get_put_delete(store: farcache.Store) -> None:
    assert store.get(b"missing") is None
    assert store.put(b"k1", b"v1") is True
    assert store.get(b"k1") == b"v1"
    assert store.get("k1") == b"v1"  # str keys are UTF-8
    assert store.exists(b"k1") and not store.exists(b"nope")
    store.put("k1", bytearray(b"v2"))
    assert store.get(b"k1") == b"v2"
    store.put(b"arr", np.arange(10, dtype=np.uint32))
    assert np.array_equal(np.frombuffer(store.get(b"arr"), dtype=np.uint32), np.arange(10))
    store.put(b"text", "unicode ✓")
    assert store.get(b"text") == "unicode ✓".encode()
    assert store.delete(b"k1") is True
    assert store.delete(b"k1") is False
    assert store.get(b"k1") is None


def test_nx_xx(store: farcache.Store) -> None:
    assert store.put(b"cond", b"a", xx=True) is False
    assert store.get(b"cond") is None
    assert store.put(b"cond", b"a", nx=True) is True
    assert store.put(b"cond", b"b", nx=True) is False
    assert store.get(b"cond") == b"a"
    assert store.put(b"cond", b"c", xx=True) is True
    assert store.get(b"cond") == b"c"
    with pytest.raises(farcache.InvalidArgument):
        store.put(b"cond", b"d", nx=True, xx=True)


def test_ttl(store: farcache.Store) -> None:
    store.put(b"short", b"lived", ttl=0.3)
    store.put(b"long", b"lived", ttl=60)
    assert store.get(b"short") == b"lived"
    deadline = time.monotonic() + 10
    while store.get(b"short") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert store.get(b"short") is None
    assert store.get(b"long") == b"lived"
    with pytest.raises(farcache.InvalidArgument):
        store.put(b"x", b"y", ttl=-1)


def test_mget_mput(store: farcache.Store) -> None:
    pairs = {f"m{i}".encode(): f"value-{i}".encode() * (i % 5 + 1) for i in range(200)}
    store.mput(pairs)
    keys = list(pairs) + [b"absent"]
    got = store.mget(keys)
    assert got[:-1] == list(pairs.values())
    assert got[-1] is None
    store.mput([(b"p1", b"one"), ("p2", memoryview(b"two"))], ttl=30)
    assert store.mget([b"p1", "p2"]) == [b"one", b"two"]


def test_invalid_key(store: farcache.Store) -> None:
    # The empty key is a key, as in Redis.
    store.put(b"", b"empty key")
    assert store.mget([b"ok", b""])[1] == b"empty key"
    with pytest.raises(farcache.InvalidKey) as ei:
        store.get(b"k" * 100_000)
    assert isinstance(ei.value, ValueError)
    with pytest.raises(farcache.InvalidKey):
        store.put(b"\xff\xfeFC reserved", b"v")


def test_large_value_erasure_coded(client: farcache.Client) -> None:
    name = unique("store-ec")
    # 3 servers, 2 data + 1 parity chunks asked for (the default 4 + 2 would also
    # be coded 2 + 1 here).
    s = client.create_store(name, 8 << 20, ec_data=2, ec_parity=1)
    try:
        big = np.random.default_rng(3).bytes(s.max_small_value + 1000)
        s.put(b"big", big)  # above the inline limit: chunks on every server
        assert s.get(b"big") == big
        assert s.delete(b"big") and s.get(b"big") is None
    finally:
        client.delete(name)


def test_large_values_with_the_default_coding_on_three_servers(
    client: farcache.Client,
) -> None:
    # The default asks for 4 + 2 chunks; on 3 servers values are coded 2 + 1.
    name = unique("store-big")
    s = client.create_store(name, 160 << 20)
    try:
        rng = np.random.default_rng(5)
        # The test cluster's regions (so shards) are 1 MiB and a chunk spreads over
        # at most 64 of them: 100 MiB values need larger regions, as in
        # crates/store/tests/large.rs (64 MiB regions, 1 and 3 servers).
        for n in [(1 << 20) + 1, 5 << 20, 20 << 20]:
            v = rng.bytes(n)
            s.put(b"v", v)
            assert s.get(b"v") == v
    finally:
        client.delete(name)


def test_open_store(client: farcache.Client, store: farcache.Store) -> None:
    store.put(b"shared", b"seen by another handle")
    other = client.open_store(store.name)
    assert other.get(b"shared") == b"seen by another handle"
    with pytest.raises(farcache.NotFound):
        client.open_store(unique("no-such-store"))
