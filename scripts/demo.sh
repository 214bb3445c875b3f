#!/usr/bin/env bash
# Builds farcache (release) and runs `farcache demo`: a local 3-server cluster doing real work.
set -euo pipefail
cd "$(dirname "$0")/.."
FARCACHE_SKIP_APT=1 source scripts/env.sh
cargo build --release --locked -q -p farcache-cli
exec ./target/release/farcache demo "$@"
