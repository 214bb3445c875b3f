# Sourced by the other scripts: makes sure a Rust toolchain and the Debian packages the
# tests and benchmarks use are present. Safe to run again; does nothing when all is there.
set -euo pipefail

need_pkgs=()
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || need_pkgs+=(redis-tools)
command -v sockperf >/dev/null 2>&1 || need_pkgs+=(sockperf)
command -v memcached >/dev/null 2>&1 || need_pkgs+=(memcached)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_pkgs+=(fonts-dejavu-core)
# The network lab (crates/testkit/src/lab): namespaces, veth and bridge (iproute2),
# one-way cuts and vanishing hosts in the switch (nftables).
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
command -v nft >/dev/null 2>&1 || need_pkgs+=(nftables)
# The manager's etcd catalogue: its client crate compiles etcd's protobufs (protoc);
# tests run a 3-member etcd on loopback (etcd, etcdctl).
command -v protoc >/dev/null 2>&1 || need_pkgs+=(protobuf-compiler)
command -v etcd >/dev/null 2>&1 || need_pkgs+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need_pkgs+=(etcd-client)
# The Python package's tests build it in a venv.
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_pkgs+=(python3-venv python3-pip)
if [ "${#need_pkgs[@]}" -gt 0 ] && [ "${FARCACHE_SKIP_APT:-}" != 1 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${need_pkgs[*]} (apt)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${need_pkgs[@]}" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${need_pkgs[@]}" >/dev/null; }
  else
    echo "note: ${need_pkgs[*]} missing; install them (sudo apt-get install -y ${need_pkgs[*]}) for building, tests and benchmarks" >&2
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "installing Rust (rustup, minimal profile)" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi

# The tests build the SDK's example procedures for WebAssembly
# (crates/sproc/tests/sdk_examples.rs fails, saying so, without this target).
if command -v rustup >/dev/null 2>&1 \
  && ! rustup target list --installed 2>/dev/null | grep -x wasm32-unknown-unknown >/dev/null; then
  echo "installing the wasm32-unknown-unknown target (rustup)" >&2
  rustup target add wasm32-unknown-unknown >&2 \
    || echo "note: rustup target add wasm32-unknown-unknown failed; the SDK example tests need it" >&2
fi

# CI builds once from a clean clone: incremental caches only cost disk there.
if [ "${CI:-}" = true ]; then
  export CARGO_INCREMENTAL=0
fi
