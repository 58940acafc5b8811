#!/usr/bin/env bash
# The topic-move demo on real brokers: two geo-replicated Apache Pulsar 4.2.4
# clusters on loopback, `bookie-switch lookup-proxy` processes, real Java and
# Python clients producing and consuming through the proxies, and topic moves
# driven by `bookie-switch pulsar topic-switch` (a move and its rollback, a
# plan whose second batch rolls back by itself, a proxy and the coordinator
# killed mid-move, a refused move). Prints each client's figures (lost,
# duplicates, worst blocked send) as `MOVE-FIGURES` lines.
#
#   scripts/topic-move-demo.sh            # the moves
#   scripts/topic-move-demo.sh --pip188   # and the same traffic moved by PIP-188
#
# Needs what scripts/test.sh installs (Java 17, Maven, ZooKeeper, Python 3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/fetch-java-deps.sh >/dev/null
scripts/fetch-pulsar-python.sh >/dev/null
export BKSWITCH_REQUIRE_PULSAR=1
args=(-- --nocapture --test-threads 1)
if [ "${1:-}" = "--pip188" ]; then
  args=(-- --nocapture --test-threads 1 --include-ignored)
fi
cargo test -p bkswitch-cli --test real_topic_move "${args[@]}" 2>&1 \
  | tee /dev/stderr | grep -E '^MOVE-FIGURES|^test |^test result' || true
