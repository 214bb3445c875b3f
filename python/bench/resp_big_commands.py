"""Big multi-key commands against a Redis-protocol server, and what another
connection sees meanwhile: EXISTS, DEL and MSET of N keys in one command each, timed,
while a second connection sends a GET every 2 ms.

    python python/bench/resp_big_commands.py [--port 6380] [--redis-port P] [--keys 100000]

Start the front end first (`farcache up`, then `farcache resp --no-auth --threads 1`:
one event loop, so the probe shares it with the big command). With --redis-port the
same runs go to a redis-server too (start one: `redis-server --port P --save ''`).
Needs redis-py.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import redis


def probe(port: int, stop: threading.Event, lat: list[float]) -> None:
    p = redis.Redis(port=port)
    while not stop.is_set():
        t = time.perf_counter()
        p.get("probe")
        lat.append(time.perf_counter() - t)
        time.sleep(0.002)


def run(port: int, n: int) -> list[tuple[str, float, float, float]]:
    r = redis.Redis(port=port)
    keys = [f"big:{i}" for i in range(n)]
    rows = []
    for cmd in ("EXISTS", "DEL", "MSET"):
        if cmd != "MSET":
            for i in range(0, n, 1000):
                r.mset({k: b"x" * 16 for k in keys[i : i + 1000]})
        stop, lat = threading.Event(), []
        th = threading.Thread(target=probe, args=(port, stop, lat))
        th.start()
        time.sleep(0.2)
        t = time.perf_counter()
        if cmd == "MSET":
            r.mset({k: b"y" * 16 for k in keys})
        else:
            got = r.execute_command(cmd, *keys)
            assert got == n, f"{cmd} answered {got}, want {n}"
        took = time.perf_counter() - t
        time.sleep(0.1)
        stop.set()
        th.join()
        rows.append((cmd, took * 1000, statistics.median(lat) * 1000, max(lat) * 1000))
    r.delete(*keys)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=6380)
    ap.add_argument("--redis-port", type=int)
    ap.add_argument("--keys", type=int, default=100_000)
    a = ap.parse_args()
    targets = [("farcache resp", a.port)]
    if a.redis_port:
        targets.append(("redis-server", a.redis_port))
    print(f"| server | command of {a.keys} keys | ms | probe GET p50 ms | probe GET max ms |")
    print("|---|---|---|---|---|")
    for name, port in targets:
        for cmd, took, p50, worst in run(port, a.keys):
            print(f"| {name} | {cmd} | {took:.0f} | {p50:.2f} | {worst:.1f} |")


if __name__ == "__main__":
    main()
