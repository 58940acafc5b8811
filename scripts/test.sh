#!/usr/bin/env bash
# The project's one test command: installs what the tests need, then runs every
# check CI runs. `.ci/run` calls exactly this script.
#
#   scripts/test.sh
#
# What it does, in order:
#   1. installs Debian's `zookeeper` package (and its Java runtime) when missing —
#      the tests start their own ZooKeeper servers on free 127.0.0.1 ports;
#      and Debian's `prometheus` (server and promtool; the metrics tests use both);
#      and Debian's `etcd-server` and `protobuf-compiler` (the etcd store's
#      tests start real etcd servers; its client compiles etcd's protobufs);
#      and Debian's `iptables` (the real-stack nemesis cuts a `serve` process
#      off its bookies);
#   2. installs Maven and a JDK when missing and fetches the BookKeeper jars,
#      Pulsar's format classes and Pulsar's metadata store with its runtime
#      classpath (scripts/fetch-java-deps.sh; cached outside the checkout) — the
#      tests start real bookies and a Java BookKeeper client, and Pulsar's own
#      EtcdMetadataStore judges the etcd layout (bk-harness's
#      pulsar_etcd_judge test); the Pulsar broker's classpath and the Python
#      Pulsar client (scripts/fetch-pulsar-python.sh), for pulsar-harness's
#      real brokers and clients;
#   3. makes sure rustfmt, clippy and cargo-machete are present (a check whose
#      tool cannot be installed is skipped, and the run ends with a loud list of
#      what was skipped);
#   4. cargo fmt --check, clippy (-D warnings), cargo machete (no unused
#      dependencies), the SPI purity check, `cargo publish --dry-run` of every
#      published crate, the whole test suite, the docs (warnings denied) and
#      the benches built in the dev profile (they must build and link).
#
# Build artefacts go to $CARGO_TARGET_DIR, by default a cache folder outside the
# checkout so that a fresh clone does not rebuild every dependency.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

step "system packages"
if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
fi
test -f /usr/share/java/zookeeper.jar || { echo "zookeeper.jar missing after install" >&2; exit 1; }
java -version 2>&1 | head -1
# Prometheus judges the metrics: a test scrapes a node with the real server and
# runs `promtool check metrics` on the exposition.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi
command -v promtool >/dev/null 2>&1 || { echo "promtool missing after install" >&2; exit 1; }
# etcd: the etcd metadata-store tests start Debian's etcd server on free
# 127.0.0.1 ports; the etcd client crate compiles etcd's protobuf definitions
# with protoc at build time.
if ! command -v etcd >/dev/null 2>&1 || ! command -v protoc >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server protobuf-compiler >/dev/null
fi
command -v etcd >/dev/null 2>&1 || { echo "etcd missing after install" >&2; exit 1; }
command -v protoc >/dev/null 2>&1 || { echo "protoc missing after install" >&2; exit 1; }
# iptables: the real-stack nemesis cuts a `serve` process off its bookies
# (zk-harness's NetCut: a cgroup per process, rules by connection mark).
if ! command -v iptables >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null
fi
command -v iptables >/dev/null 2>&1 || { echo "iptables missing after install" >&2; exit 1; }

step "BookKeeper jars"
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven default-jdk-headless >/dev/null
fi
command -v mvn >/dev/null 2>&1 || { echo "mvn missing after install" >&2; exit 1; }
command -v javac >/dev/null 2>&1 || { echo "javac missing after install" >&2; exit 1; }
scripts/fetch-java-deps.sh
# The Python Pulsar client of pulsar-harness (a virtual environment).
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
scripts/fetch-pulsar-python.sh

step "rust components"
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
cargo --version
MACHETE_VERSION=0.9.2
if ! cargo machete --version >/dev/null 2>&1; then
  cargo install --locked --quiet cargo-machete --version "$MACHETE_VERSION" || true
