"""Batched 8-byte reads from Python: farcache vs redis-py against Redis, same run.

    python python/bench/bench_python.py [--manager HOST:PORT --secret-file FILE]
        [--batch 1000] [--seconds 3] [--out bench-results/bench-python.json]

Without --manager it starts a local cluster (``farcache up``, 3 servers); it always
starts its own ``redis-server`` on a free port (no persistence). Every row reads the
same number of 8-byte values per call from the same number of distinct keys /
addresses:

- farcache ``read_many`` (one batch; a list of ``bytes``, or into one numpy buffer),
- farcache ``Batch`` (one Python call per op: the general API),
- redis-py pipelined GETs (``transaction=False``) and redis-py ``MGET``.

The ratio column is each row's throughput over the best redis-py row's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

import farcache
from farcache.testing import LocalCluster, free_port_run


def start_redis(binary: str) -> tuple[subprocess.Popen[bytes], int, str]:
    port = free_port_run(0)
    d = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", d],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port, d
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def measure(fn: Callable[[], object], batch: int, seconds: float) -> dict[str, float]:
    for _ in range(20):  # warm up: connections, caches, allocator
        fn()
    lat = []
    start = time.perf_counter()
    end = start + seconds
    while True:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        lat.append(t1 - t0)
        if t1 >= end:
            break
    total = time.perf_counter() - start
    lat_us = sorted(x * 1e6 for x in lat)
    return {
        "calls": len(lat),
        "ops_per_s": len(lat) * batch / total,
        "us_per_batch_p50": statistics.median(lat_us),
        "us_per_batch_p99": lat_us[min(len(lat_us) - 1, int(len(lat_us) * 0.99))],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manager")
    ap.add_argument("--secret-file")
    ap.add_argument("--batch", type=int, default=1000, help="values per call")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys / 8-byte slots")
    ap.add_argument("--seconds", type=float, default=3.0, help="per row")
    ap.add_argument("--client-batch-size", type=int, default=256, help="farcache ops per frame (b)")
    ap.add_argument("--queue-depth", type=int, default=8, help="farcache frames in flight (q)")
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--out", default="bench-results/bench-python.json")
    args = ap.parse_args()

    import redis  # redis-py

    cluster = None
    if args.manager:
        manager, secret_file = args.manager, args.secret_file
    else:
        cluster = LocalCluster(servers=3, memory="512MiB", region_size="4MiB")
        manager, secret_file = cluster.manager, str(cluster.secret_file)
    rproc, rport, rdir = start_redis(args.redis_server)
    rng = np.random.default_rng(1)
    try:
        client = farcache.Client(
            manager,
            secret_file=secret_file,
            batch_size=args.client_batch_size,
            queue_depth=args.queue_depth,
        )
        name = f"bench-python-{os.getpid()}"
        cap = max(args.keys * 8, 12 << 20)
        cache = client.create(name, cap)
        values = np.arange(args.keys, dtype=np.uint64)
        cache.write(0, values)
        slots = rng.choice(args.keys, size=args.batch, replace=False).astype(np.uint64)
        addrs = slots * 8
        out = np.zeros(args.batch, dtype=np.uint64)

        r = redis.Redis(host="127.0.0.1", port=rport)
        pipe = r.pipeline(transaction=False)
        for i in range(args.keys):
            pipe.set(f"k{i}", int(i).to_bytes(8, "little"))
            if i % 10_000 == 9_999:
                pipe.execute()
        pipe.execute()
        keys = [f"k{int(s)}" for s in slots]

        # Same answers from both sides before timing anything.
        expect = [int(s).to_bytes(8, "little") for s in slots]
        assert cache.read_many(addrs, 8) == expect
        assert r.mget(keys) == expect

        def fc_list() -> object:
            return cache.read_many(addrs, 8)

        def fc_out() -> object:
            return cache.read_many(addrs, 8, out=out)

        addr_list = [int(a) for a in addrs]

        def fc_batch() -> object:
            b = cache.batch()
            for a in addr_list:
                b.read(a, 8)
            res = b.run()
            return [res.data(i) for i in range(len(addr_list))]

        def redis_pipeline() -> object:
            p = r.pipeline(transaction=False)
            for k in keys:
                p.get(k)
            return p.execute()

        def redis_mget() -> object:
            return r.mget(keys)

        rows = [
            ("farcache read_many -> list[bytes]", "farcache", fc_list),
            ("farcache read_many -> numpy out", "farcache", fc_out),
            ("farcache Batch (read per op)", "farcache", fc_batch),
            ("redis-py pipeline GET", "redis", redis_pipeline),
            ("redis-py MGET", "redis", redis_mget),
        ]
        results = []
        for label, system, fn in rows:
            m = measure(fn, args.batch, args.seconds)
            results.append({"row": label, "system": system, "batch": args.batch, **m})
        assert np.array_equal(out, slots)
        best_redis = max(x["ops_per_s"] for x in results if x["system"] == "redis")
        for x in results:
            x["ratio_vs_best_redis"] = x["ops_per_s"] / best_redis

        print(f"\nbatched 8-byte reads, batch {args.batch}, {args.seconds:g} s per row "
              f"(farcache b={args.client_batch_size} q={args.queue_depth})")
        print(f"{'row':<36} {'ops/s':>12} {'µs/batch p50':>13} {'p99':>9} {'vs redis':>9}")
        for x in results:
            print(f"{x['row']:<36} {x['ops_per_s']:>12,.0f} {x['us_per_batch_p50']:>13,.0f} "
                  f"{x['us_per_batch_p99']:>9,.0f} {x['ratio_vs_best_redis']:>8.1f}x")

        report = {
            "bench": "python-batched-8B-reads",
            "batch": args.batch,
            "keys": args.keys,
            "seconds_per_row": args.seconds,
            "farcache_client": {"batch_size": args.client_batch_size, "queue_depth": args.queue_depth},
            "cluster": "given" if args.manager else "local farcache up, 3 servers x 1 thread",
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                        "platform": platform.platform()},
            "redis_py": redis.__version__,
            "rows": results,
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")
        client.delete(name)
    finally:
        rproc.kill()
        rproc.wait()
        shutil.rmtree(rdir, ignore_errors=True)
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
