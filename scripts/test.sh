#!/usr/bin/env bash
# Builds everything and runs the whole test suite (unit, property, multi-process cluster,
# fault-injection, hostile-load and benchmark smoke tests), then the decoders' fuzz run.
# The benchmark tests install redis, memcached and sockperf via apt if missing (as root).
# Then the Python package: built into a venv (target/py-venv) and tested with pytest,
# including redis-py against the Redis-protocol front end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
cargo test --workspace --locked "$@"
if [ "$#" -eq 0 ]; then
  # The decoders' fuzz run (10^6 inputs) is a dedicated test outside the default run.
  cargo test -p farcache-proto --locked --test fuzz_decoders -- --ignored --nocapture
  # Race windows reached with named failpoints: a build of the binary with them on.
  cargo test -p farcache-cli --locked --features failpoints --test failpoints
  cargo build --release --locked -p farcache-cli
  bash python/ci.sh
fi