fi
skipped=()

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-${HOME:-.}/.cache}/bkswitch/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# No incremental caches: they double the cache folder's size for no gain on a
# run that builds every crate once, and real bookies turn read-only when the
# disk fills up.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The cache folder outlives each run: every changed test binary leaves its
# previous build behind (hundreds of MB each with debug info), which once
# filled the disk. Keep the newest build of each binary, and no incremental
# caches from builds made by hand.
prune_cache() {
  local profile dir
  for profile in debug release; do
    dir="$CARGO_TARGET_DIR/$profile/deps"
    [ -d "$dir" ] || continue
    rm -rf "$CARGO_TARGET_DIR/$profile/incremental"
    find "$dir" -maxdepth 1 -type f -perm -u+x ! -name '*.*' -printf '%T@ %f\n' \
      | sort -rn \
      | awk '{ n = $2; sub(/-[0-9a-f]+$/, "", n); if (seen[n]++) print $2 }' \
      | while read -r f; do rm -f "$dir/$f"; done
  done
}
prune_cache
# ZooKeeper-backed tests must run, never skip: the harness panics if it cannot
# start a server.
export BKSWITCH_REQUIRE_ZK=1
# Likewise for the tests on real bookies and the Java judges (Pulsar's format
# classes, Pulsar's EtcdMetadataStore; bkswitch-bk-harness): missing Java or
# jars fail them instead of skipping them.
export BKSWITCH_REQUIRE_BK=1
# And for the network cuts of the real-stack nemesis (root, iptables, a
# writable cgroup v2 hierarchy): required where they can be made; where they
# cannot (a container without CAP_NET_ADMIN), the bookie cuts are skipped
# and the run says so at the end.
cgroup2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
probe="$cgroup2/bkswitch-netcut-probe-$$"
if [ -n "$cgroup2" ] && iptables -w -L OUTPUT -n >/dev/null 2>&1 && mkdir "$probe" 2>/dev/null; then
  rmdir "$probe"
  export BKSWITCH_REQUIRE_NETCUT=1
else
  skipped+=("the real nemesis's bookie cuts: iptables or a writable cgroup v2 hierarchy is missing (run as root)")
fi

step "cargo fmt --check"
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
else
  skipped+=("cargo fmt --check: rustfmt is missing and could not be installed")
fi

step "cargo clippy"
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --workspace --all-targets --all-features -- -D warnings
else
  skipped+=("cargo clippy: clippy is missing and could not be installed")
fi

step "cargo machete (unused dependencies)"
if cargo machete --version >/dev/null 2>&1; then
  cargo machete
else
  skipped+=("cargo machete: cargo-machete $MACHETE_VERSION could not be installed")
fi

step "SPI purity (default features)"
# The SPI crates build on their own without a ZooKeeper client or a
# compressor: an implementer depending on them gets neither. The router and
# the registry, which plugins reuse, build without a ZooKeeper client.
# Matched on `cargo tree`'s output (its exit code does not say whether a
# package was found).
cargo check --quiet -p bkswitch-proto -p bkswitch-metadata-store \
  -p bkswitch-mledger-spi -p bkswitch-schema-spi -p bkswitch-bk-client \
  -p bkswitch-registry -p bkswitch-bk-router --all-targets
purity_banned() {
  case "$1" in
    bkswitch-registry | bkswitch-bk-router) echo zookeeper-async etcd-client ;;
    *) echo zookeeper-async etcd-client zstd ;;
  esac
}
for crate in bkswitch-mledger-spi bkswitch-schema-spi bkswitch-bk-client \
  bkswitch-registry bkswitch-bk-router; do
  tree=$(cargo tree --quiet -p "$crate" -e normal --prefix none)
  test -n "$tree" || { echo "error: cargo tree printed nothing for $crate" >&2; exit 1; }
  for banned in $(purity_banned "$crate"); do
    if grep -q "^$banned v" <<<"$tree"; then
      echo "error: $crate depends on $banned by default (see the crates' Features sections)" >&2
      exit 1
    fi
  done
