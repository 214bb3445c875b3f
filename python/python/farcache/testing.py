"""A throwaway local cluster for tests, benchmarks and examples.

    with LocalCluster(servers=3) as cluster:
        client = cluster.client()

runs ``farcache up`` (the binary from $FARCACHE_BIN, else ``farcache`` found under
$CARGO_TARGET_DIR or ./target, release before debug, else on $PATH) on free ports in a
temporary data directory, waits until every server is alive, and stops it on exit
(SIGTERM, which stops the manager and servers; then whatever is left of its process
group is killed).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ._farcache import Client
from .errors import FarcacheError

__all__ = ["LocalCluster", "find_binary", "free_port_run"]


def find_binary(start: Path | None = None) -> Path:
    """The ``farcache`` binary: $FARCACHE_BIN, a cargo target dir, or $PATH."""
    env = os.environ.get("FARCACHE_BIN")
    if env:
        return Path(env)
    roots = []
    if os.environ.get("CARGO_TARGET_DIR"):
        roots.append(Path(os.environ["CARGO_TARGET_DIR"]))
    here = (start or Path.cwd()).resolve()
    roots += [p / "target" for p in (here, *here.parents)]
    for root in roots:
        for profile in ("release", "debug"):
            p = root / profile / "farcache"
            if p.is_file():
                return p
    found = shutil.which("farcache")
    if found:
        return Path(found)
    raise FileNotFoundError(
        "no farcache binary: run `cargo build --release -p farcache-cli` or set FARCACHE_BIN"
    )


def free_port_run(n: int) -> int:
    """A port ``p`` with ``p .. p+n`` all free on 127.0.0.1."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        if all(_free(p) for p in range(base, base + n + 1)):
            return base
    raise RuntimeError("no run of free ports found")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class LocalCluster:
    """A manager and ``servers`` servers started by ``farcache up``."""

    def __init__(
        self,
        servers: int = 3,
        memory: str = "256MiB",
        region_size: str = "1MiB",
        threads: int = 1,
        data_dir: str | Path | None = None,
        binary: str | Path | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self._tmp = None if data_dir else tempfile.TemporaryDirectory(prefix="farcache-")
        self.data_dir = Path(data_dir or self._tmp.name)  # type: ignore[union-attr]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.secret_file = self.data_dir / "cluster.secret"
        port = free_port_run(servers)
        self.manager = f"127.0.0.1:{port}"
        self.log_path = self.data_dir / "cluster.log"
        log = open(self.log_path, "wb")
        # Its own session: what is left of it can be killed as one process group.
        self.proc = subprocess.Popen(
            [
                str(binary or find_binary()),
                "up",
                "--servers", str(servers),
                "--port", str(port),
                "--memory", memory,
                "--region-size", region_size,
                "--threads", str(threads),
                "--data-dir", str(self.data_dir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        try:
            self._wait(servers, start_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait(self, servers: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"farcache up exited with {self.proc.returncode}: {self.log_tail()}"
                )
            # `farcache up` prints this once every server is alive.
            if "farcache is up" in self.log_tail(None) and self.secret_file.exists():
                try:
                    self.client().status()
                    return
                except FarcacheError as e:
                    last = e
            time.sleep(0.2)
        raise RuntimeError(f"cluster not up within {timeout} s ({last}): {self.log_tail()}")

    def log_tail(self, chars: int | None = 2000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
            return text if chars is None else text[-chars:]
        except OSError:
            return ""

    def client(self, **kwargs: Any) -> Client:
        """A client with the cluster's secret."""
        return Client(self.manager, secret_file=str(self.secret_file), **kwargs)

    def stop(self) -> None:
        if self.proc.poll() is None:
            # `farcache up` stops the manager and the servers on SIGTERM (in 10 s at most).
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of its process group (an `up` that hung or crashed).
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
