"""Load a graph with numpy and count its k-hop neighbourhoods next to the data.

    python python/examples/khop_graph.py --manager 127.0.0.1:7400 \
        --secret-file farcache-data/cluster.secret

Builds a random graph in CSR form with numpy, writes it into a cache (vertex entries,
then edge lists), and runs the built-in ``khop`` procedure: the breadth-first search
runs on the servers holding the graph and only the count comes back. Each result is
checked against the same search done here in Python.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import farcache
from farcache.procs import FLOW_PULL, FLOW_SHIP, VERTEX_ENTRY, khop_args, khop_result


def random_graph(vertices: int, avg_degree: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays: ``offsets[v]..offsets[v+1]`` index ``edges`` (u32 vertex ids)."""
    rng = np.random.default_rng(seed)
    degrees = rng.poisson(avg_degree, vertices).astype(np.uint64)
    offsets = np.zeros(vertices + 1, dtype=np.uint64)
    np.cumsum(degrees, out=offsets[1:])
    edges = rng.integers(0, vertices, int(offsets[-1]), dtype=np.uint32)
    return offsets, edges


def vertex_entries(offsets: np.ndarray) -> np.ndarray:
    """The khop vertex table: per vertex (first edge u64, degree u32, pad u32)."""
    entry = np.dtype([("first", "<u8"), ("degree", "<u4"), ("pad", "<u4")])
    assert entry.itemsize == VERTEX_ENTRY
    table = np.zeros(len(offsets) - 1, dtype=entry)
    table["first"] = offsets[:-1]
    table["degree"] = np.diff(offsets).astype(np.uint32)
    return table


def khop_local(offsets: np.ndarray, edges: np.ndarray, source: int, k: int) -> int:
    seen = {source}
    frontier = [source]
    for _ in range(k):
        nxt = []
        for v in frontier:
            for u in edges[offsets[v] : offsets[v + 1]].tolist():
                if u not in seen:
                    seen.add(u)
                    nxt.append(u)
        frontier = nxt
    return len(seen) - 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manager", default="127.0.0.1:7400")
    ap.add_argument("--secret-file", default=None, help="default: $FARCACHE_SECRET_FILE")
    ap.add_argument("--vertices", type=int, default=100_000)
    ap.add_argument("--degree", type=int, default=8)
    ap.add_argument("--region-size", type=int, default=1 << 20)
    args = ap.parse_args()

    client = farcache.Client(args.manager, secret_file=args.secret_file)

    # 1. The graph, with numpy.
    offsets, edges = random_graph(args.vertices, args.degree, seed=1)
    table = vertex_entries(offsets)
    print(f"graph: {args.vertices} vertices, {len(edges)} edges")

    # 2. One cache for both arrays: the vertex table at 0, the edges after it
    #    (4 KiB aligned). Small regions spread the graph over every server.
    vbase = 0
    ebase = (table.nbytes + 4095) // 4096 * 4096
    capacity = (ebase + edges.nbytes + (1 << 20) - 1) // (1 << 20) * (1 << 20)
    name = f"graph-{time.time_ns()}"
    cache = client.create(name, capacity, region_size=args.region_size)
    try:
        t0 = time.perf_counter()
        cache.write(vbase, table)  # numpy arrays go in through the buffer protocol
        cache.write(ebase, edges)
        print(f"loaded {(table.nbytes + edges.nbytes) / 1e6:.1f} MB in {time.perf_counter() - t0:.2f} s "
              f"over {len(cache.info()['servers'])} servers")

        # 3. khop next to the data: invoke at the source's vertex entry.
        for source, k in [(0, 1), (0, 2), (42, 3), (args.vertices - 1, 2)]:
            expected = khop_local(offsets, edges, source, k)
            for flow, flow_name in [(FLOW_SHIP, "ship"), (FLOW_PULL, "pull")]:
                t0 = time.perf_counter()
                reply = cache.execute(
                    "khop",
                    vbase + VERTEX_ENTRY * source,
                    khop_args(vbase, ebase, args.vertices, source, k, flow),
                )
                ms = (time.perf_counter() - t0) * 1e3
                count = khop_result(reply)
                assert count == expected, (source, k, flow_name, count, expected)
                print(f"khop(source={source}, k={k}, {flow_name}): {count} vertices in {ms:.1f} ms")
    finally:
        client.delete(name)
    print("ok")


if __name__ == "__main__":
    main()
