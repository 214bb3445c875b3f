"""The asyncio interface."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import farcache
from farcache.aio import AsyncClient
from conftest import unique


def test_gather_many_ops(cluster) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(
            cluster.manager, secret_file=str(cluster.secret_file), max_workers=8
        ) as client:
            name = unique("aio")
            cache = await client.create(name, 1 << 20)
            await asyncio.gather(
                *(cache.write(8 * i, i.to_bytes(8, "little")) for i in range(500))
            )
            got = await asyncio.gather(*(cache.read(8 * i, 8) for i in range(500)))
            assert [int.from_bytes(g, "little") for g in got] == list(range(500))
            olds = await asyncio.gather(*(cache.fetch_add(8000, 1) for _ in range(100)))
            assert sorted(olds) == list(range(100))
            buf = np.zeros(500, dtype=np.uint64)
            await cache.read_into(0, buf)
            assert np.array_equal(buf, np.arange(500, dtype=np.uint64))
            b = cache.batch()
            i = b.read(0, 16)
            res = await b.run()
            assert res.data(i) == (0).to_bytes(8, "little") + (1).to_bytes(8, "little")
            with pytest.raises(farcache.OutOfBounds):
                await cache.read(1 << 20, 1)
            st = await client.create_store(unique("aio-store"), 4 << 20)
            await asyncio.gather(*(st.put(f"k{i}", f"v{i}") for i in range(50)))
            vals = await st.mget(f"k{i}" for i in range(50))
            assert vals == [f"v{i}".encode() for i in range(50)]
            assert await st.put("k0", "x", nx=True) is False
            assert await st.delete("k0") is True
            assert await st.get("k0") is None
            await client.delete(name)
            await client.delete(st.store.name)
            status = await client.status()
            assert name not in [c["name"] for c in status["caches"]]

    asyncio.run(main())