done
# Ports and adapters: the coordinator depends on the ports it defines and on
# the SPI crates; the router and the managed ledger plug in from the node
# through the `adapters` feature, never by default.
tree=$(cargo tree --quiet -p bkswitch-switch-orchestrator -e normal --prefix none)
test -n "$tree" || { echo "error: cargo tree printed nothing for bkswitch-switch-orchestrator" >&2; exit 1; }
for banned in bkswitch-bk-router bkswitch-managed-ledger bkswitch-admin; do
  if grep -q "^$banned v" <<<"$tree"; then
    echo "error: bkswitch-switch-orchestrator depends on $banned by default; reach it through a port (the \`adapters\` feature)" >&2
    exit 1
  fi
done

# The libraries link no test code: no published crate reaches a suite, a
# harness or any crate's `testkit` feature through its normal dependencies
# (the test kits themselves, `bkswitch-conformance` and
# `bkswitch-hook-conformance`, are the exception: they are what a storage
# implementer's tests depend on).
mapfile -t libraries < <(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json,sys; [print(p["name"]) for p in json.load(sys.stdin)["packages"] if p.get("publish") != [] and "conformance" not in p["name"]]')
for crate in "${libraries[@]}"; do
  tree=$(cargo tree --quiet -p "$crate" -e normal -e features --prefix none)
  test -n "$tree" || { echo "error: cargo tree printed nothing for $crate" >&2; exit 1; }
  if grep -E '^bkswitch-(hook-)?conformance v|harness v|feature "testkit"' <<<"$tree" | grep -q .; then
    echo "error: $crate links test code through its normal dependencies:" >&2
    grep -E '^bkswitch-(hook-)?conformance v|harness v|feature "testkit"' <<<"$tree" | sort -u >&2
    exit 1
  fi
done

step "packaging: cargo publish --dry-run of every published crate"
# Packages each library crate and builds it from its packaged form, against
# the other crates' packages (not their source folders): a crate that reaches
# outside its folder, or a dependency without a version, fails here.
# Cargo takes a crate from a registry to be immutable: it keeps the sources
# it unpacked from an earlier packaging of the same name and version, and the
# builds it made of them. Forget both, so that every crate is verified against
# today's packages (the workspace's own builds are redone anyway).
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/bkswitch-* \
  "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/bkswitch-*
find "$CARGO_TARGET_DIR/debug/.fingerprint" -maxdepth 1 -name 'bkswitch-*' \
  -exec rm -rf {} + 2>/dev/null || true
mapfile -t unpublished < <(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json,sys; [print("--exclude\n" + p["name"]) for p in json.load(sys.stdin)["packages"] if p.get("publish") == []]')
cargo publish --dry-run --quiet --allow-dirty --workspace "${unpublished[@]}"

step "example plugin: built on the packaged crates, hook suite"
# examples/storage-plugin depends on the crates by version; here its [patch]
# points at the packaged forms cargo just built instead of the source folders.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
example=$(mktemp -d)
cp -r examples/storage-plugin/. "$example/"
sed -i -E "s#path = \"\.\./\.\./([a-z-]+)\"#path = \"$CARGO_TARGET_DIR/package/bkswitch-\1-$version\"#" "$example/Cargo.toml"
cargo fmt --manifest-path examples/storage-plugin/Cargo.toml -- --check
(cd "$example" && cargo clippy --quiet --all-targets -- -D warnings && cargo test --quiet)
rm -rf "$example"

step "cargo test"
# Every test binary runs even after a failure: one run reports every failure.
cargo test --workspace --all-features --no-fail-fast

step "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

# The benches must build and link. In the dev profile, on the artefacts the
# tests just built (clippy --all-targets has type-checked them already); an
# optimized build of every bench took about 20 minutes and proved nothing
# more. `cargo bench -p bkswitch-bench --bench <name>` runs one optimized.
step "benches build (dev profile)"
cargo build --workspace --benches --all-features

if [ "${#skipped[@]}" -gt 0 ]; then
  printf '\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
  printf '!!! %s check(s) SKIPPED; every test ran, but these did not:\n' "${#skipped[@]}" >&2
  for s in "${skipped[@]}"; do printf '!!!   - %s\n' "$s" >&2; done
  printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
  step "tests passed; ${#skipped[@]} check(s) skipped (see above)"
else
  step "all checks passed"
fi
