"""Cache reads and writes, atomics, batches and errors against a real cluster."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

import farcache
from conftest import unique


def test_roundtrip_bytes_like(cache: farcache.Cache) -> None:
    cache.write(0, b"hello")
    assert cache.read(0, 5) == b"hello"
    cache.write(100, bytearray(b"bytearray"))
    assert cache.read(100, 9) == b"bytearray"
    cache.write(200, memoryview(b"xxmemoryviewxx")[2:12])
    assert cache.read(200, 10) == b"memoryview"
    arr = np.arange(1000, dtype=np.uint64)
    cache.write(4096, arr)
    back = np.frombuffer(cache.read(4096, arr.nbytes), dtype=np.uint64)
    assert np.array_equal(back, arr)


def test_read_into_numpy_and_bytearray(cache: farcache.Cache) -> None:
    src = np.random.default_rng(1).random(5000)  # 40000 bytes, crosses no region
    cache.write(8192, src)
    dst = np.zeros_like(src)
    assert cache.read_into(8192, dst) == src.nbytes
    assert np.array_equal(dst, src)
    ba = bytearray(16)
    cache.write(0, b"0123456789abcdef")
    cache.read_into(0, ba)
    assert ba == b"0123456789abcdef"
    mv = memoryview(ba)[4:8]
    cache.read_into(0, mv)
    assert ba == b"01230123" + b"89abcdef"


def test_read_into_rejects_readonly_and_strided(cache: farcache.Cache) -> None:
    with pytest.raises(farcache.InvalidArgument):
        cache.read_into(0, b"immutable")
    strided = np.zeros(16, dtype=np.uint8)[::2]
    with pytest.raises(farcache.InvalidArgument):
        cache.read_into(0, strided)
    with pytest.raises(farcache.InvalidArgument):
        cache.write(0, 12345)  # type: ignore[arg-type]


def test_cross_region_write(cache: farcache.Cache) -> None:
    # Regions are 1 MiB (see conftest): this write spans two servers' regions.
    data = bytes(random.Random(7).randbytes(300_000))
    addr = (1 << 20) - 100_000
    cache.write(addr, data)
    assert cache.read(addr, len(data)) == data


def test_out_of_bounds_then_still_works(cache: farcache.Cache) -> None:
    cap = cache.capacity
    with pytest.raises(farcache.OutOfBounds) as ei:
        cache.read(cap - 4, 8)
    assert isinstance(ei.value, IndexError)
    assert ei.value.capacity == cap
    assert "outside the cache" in str(ei.value)
    with pytest.raises(farcache.OutOfBounds):
        cache.write(cap, b"x")
    cache.write(cap - 8, b"lastbyte")
    assert cache.read(cap - 8, 8) == b"lastbyte"


def test_cas_and_fetch_add(cache: farcache.Cache) -> None:
    cache.write(64, (5).to_bytes(8, "little"))
    assert cache.cas(64, 4, 9) == 5  # no swap
    assert cache.read(64, 8) == (5).to_bytes(8, "little")
    assert cache.cas(64, 5, 9) == 5  # swap
    assert cache.fetch_add(64, 10) == 9
    assert cache.fetch_add(64, -1) == 19
    assert int.from_bytes(cache.read(64, 8), "little") == 18
    with pytest.raises(farcache.Misaligned):
        cache.fetch_add(65, 1)


def test_batch_results(cache: farcache.Cache) -> None:
    b = cache.batch()
    w = b.write(0, b"abcdefgh")
    r = b.read(0, 8)
    f = b.fetch_add(8, 3)
    c = b.cas(8, 3, 100)
    bad = b.read(cache.capacity, 8)
    assert len(b) == 5
    res = b.run()
    assert len(res) == 5
    assert res[w] is None
    assert res.data(r) == b"abcdefgh" and res[r] == b"abcdefgh"
    assert res.value(f) == 0
    assert res.value(c) == 3
    assert not res.ok(bad) and res.ok(r)
    assert res.failed == 1
    assert isinstance(res.error(bad), farcache.OutOfBounds)
    assert res.error(r) is None
    with pytest.raises(farcache.OutOfBounds):
        res[bad]
    with pytest.raises(farcache.OutOfBounds):
        res.raise_first()
    lst = res.to_list()
    assert lst[:4] == [None, b"abcdefgh", 0, 3]
    assert isinstance(lst[4], farcache.OutOfBounds)
    assert isinstance(res.error(-1), farcache.OutOfBounds)  # negative indices count from the end
    assert int.from_bytes(cache.read(8, 8), "little") == 100
    with pytest.raises(farcache.InvalidArgument):
        b.run()  # a batch runs once


def test_read_many_and_write_many(cache: farcache.Cache) -> None:
    n = 1000
    addrs = np.arange(n, dtype=np.uint64) * 8 * 97  # spread over the regions
    vals = np.arange(n, dtype=np.uint64) * 3 + 1
    cache.write_many(addrs, vals)
    got = cache.read_many(addrs, 8)
    assert got is not None and len(got) == n
    assert [int.from_bytes(g, "little") for g in got] == list(vals)
    out = np.zeros(n, dtype=np.uint64)
    assert cache.read_many(addrs, 8, out=out) is None
    assert np.array_equal(out, vals)
    assert cache.read_many([int(a) for a in addrs[:3]], 8) == got[:3]
    with pytest.raises(farcache.InvalidArgument):
        cache.read_many(addrs, 8, out=np.zeros(n - 1, dtype=np.uint64))
    with pytest.raises(farcache.OutOfBounds):
        cache.read_many([0, cache.capacity], 8)


def test_execute_builtin_and_unknown_proc(cache: farcache.Cache) -> None:
    with pytest.raises(farcache.FarcacheError):
        cache.execute("no_such_proc", 0, b"")
    with pytest.raises(farcache.FarcacheError):
        cache.register("bad", b"this is not wasm")
    cache.write(0, b"still fine")
    assert cache.read(0, 10) == b"still fine"


def test_random_ops_match_model(cache: farcache.Cache) -> None:
    """A random sequence of writes, reads, batches and atomics checked against a
    bytearray model of the first 2.5 MiB (3 regions)."""
    size = (5 << 20) // 2
    model = bytearray(size)
    cache.write(0, bytes(size))
    rng = random.Random(42)
    for step in range(400):
        op = rng.random()
        addr = rng.randrange(0, size - 1)
        n = min(rng.choice([1, 8, 100, 5000, 200_000]), size - addr)
        if op < 0.35:
            data = rng.randbytes(n)
            cache.write(addr, data)
            model[addr : addr + n] = data
        elif op < 0.6:
            assert cache.read(addr, n) == model[addr : addr + n], f"step {step}"
        elif op < 0.7:
            buf = np.empty(n, dtype=np.uint8)
            cache.read_into(addr, buf)
            assert buf.tobytes() == model[addr : addr + n]
        elif op < 0.85:
            a = (addr // 8) * 8
            old = int.from_bytes(model[a : a + 8], "little")
            d = rng.randrange(0, 1 << 64)
            assert cache.fetch_add(a, d) == old
            model[a : a + 8] = ((old + d) % (1 << 64)).to_bytes(8, "little")
        else:
            b = cache.batch()
            reads = []
            for _ in range(rng.randrange(1, 20)):
                x = rng.randrange(0, size - 64)
                if rng.random() < 0.5:
                    d = rng.randbytes(rng.randrange(1, 64))
                    b.write(x, d)
                    model[x : x + len(d)] = d
                else:
                    reads.append((b.read(x, 64), x))
            res = b.run()
            res.raise_first()
            for i, x in reads:
                assert res.data(i) == model[x : x + 64], f"step {step} batch read"
    assert cache.read(0, size) == model


def test_threads_run_concurrently(cluster, cache: farcache.Cache) -> None:
    """Two threads doing blocking reads both progress while the main thread holds
    no lock: the calls release the GIL."""
    cache.write(0, b"x" * 4096)
    stop = time.monotonic() + 1.0
    counts = [0, 0]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            while time.monotonic() < stop:
                cache.read(0, 4096)
                counts[i] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    # While they run, the main thread's pure-Python loop must progress too.
    spins = 0
    while time.monotonic() < stop:
        spins += 1
    for t in ts:
        t.join()
    assert not errors, errors
    assert counts[0] > 10 and counts[1] > 10, counts
    assert spins > 1000


def test_gil_released_during_slow_call(cluster) -> None:
    """A call blocked in the network (connecting to a port nobody answers on, until
    its timeout) lets another Python thread run meanwhile."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts but never answers
        addr = f"127.0.0.1:{s.getsockname()[1]}"
        ticks = 0
        done = threading.Event()

        def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                time.sleep(0.01)

        t = threading.Thread(target=ticker)
        t.start()
        t0 = time.monotonic()
        with pytest.raises(farcache.FarcacheError):
            farcache.Client(addr, secret=b"\0" * 32, connect_timeout=0.5, op_timeout=0.5)
        elapsed = time.monotonic() - t0
        done.set()
        t.join()
    assert elapsed >= 0.2
    assert ticks >= 10, (ticks, elapsed)


