"""farcache: a Python client of the farcache distributed remote-memory cache.

    >>> import farcache
    >>> client = farcache.Client("127.0.0.1:7400", secret_file="farcache-data/cluster.secret")
    >>> cache = client.create("scratch", 1 << 20)
    >>> cache.write(0, b"hello")
    >>> cache.read(0, 5)
    b'hello'

Network calls release the GIL. ``farcache.aio`` has the asyncio interface.
"""

from __future__ import annotations

from . import errors, procs
from ._farcache import Batch, BatchResults, Cache, Client, Store, __version__
from .errors import *  # noqa: F403

__all__ = [
    "Client",
    "Cache",
    "Batch",
    "BatchResults",
    "Store",
    "errors",
    "procs",
    "__version__",
    *errors.__all__,
]
