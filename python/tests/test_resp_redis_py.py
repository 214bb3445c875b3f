"""redis-py, unchanged, against `farcache resp` (the Redis-protocol front end) in front
of a keyed store on the test cluster: its own API calls, RESP2 and RESP3, pipelines,
AUTH with the cache's tokens, and what it wrote read back through farcache's own
store API."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import pytest

redis = pytest.importorskip("redis")

from farcache.testing import find_binary  # noqa: E402

from conftest import REPO, unique  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def frontend(cluster, client, tmp_path_factory):
    """`farcache resp` serving a new store; yields (port, store name, rw, ro tokens)."""
    name = unique("resp")
    # The default coding (4 + 2) on 3 servers: large values are coded 2 + 1.
    client.create_store(name, 64 << 20)
    port = _free_port()
    log = tmp_path_factory.mktemp("resp") / "resp.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(find_binary(REPO)),
                "resp",
                "--manager", cluster.manager,
                "--secret-file", str(cluster.secret_file),
                "--listen", f"127.0.0.1:{port}",
                "--store", name,
                "--threads", "2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"farcache resp did not start: {log.read_text()}")
            time.sleep(0.1)
    rw = client.issue_token(name, read_only=False)
    ro = client.issue_token(name, read_only=True)
    yield port, name, rw, ro
    proc.kill()
    proc.wait()


def _r(frontend, protocol=2, token=None):
    port, _, rw, _ = frontend
    return redis.Redis(
        host="127.0.0.1", port=port, password=token or rw, protocol=protocol, socket_timeout=20
    )


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_commands(frontend, protocol):
    r = _r(frontend, protocol)
    p = f"p{protocol}:"
    assert r.ping() is True
    assert r.set(p + "k", b"v1") is True
    assert r.get(p + "k") == b"v1"
    assert r.get(p + "missing") is None
    assert r.set(p + "k", b"v2", nx=True) is None
    assert r.set(p + "k", b"v2", xx=True, get=True) == b"v1"
    assert r.mset({p + "a": 1, p + "b": b"\x00\xff"}) is True
    assert r.mget([p + "a", p + "b", p + "missing"]) == [b"1", b"\x00\xff", None]
    assert r.incr(p + "a") == 2
    assert r.incrby(p + "a", 40) == 42
    assert r.decr(p + "a") == 41
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.incr(p + "k")
    assert r.setrange(p + "s", 2, "xy") == 4
    assert r.get(p + "s") == b"\x00\x00xy"
    assert r.getrange(p + "s", 2, -1) == b"xy"
    assert r.strlen(p + "s") == 4
    assert r.append(p + "s", "!") == 5
    assert r.exists(p + "a", p + "b", p + "missing") == 2
    assert r.expire(p + "a", 100) is True
    assert 99 <= r.ttl(p + "a") <= 100
    assert r.ttl(p + "k") == -1
    assert r.ttl(p + "missing") == -2
    assert r.set(p + "e", "x", px=200) is True
    time.sleep(0.35)
    assert r.get(p + "e") is None
    assert r.set(p + "e", "x", ex=50) is True
    assert 0 < r.pttl(p + "e") <= 50_000
    assert r.delete(p + "a", p + "b", p + "missing") == 2
    assert r.client_setname("redis-py-test") is True
    assert r.client_getname() in ("redis-py-test", b"redis-py-test")
    info = r.info()
    assert info["redis_version"] and "db0" in info
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("NOSUCHCOMMAND", "x")
    # The connection survives the error.
    assert r.get(p + "k") == b"v2"


def test_pipeline_and_large_values(frontend):
    r = _r(frontend)
    pipe = r.pipeline(transaction=False)
    for i in range(500):
        pipe.set(f"pipe:{i}", f"value-{i}")
    for i in range(500):
        pipe.get(f"pipe:{i}")
    out = pipe.execute()
    assert out[:500] == [True] * 500
    assert out[500:] == [f"value-{i}".encode() for i in range(500)]
    # (100 MiB values: crates/resp/tests/redis_tools.rs, on a store sized for them.)
    for n in [(1 << 20) + 1, 5 << 20]:
        big = (bytes(range(256)) * (n // 256 + 1))[:n]  # erasure coded in the store
        assert r.set("big", big) is True
        assert r.get("big") == big
        assert r.strlen("big") == len(big)


def test_default_pipeline_is_a_transaction(frontend):
    r = _r(frontend)
    r.delete("tx:n")
    # redis-py's default pipeline wraps the commands in MULTI ... EXEC.
    pipe = r.pipeline()
    pipe.incr("tx:n").incr("tx:n").get("tx:n")
    assert pipe.execute() == [1, 2, b"2"]
    assert r.get("tx:n") == b"2"

    # A check-and-set loop: r.transaction() retries while the watched key changes.
    def double(p):
        n = int(p.get("tx:n"))
        p.multi()
        p.set("tx:n", n * 2)

    assert r.transaction(double, "tx:n") == [True]
    assert r.get("tx:n") == b"4"
    # WATCH sees another connection's write: EXEC fails, nothing applied.
    other = _r(frontend)
    with r.pipeline() as p:
        p.watch("tx:n")
        other.set("tx:n", 100)
        p.multi()
        p.set("tx:n", 5)
        with pytest.raises(redis.WatchError):
            p.execute()
    assert r.get("tx:n") == b"100"
    # A command the front end refuses aborts the whole transaction.
    pipe = r.pipeline()
    pipe.set("tx:n", 7).execute_command("LPUSH", "tx:l", 1)
    with pytest.raises(redis.ResponseError):
        pipe.execute()
    assert r.get("tx:n") == b"100"


@pytest.mark.parametrize("own_class", [False, True], ids=["redis-py Lock (Lua)", "farcache Lock (WATCH/EXEC)"])
def test_locks_release_only_their_owner(frontend, own_class):
    """redis-py's own Lock (its EVALSHA scripts), and the farcache package's
    WATCH/MULTI/EXEC one written before the front end ran scripts."""
    r = _r(frontend)
    kw = {}
    if own_class:
        from farcache.redis_lock import Lock

        kw = {"lock_class": Lock}
    name = f"lk:{int(own_class)}"
    lock = r.lock(name, timeout=10, **kw)
    assert lock.acquire(blocking=False)
    assert not r.lock(name, **kw).acquire(blocking=False)
    assert lock.owned()
    assert lock.extend(5)
    assert 14_000 < r.pttl(name) <= 15_000
    assert lock.reacquire()
    assert 9_000 < r.pttl(name) <= 10_000
    lock.release()
    assert r.get(name) is None
    # Released, another client takes it at once; the old owner cannot release it.
    with r.lock(name, timeout=10, blocking_timeout=2, **kw):
        stale = r.lock(name, **kw)
        stale.local.token = b"not-the-owner"
        with pytest.raises(redis.exceptions.LockNotOwnedError):
            stale.release()
        assert r.get(name) is not None
    assert r.get(name) is None


def test_registered_scripts_run_by_evalsha(frontend):
    r = _r(frontend)
    bump = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert bump(keys=["sc:n"], args=[5]) == 5
    assert bump(keys=["sc:n"], args=[2]) == 7


def test_commands_clients_rely_on(frontend):
    r = _r(frontend)
    secs, micros = r.time()
    assert abs(secs - time.time()) < 2 and 0 <= micros < 1_000_000
    r.set("ck:a", "1")
    assert r.expire("ck:a", 100, nx=True) is True
    assert r.expire("ck:a", 50, gt=True) is False
    assert r.expire("ck:a", 500, gt=True) is True
    assert abs(r.expiretime("ck:a") - (time.time() + 500)) < 3
    assert r.getex("ck:a", persist=True) == b"1"
    assert r.ttl("ck:a") == -1
    assert r.incrbyfloat("ck:f", 1.5) == 1.5
    assert r.msetnx({"ck:m1": 1, "ck:m2": 2}) is True
    assert r.msetnx({"ck:m2": 3, "ck:m3": 4}) is False
    assert r.set("", "empty") is True and r.get("") == b"empty"
    assert set(r.scan_iter(match="ck:m*", count=7)) == {b"ck:m1", b"ck:m2"}
    assert sorted(r.keys("ck:m*")) == [b"ck:m1", b"ck:m2"]
    assert r.dbsize() >= 5
    assert r.info()["arch_bits"] == 64


def test_tokens_and_read_only(frontend):
    port, _, _, ro = frontend
    anon = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    with pytest.raises(redis.AuthenticationError):
        anon.get("k")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port, password="not-a-token").ping()
    r = _r(frontend)
    assert r.set("shared", "from-rw") is True
    reader = _r(frontend, token=ro)
    assert reader.get("shared") == b"from-rw"
    with pytest.raises(redis.exceptions.NoPermissionError, match="read-only token"):
        reader.set("shared", "nope")
    assert r.get("shared") == b"from-rw"


def test_concurrent_incr_from_threads(frontend):
    def work():
        r = _r(frontend)
        for _ in range(100):
            r.incr("ctr")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(_r(frontend).get("ctr")) == 600


def test_writes_reach_the_store(frontend, client):
    _, name, _, _ = frontend
    r = _r(frontend)
    assert r.set("seen-natively", b"\x01\x02") is True
    store = client.open_store(name)
    assert store.get(b"seen-natively") == b"\x01\x02"
    store.put(b"written-natively", b"hello")
    assert r.get("written-natively") == b"hello"
