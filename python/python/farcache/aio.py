"""The asyncio interface: ``AsyncClient``, ``AsyncCache``, ``AsyncStore``.

Every method is a coroutine that runs the blocking call in a thread pool
(``loop.run_in_executor``). The blocking calls release the GIL while they wait on the
network, so many coroutines' ops are in flight at once, one per pool thread (the pool
has ``max_workers`` threads; size it for the concurrency you want). The event loop
never blocks on farcache I/O.

    >>> import asyncio, farcache.aio
    >>> async def main():
    ...     client = await farcache.aio.AsyncClient.connect("127.0.0.1:7400")
    ...     cache = await client.create("scratch", 1 << 20)
    ...     await asyncio.gather(*(cache.write(8 * i, b"x" * 8) for i in range(100)))
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping, TypeVar

from ._farcache import BatchResults, Cache, Client, Store

T = TypeVar("T")

__all__ = ["AsyncClient", "AsyncCache", "AsyncStore", "AsyncBatch"]


class _Runner:
    """Runs blocking calls in a thread pool shared by a client and its handles."""

    def __init__(self, max_workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="farcache-aio")

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))


class AsyncClient:
    """A ``farcache.Client`` whose calls are coroutines (run in a thread pool)."""

    def __init__(self, client: Client, max_workers: int = 16) -> None:
        self.client = client
        self._run = _Runner(max_workers)

    @classmethod
    async def connect(cls, manager: str, *, max_workers: int = 16, **kwargs: Any) -> "AsyncClient":
        """Connects like ``farcache.Client(manager, **kwargs)`` without blocking the loop."""
        runner = _Runner(max_workers)
        client = await runner.run(Client, manager, **kwargs)
        self = cls.__new__(cls)
        self.client = client
        self._run = runner
        return self

    async def create(
        self, name: str, capacity: int, region_size: int | None = None, replicas: int = 0
    ) -> "AsyncCache":
        c = await self._run.run(self.client.create, name, capacity, region_size, replicas)
        return AsyncCache(c, self._run)

    async def open(self, name: str) -> "AsyncCache":
        return AsyncCache(await self._run.run(self.client.open, name), self._run)

    async def delete(self, name: str) -> None:
        await self._run.run(self.client.delete, name)

    async def reshape(self, name: str, capacity: int) -> dict[str, Any]:
        return await self._run.run(self.client.reshape, name, capacity)

    async def status(self) -> dict[str, Any]:
        return await self._run.run(self.client.status)

    async def create_store(self, name: str, capacity: int, **kwargs: Any) -> "AsyncStore":
        s = await self._run.run(self.client.create_store, name, capacity, **kwargs)
        return AsyncStore(s, self._run)

    async def open_store(self, name: str) -> "AsyncStore":
        return AsyncStore(await self._run.run(self.client.open_store, name), self._run)

    def close(self) -> None:
        """Stops the thread pool (running calls finish)."""
        self._run.pool.shutdown(wait=False)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class AsyncCache:
    """A ``farcache.Cache`` whose I/O methods are coroutines."""

    def __init__(self, cache: Cache, runner: _Runner) -> None:
        self.cache = cache
        self._run = runner

    @property
    def name(self) -> str:
        return self.cache.name

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    async def read(self, addr: int, n: int) -> bytes:
        return await self._run.run(self.cache.read, addr, n)

    async def read_into(self, addr: int, buffer: Any) -> int:
        return await self._run.run(self.cache.read_into, addr, buffer)

    async def write(self, addr: int, data: Any) -> None:
        await self._run.run(self.cache.write, addr, data)

    async def cas(self, addr: int, expected: int, new: int) -> int:
        return await self._run.run(self.cache.cas, addr, expected, new)

    async def fetch_add(self, addr: int, delta: int) -> int:
        return await self._run.run(self.cache.fetch_add, addr, delta)

    async def execute(self, proc: str, addr: int, args: Any = None) -> bytes:
        return await self._run.run(self.cache.execute, proc, addr, args)

    async def register(self, name: str, code: Any) -> None:
        await self._run.run(self.cache.register, name, code)

    async def read_many(self, addrs: Any, length: int, out: Any = None) -> list[bytes] | None:
        return await self._run.run(self.cache.read_many, addrs, length, out)

    async def write_many(self, addrs: Any, data: Any, length: int | None = None) -> None:
        await self._run.run(self.cache.write_many, addrs, data, length)

    async def reshape(self, capacity: int) -> None:
        await self._run.run(self.cache.reshape, capacity)

    def batch(self) -> "AsyncBatch":
        """A batch: add ops without awaiting, then ``await batch.run()``."""
        return AsyncBatch(self.cache.batch(), self._run)


class AsyncBatch:
    """A ``farcache.Batch``: adding ops is immediate, ``run`` is a coroutine."""

    def __init__(self, batch: Any, runner: _Runner) -> None:
        self.batch = batch
        self._run = runner

    def read(self, addr: int, n: int) -> int:
        return self.batch.read(addr, n)

    def write(self, addr: int, data: Any) -> int:
        return self.batch.write(addr, data)

    def cas(self, addr: int, expected: int, new: int) -> int:
        return self.batch.cas(addr, expected, new)

    def fetch_add(self, addr: int, delta: int) -> int:
        return self.batch.fetch_add(addr, delta)

    def execute(self, proc: str, addr: int, args: Any = None) -> int:
        return self.batch.execute(proc, addr, args)

    def __len__(self) -> int:
        return len(self.batch)

    async def run(self) -> BatchResults:
        return await self._run.run(self.batch.run)


class AsyncStore:
    """A ``farcache.Store`` whose methods are coroutines."""

    def __init__(self, store: Store, runner: _Runner) -> None:
        self.store = store
        self._run = runner

    async def get(self, key: Any) -> bytes | None:
        return await self._run.run(self.store.get, key)

    async def exists(self, key: Any) -> bool:
        return await self._run.run(self.store.exists, key)

    async def put(
        self, key: Any, value: Any, ttl: float | None = None, nx: bool = False, xx: bool = False
    ) -> bool:
        return await self._run.run(self.store.put, key, value, ttl, nx, xx)

    async def delete(self, key: Any) -> bool:
        return await self._run.run(self.store.delete, key)

    async def mget(self, keys: Iterable[Any]) -> list[bytes | None]:
        return await self._run.run(self.store.mget, list(keys))

    async def mput(
        self, pairs: Mapping[Any, Any] | Iterable[tuple[Any, Any]], ttl: float | None = None
    ) -> None:
        if not isinstance(pairs, Mapping):
            pairs = list(pairs)
        await self._run.run(self.store.mput, pairs, ttl)
