#!/usr/bin/env bash
# Builds and tests the Python package: a venv under target/py-venv (reused when
# present), maturin / pytest / numpy / redis from PyPI, the package built from
# python/ (release), then pytest against a local cluster started by the tests.
#
#   bash python/ci.sh            # from anywhere in the repository
#
# Needs the cluster binary (built here when missing): cargo build --release -p farcache-cli
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target="${CARGO_TARGET_DIR:-$repo/target}"
venv="$repo/target/py-venv"
python="${PYTHON:-python3}"

if [[ -z "${FARCACHE_BIN:-}" && ! -x "$target/release/farcache" ]]; then
    echo "python/ci.sh: building the cluster binary (farcache-cli, release)"
    cargo build --release --locked -p farcache-cli
fi
export FARCACHE_BIN="${FARCACHE_BIN:-$target/release/farcache}"

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
# The build backend runs the venv's `maturin` by name.
export PATH="$venv/bin:$PATH"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check maturin pytest numpy redis

# The wheel as a user gets it (`pip install ./python`), built in the venv without
# build isolation (maturin is already there) and with cargo's lock file.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
    --force-reinstall --no-deps --config-settings=build-args=--locked ./python

"$venv/bin/python" -m pytest python/tests -q

# redis-py's own tests (string, key, expiry, pipeline/transaction, lock) against the
# Redis-protocol front end; every failure must be a command docs/resp.md refuses.
bash "$repo/python/redis_py_suite/run.sh"
