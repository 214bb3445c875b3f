"""The docs' example runs: python/examples/khop_graph.py against the test cluster
(it checks every khop count against a BFS in Python itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_khop_graph_example(cluster) -> None:
    r = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "khop_graph.py"),
            "--manager",
            cluster.manager,
            "--secret-file",
            str(cluster.secret_file),
            "--vertices",
            "20000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "khop(source=42, k=3, pull)" in r.stdout
    assert r.stdout.strip().endswith("ok")
