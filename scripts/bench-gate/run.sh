#!/usr/bin/env bash
# The benchmark gate CI runs after the tests: a few quick benches whose ratios
# against a peer measured in the same run must stay above the floors in
# floors.toml. A suite whose floor fails runs again, up to three times, before the
# gate fails: noise slows runs at random, a regression slows every run. About 1.5
# minutes when every floor holds at once, 4.5 at most.
#
#   bash scripts/bench-gate/run.sh            # needs target/release/farcache
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${FARCACHE_BIN:-target/release/farcache}
OUT=target/bench-gate
FLOORS=scripts/bench-gate/floors.toml
CHECK="python3 scripts/bench-gate/check.py $FLOORS $OUT"
[ -x "$BIN" ] || cargo build --release --locked -p farcache-cli
rm -rf "$OUT" && mkdir -p "$OUT"

# Each suite writes $OUT/<suite>.json.
run_suite() {
    case "$1" in
    io)
        "$BIN" bench io --quick --ops read,write --sizes 8 --dist uniform \
            --working-sets 1MiB -b 1024 --no-ceiling --out "$OUT/io-runs" >"$OUT/io.txt" 2>&1
        cp "$(ls -t "$OUT"/io-runs/io-*.json | head -1)" "$OUT/io.json"
        ;;
    store)
        "$BIN" bench store --quick --sizes 64 -b 1024 --json "$OUT/store.json" >"$OUT/store.txt" 2>&1
        ;;
    sproc)
        "$BIN" bench sproc --quick --no-baselines --out "$OUT/sproc-runs" >"$OUT/sproc.txt" 2>&1
        cp "$(ls -t "$OUT"/sproc-runs/sproc-*.json | head -1)" "$OUT/sproc.json"
        ;;
    esac
}

failed=()
for suite in io store sproc; do
    for attempt in 1 2 3; do
        echo "bench gate: $suite (attempt $attempt)"
        if ! run_suite "$suite"; then
            echo "bench gate: $suite did not run; its output:"
            tail -30 "$OUT/$suite.txt"
            exit 2
        fi
        rc=0
        $CHECK --suite "$suite" || rc=$?
        [ "$rc" = 2 ] && exit 2
        [ "$rc" = 0 ] && break
        [ "$attempt" = 3 ] && failed+=("$suite")
    done
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "bench gate: below a floor three times in a row: ${failed[*]} (tables in $OUT/*.txt)"
    exit 1
fi
echo "bench gate: every floor holds"
