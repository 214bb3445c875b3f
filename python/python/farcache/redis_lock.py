"""redis-py's ``Lock`` for the farcache Redis-protocol front end.

The front end runs Lua scripts now (``EVAL`` / ``EVALSHA``), so redis-py's own
``Lock`` works unchanged; this subclass, written before it did, stays for code that
uses it. It takes its lock with ``SET NX PX`` and releases, extends and reacquires it
with ``WATCH`` / ``MULTI`` / ``EXEC`` check-and-set transactions instead of Lua
scripts: the front end runs a transaction on one
key atomically with every other write to that key through it, so a lock is released
only by its owner, and never after another client took it over.

    import redis
    from farcache.redis_lock import Lock

    r = redis.Redis(port=6380)
    with r.lock("jobs:nightly", timeout=30, lock_class=Lock):
        ...

Needs redis-py (``pip install redis``); nothing else of farcache's package is used.
"""

from __future__ import annotations

from typing import Any, Callable

import redis
import redis.lock
from redis.exceptions import LockNotOwnedError

__all__ = ["Lock"]


class Lock(redis.lock.Lock):
    """``redis.lock.Lock`` whose release, extend and reacquire need no Lua."""

    def register_scripts(self) -> None:
        # No scripts: the transactions below replace them.
        pass

    def _if_owned(
        self, token: Any, then: Callable[[Any, int], None], what: str
    ) -> None:
        """Runs ``then(pipe, pttl)`` in a transaction if ``token`` holds the lock
        (watched, so a change in between retries the check); else raises."""
        encode = self.redis.get_encoder().encode
        want = token if isinstance(token, bytes) else encode(token)
        owned = False

        def step(pipe: Any) -> None:
            nonlocal owned
            stored = pipe.get(self.name)
            if stored is not None and not isinstance(stored, bytes):
                stored = encode(stored)
            owned = stored is not None and stored == want
            if not owned:
                return
            ttl = pipe.pttl(self.name)
            pipe.multi()
            then(pipe, ttl)

        self.redis.transaction(step, self.name)
        if not owned:
            raise LockNotOwnedError(
                f"Cannot {what} a lock that's no longer owned", lock_name=self.name
            )

    def do_release(self, expected_token: Any) -> None:
        self._if_owned(expected_token, lambda p, _: p.delete(self.name), "release")

    def do_extend(self, additional_time: Any, replace_ttl: bool) -> bool:
        ms = int(additional_time * 1000)

        def extend(pipe: Any, ttl: int) -> None:
            # As redis-py's script: add to the time left, or replace it.
            pipe.pexpire(self.name, ms if replace_ttl else max(ttl, 0) + ms)

        self._if_owned(self.local.token, extend, "extend")
        return True

    def do_reacquire(self) -> bool:
        ms = int(self.timeout * 1000)
        self._if_owned(
            self.local.token, lambda p, _: p.pexpire(self.name, ms), "reacquire"
        )
        return True
