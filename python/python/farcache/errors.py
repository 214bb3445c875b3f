"""Exceptions raised by farcache.

Every Rust error of the client and the keyed store maps to the class with the same
meaning; the message is the Rust error's text. Classes also derive from the builtin
exception of the same meaning where one exists (``Timeout`` is a ``TimeoutError``,
``Unavailable`` a ``ConnectionError``, ``OutOfBounds`` an ``IndexError``, ...), so
generic handlers catch them too.
"""

from __future__ import annotations


class FarcacheError(Exception):
    """Base class of every farcache error."""


class Unavailable(FarcacheError, ConnectionError):
    """The manager or a server cannot be reached (refused, reset, no route), or a
    region's owner could not be found after table refreshes. Often transient."""


class Timeout(FarcacheError, TimeoutError):
    """A server did not answer within ``op_timeout`` (or a region stayed paused for
    migration that long)."""


class AuthError(FarcacheError, PermissionError):
    """The credential was refused or is malformed (wrong cluster secret, bad token)."""


class NoCredential(AuthError):
    """No secret or token was given and none was found in the environment
    (FARCACHE_SECRET_FILE, FARCACHE_TOKEN, FARCACHE_SECRET)."""


class Forbidden(AuthError):
    """The credential does not allow this request (a token of another cache, a write
    with a read-only token, a write to a read-only cache)."""


class NotFound(FarcacheError, LookupError):
    """No cache (or procedure, or server) of that name or id."""


class AlreadyExists(FarcacheError):
    """A cache of that name exists already."""


class InsufficientMemory(FarcacheError, MemoryError):
    """The cluster (or a server) has no room for the request."""


class InvalidArgument(FarcacheError, ValueError):
    """A malformed request: bad size, bad buffer, a batch run twice, ..."""


class Misaligned(InvalidArgument):
    """Atomic ops (cas, fetch_add) need an 8-byte aligned address. ``addr`` is set."""


class TooLarge(InvalidArgument):
    """An op or its reply exceeds the frame or op size limit."""


class InvalidKey(InvalidArgument):
    """A store key is empty or too long."""


class ValueTooLarge(InvalidArgument):
    """A store value exceeds the store's limit."""


class OutOfBounds(FarcacheError, IndexError):
    """The byte range lies outside the cache. ``addr``, ``len`` and ``capacity`` are
    set when the client caught it before sending."""


class DataLost(FarcacheError):
    """The only copy of these bytes died with a server; reads fail until the range is
    overwritten or ``Cache.clear_lost`` is called. ``addr`` and ``len`` are set."""


class ProcedureError(FarcacheError):
    """A stored procedure failed (bad arguments, out-of-range reads, hop limit)."""


class StoreFull(FarcacheError):
    """The store's shard has no free or evictable item of the value's size class."""


class Contended(FarcacheError):
    """A store key kept changing under the call (heavy contention); retry."""


class ProtocolError(FarcacheError):
    """A peer sent something this client cannot read (a bug or a version mismatch)."""


class ServerError(FarcacheError):
    """The server failed internally or does not support the op."""


__all__ = [
    "FarcacheError",
    "Unavailable",
    "Timeout",
    "AuthError",
    "NoCredential",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "InsufficientMemory",
    "InvalidArgument",
    "Misaligned",
    "TooLarge",
    "InvalidKey",
    "ValueTooLarge",
    "OutOfBounds",
    "DataLost",
    "ProcedureError",
    "StoreFull",
    "Contended",
    "ProtocolError",
    "ServerError",
]
