#!/usr/bin/env python3
"""Per-op CPU cost breakdown of a `farcache bench io` run from `perf record -a`.

Usage: scripts/op-cost.py PERF_DATA SECONDS MOPS
  PERF_DATA  perf.data recorded system-wide (`perf record -a -F 4999 -g -- sleep SECONDS`)
             while one throughput row ran
  MOPS       the row's measured Mops/s

Prints nanoseconds of CPU per op on the client (comm `farcache`, the bench process)
and on the server (`fc-worker-*`), split into categories by symbol.
"""
import re
import subprocess
import sys

CATEGORIES = [
    # (name, predicate on (dso, symbol)); the first match wins.
    # data_with wraps the read of region memory (most of its time is that load).
    ("executor (region access)", lambda d, s: re.search(
        r"exec|Region|Lookup|lost_in|write_paused|prefetch|data_with|inproc", s)),
    ("codec: encode/decode", lambda d, s: re.search(
        r"RequestEncoder|RequestDecoder|ResponseEncoder|ResponseDecoder|decode|encode|validate", s)),
    ("copy (user memcpy/memset)", lambda d, s: re.search(r"memcpy|memmove|memset", s)),
    ("kernel copy", lambda d, s: d.startswith("[kernel") and re.search(r"copy_(from|to)_iter|copy_user", s)),
    ("scheduling / idle wait", lambda d, s: re.search(
        r"sched|schedule|yield|futex|switch|idle|halt|epoll_wait|do_epoll|ep_poll|poll", s)),
    ("kernel TCP + syscalls", lambda d, s: d.startswith("[kernel") or d == "[vdso]"),
    ("client bookkeeping (route, slots, results)", lambda d, s: re.search(
        r"lane|submit|route|part_done|complete_frame|results|Store|append|ticket|Ticket|Batch|ConnTable|slab", s)),
    ("load generator (bench)", lambda d, s: "farcache_bench" in s),
    ("allocation", lambda d, s: re.search(r"malloc|free|alloc|realloc", s)),
]


def main():
    data, secs, mops = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    out = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", "comm,dso,sym", "-n",
         "--stdio", "-g", "none"],
        capture_output=True, text=True, check=True).stdout
    total_samples = 0
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+(\S+)\s+\[[.k]\]\s+(.*)$", line)
        if not m:
            continue
        pct, n, comm, dso, sym = float(m[1]), int(m[2]), m[3], m[4], m[5].strip()
        total_samples += n
        rows.append((comm, dso, sym, n))
    # perf samples every CPU; total CPU time = cores * secs.
    cores = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip())
    ns_per_sample = cores * secs * 1e9 / max(total_samples, 1)
    ops = mops * 1e6 * secs
    side = {"client": {}, "server": {}, "other": {}}
    for comm, dso, sym, n in rows:
        who = "client" if comm == "farcache" else "server" if comm.startswith("fc-worker") else "other"
        cat = next((c for c, p in CATEGORIES if p(dso, sym)), "other")
        side[who][cat] = side[who].get(cat, 0) + n
    for who in ("client", "server"):
        total = sum(side[who].values())
        print(f"{who}: {total * ns_per_sample / ops:.1f} ns CPU per op")
        for cat, n in sorted(side[who].items(), key=lambda x: -x[1]):
            print(f"  {cat:45s} {n * ns_per_sample / ops:6.1f} ns  ({100 * n / max(total, 1):4.1f} %)")
    other = sum(side["other"].values())
    print(f"rest of the machine (idle, other processes): {other * ns_per_sample / ops:.1f} ns per op")


if __name__ == "__main__":
    main()
