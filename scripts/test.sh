#!/usr/bin/env bash
# The project's one test command: installs what the tests need, then runs every
# check CI runs. `.ci/run` calls exactly this script.
#
#   scripts/test.sh
#
# What it does, in order:
#   1. installs Debian's `zookeeper` package (and its Java runtime) when missing —
#      the tests start their own ZooKeeper servers on free 127.0.0.1 ports;
#   2. installs Maven and a JDK when missing and fetches the BookKeeper jars
#      (scripts/fetch-java-deps.sh; cached outside the checkout) — the tests
#      start real bookies and a Java BookKeeper client;
#   3. makes sure rustfmt and clippy are present;
#   4. cargo fmt --check, clippy (-D warnings), the whole test suite, the docs
#      (warnings denied) and `cargo bench --no-run` (benches must compile).
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

step "BookKeeper jars"
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven default-jdk-headless >/dev/null
fi
command -v mvn >/dev/null 2>&1 || { echo "mvn missing after install" >&2; exit 1; }
command -v javac >/dev/null 2>&1 || { echo "javac missing after install" >&2; exit 1; }
scripts/fetch-java-deps.sh

step "rust components"
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
cargo --version

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-${HOME:-.}/.cache}/bkswitch/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# ZooKeeper-backed tests must run, never skip: the harness panics if it cannot
# start a server.
export BKSWITCH_REQUIRE_ZK=1
# Likewise for the tests on real bookies (bkswitch-bk-harness): missing Java or
# jars fail them instead of skipping them.
export BKSWITCH_REQUIRE_BK=1

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo test"
cargo test --workspace --all-features

step "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

step "cargo bench --no-run"
cargo bench --workspace --no-run

step "all checks passed"
