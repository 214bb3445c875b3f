#!/usr/bin/env bash
# redis-py's own test suite (from its sdist, unchanged) against `farcache resp` on a
# local 3-server cluster: the string, key, expiry, pipeline/transaction and lock tests.
#
#   bash python/redis_py_suite/run.sh        # from anywhere in the repository
#
# Passes when every failing test is listed in expected-failures.txt with a command
# docs/resp.md lists as not supported (and that command really is named there).
# A listed test that passes is reported, not failed: the list only ever shrinks.
# Needs the cluster binary (built here when missing) and python3 with venv.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
target="${CARGO_TARGET_DIR:-$repo/target}"
version="$(sed -n 's/^redis-py-version *= *//p' "$here/suite.conf")"
venv="$target/redis-py-venv"
work="$target/redis-py-suite"
python="${PYTHON:-python3}"

if [[ -z "${FARCACHE_BIN:-}" && ! -x "$target/release/farcache" ]]; then
    echo "redis-py suite: building the cluster binary (farcache-cli, release)"
    cargo build --release --locked -p farcache-cli
fi
bin="${FARCACHE_BIN:-$target/release/farcache}"

# A venv of its own: pytest-asyncio (the suite's config asks for it) must not change
# how the package's own tests run.
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
"${pip[@]}" install "redis==$version" pytest pytest-asyncio pytest-timeout packaging
src="$work/redis-$version"
if [[ ! -d "$src/tests" ]]; then
    mkdir -p "$work"
    "${pip[@]}" download --no-deps --no-binary :all: "redis==$version" -d "$work"
    tar -xzf "$work/redis-$version.tar.gz" -C "$work"
fi

# A cluster of its own on free ports, gone when this script ends.
run="$(mktemp -d "${TMPDIR:-/tmp}/farcache-redis-py.XXXXXX")"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$run"
}
trap cleanup EXIT
free_port() {
    "$venv/bin/python" - "$@" <<'EOF'
import socket, sys
# A manager port with the servers' ports (the following ones) free too.
need = int(sys.argv[1]) if len(sys.argv) > 1 else 1
while True:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
    if base + need >= 65535:
        continue
    ok = True
    for p in range(base, base + need):
        with socket.socket() as t:
            try:
                t.bind(("127.0.0.1", p))
            except OSError:
                ok = False
                break
    if ok:
        print(base)
        break
EOF
}
manager_port="$(free_port 4)"
"$bin" up --servers 3 --memory 512MiB --region-size 16MiB --port "$manager_port" \
    --data-dir "$run/data" >"$run/up.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do
    grep -q "farcache is up" "$run/up.log" && break
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$run/up.log"; exit 1; }
    sleep 0.2
done
grep -q "farcache is up" "$run/up.log" || { echo "cluster did not start"; cat "$run/up.log"; exit 1; }

resp_port="$(free_port 1)"
"$bin" resp --manager "127.0.0.1:$manager_port" --secret-file "$run/data/cluster.secret" \
    --listen "127.0.0.1:$resp_port" --no-auth --store redis-py --capacity 128MiB \
    --addr-file "$run/resp.addr" >"$run/resp.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do
    [[ -s "$run/resp.addr" ]] && break
    kill -0 "${pids[1]}" 2>/dev/null || { cat "$run/resp.log"; exit 1; }
    sleep 0.2
done
[[ -s "$run/resp.addr" ]] || { echo "farcache resp did not start"; cat "$run/resp.log"; exit 1; }

# The selection: the suite's tests of string, key and expiry commands, and its
# pipeline, transaction and lock tests.
selection=()
while read -r line; do
    line="${line%%#*}"
    [[ -n "${line// }" ]] && selection+=("$line")
done <"$here/selection.txt"
filter="$(sed -n 's/^k-expression *= *//p' "$here/suite.conf")"

# Kept after the run (the cluster is not): what failed and why.
report="$work/junit.xml"
rm -f "$report"
set +e
(cd "$src" && "$venv/bin/python" -m pytest -p no:cacheprovider -q -o addopts= \
    -m "not onlycluster and not redismod and not ssl and not replica and not experimental" \
    --timeout 60 --redis-url "redis://127.0.0.1:$resp_port/0" --junitxml "$report" \
    -k "$filter" "${selection[@]}" 2>&1) | tee "$work/pytest.log" | tail -n 30
set -e
"$venv/bin/python" "$here/verdict.py" "$report" "$here/expected-failures.txt" "$repo/docs/resp.md"
