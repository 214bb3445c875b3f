"""Argument encoders and reply decoders of the built-in stored procedures
(docs/sprocs.md), for ``Cache.execute``. All values are little-endian."""

from __future__ import annotations

import struct

#: Bytes per vertex entry of a CSR graph: first edge (u64), degree (u32), pad (u32).
VERTEX_ENTRY = 16

#: How a procedure that needs another server's bytes proceeds.
FLOW_SHIP = 0  # move the invocation and its state to the owner
FLOW_PULL = 1  # pull the bytes here, one request per phase


def khop_args(
    vbase: int, ebase: int, vertices: int, source: int, k: int, flow: int = FLOW_SHIP
) -> bytes:
    """Arguments of ``khop``: invoke at ``vbase + VERTEX_ENTRY * source``.

    The graph: vertex ``v``'s entry at ``vbase + 16 v`` (first edge index u64, degree
    u32, pad u32), edge lists at ``ebase`` as u32 vertex ids.
    """
    if not 0 <= source < vertices:
        raise ValueError(f"source {source} is not a vertex of {vertices}")
    if not 0 <= k <= 255:
        raise ValueError(f"k must be in [0, 255], got {k}")
    if flow not in (FLOW_SHIP, FLOW_PULL):
        raise ValueError(f"flow must be FLOW_SHIP or FLOW_PULL, got {flow}")
    # The search's initial state: no adjacency walks, visited = frontier = [source],
    # next = [], then the flow and the DFlow level marker.
    return (
        struct.pack("<QQIBBI", vbase, ebase, vertices, k, 0, 0)
        + struct.pack("<II", 1, source)
        + struct.pack("<II", 1, source)
        + struct.pack("<I", 0)
        + struct.pack("<BB", flow, 0)
    )


def khop_result(reply: bytes) -> int:
    """The number of distinct vertices within k hops (the source excluded)."""
    if len(reply) != 8:
        raise ValueError(f"khop reply of {len(reply)} bytes, expected 8")
    return struct.unpack("<Q", reply)[0]
