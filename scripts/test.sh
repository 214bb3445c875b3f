#!/usr/bin/env bash
# Builds everything and runs the whole test suite (unit, property, multi-process cluster,
# fault-injection and benchmark smoke tests). Installs redis/sockperf via apt if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
cargo test --workspace --locked "$@"
