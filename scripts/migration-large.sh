#!/usr/bin/env bash
# The metadata migration's large runs (bench/RESULTS.md records the
# figures):
#   - a parent with 60,000 children moved from a real ZooKeeper to a real
#     etcd under traffic by three `bookie-switch serve` processes (a test of
#     cli/tests/metadata_migration_faults.rs, which CI runs too);
#   - the coordinator's peak heap while it migrates 10,000 and 100,000 nodes
#     (the `coordinator_memory` example, a counting global allocator), outside
#     CI.
#
#   scripts/migration-large.sh            # both
#   MIGRATION_LARGE_MEMORY=0 scripts/migration-large.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${MIGRATION_LARGE_CHILDREN:-1}" = 1 ]; then
    echo "== 60,000 children under traffic"
    time cargo test -p bkswitch-cli --features etcd --test metadata_migration_faults \
        a_parent_with_60_000_children_moves_under_traffic -- --nocapture
fi
if [ "${MIGRATION_LARGE_MEMORY:-1}" = 1 ]; then
    for shape in wide bounded; do
        for n in 10000 100000; do
            echo "== coordinator memory, $n nodes, $shape fan-out"
            cargo run -p bkswitch-metadata-migration --example coordinator_memory -- "$n" "$shape"
        done
    done
fi