def test_cache_lifecycle(client: farcache.Client) -> None:
    name = unique("life")
    c = client.create(name, 2 << 20, region_size=1 << 20)
    assert c.name == name and c.capacity == 2 << 20 and c.region_size == 1 << 20
    assert c.tokens is not None and set(c.tokens) == {"read_write", "read_only"}
    with pytest.raises(farcache.AlreadyExists):
        client.create(name, 1 << 20)
    c.write(0, b"kept")
    info = client.reshape(name, 4 << 20)
    assert info["capacity"] == 4 << 20
    again = client.open(name)
    assert again.capacity == 4 << 20
    assert again.read(0, 4) == b"kept"
    again.write((4 << 20) - 4, b"tail")
    names = [x["name"] for x in client.status()["caches"]]
    assert name in names
    client.delete(name)
    with pytest.raises(farcache.NotFound):
        client.open(name)
    with pytest.raises(LookupError):
        client.delete(name)


def test_token_client(cluster, client: farcache.Client) -> None:
    name = unique("tok")
    c = client.create(name, 1 << 20)
    c.write(0, b"token-data")
    assert c.tokens is not None
    ro = farcache.Client(cluster.manager, token=c.tokens["read_only"]).open(name)
    assert ro.read(0, 10) == b"token-data"
    with pytest.raises(farcache.Forbidden):
        ro.write(0, b"nope")
    client.delete(name)


def test_bad_secret_raises_auth_error(cluster) -> None:
    with pytest.raises(farcache.AuthError) as ei:
        farcache.Client(cluster.manager, secret=b"\x01" * 32)
    assert isinstance(ei.value, PermissionError)
    with pytest.raises(farcache.AuthError):
        farcache.Client(cluster.manager, secret="not hex")


def test_unreachable_manager(cluster) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(farcache.Unavailable) as ei:
            farcache.Client(f"127.0.0.1:{port}", secret=b"\0" * 32)
    assert isinstance(ei.value, ConnectionError)


def test_no_credential(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    for v in ("FARCACHE_SECRET_FILE", "FARCACHE_TOKEN", "FARCACHE_SECRET"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(farcache.NoCredential) as ei:
        farcache.Client(cluster.manager)
    # The message names the environment and this front door's keyword arguments.
    for hint in ("FARCACHE_SECRET_FILE", "FARCACHE_TOKEN", "secret_file=", "token="):
        assert hint in str(ei.value)
    monkeypatch.setenv("FARCACHE_SECRET_FILE", str(cluster.secret_file))
    farcache.Client(cluster.manager).status()
