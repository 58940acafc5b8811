#!/usr/bin/env bash
# The long nemesis run, outside CI: 10,000 random histories on the embedded
# stack, 30 on real ZooKeeper and real bookies, and 1,000 migration histories
# (moving the metadata store between in-memory backends with coordinator and
# participant faults); docs/RELIABILITY.md records the figures.
#
#   scripts/nemesis-long.sh                 # everything
#   NEMESIS_EMBEDDED=2000 NEMESIS_REAL=0 NEMESIS_MIGRATION=200 scripts/nemesis-long.sh
#   NEMESIS_JOBS=2 scripts/nemesis-long.sh  # embedded histories on 2 threads
#
# Every failing history is printed with its seed and the one-line command
# that replays it. Logs go to target/nemesis-long/.
set -uo pipefail
cd "$(dirname "$0")/.."

EMBEDDED=${NEMESIS_EMBEDDED:-10000}
REAL=${NEMESIS_REAL:-30}
MIGRATION=${NEMESIS_MIGRATION:-1000}
FIRST=${NEMESIS_FIRST_SEED:-100000}
JOBS=${NEMESIS_JOBS:-1}
LOGS=${CARGO_TARGET_DIR:-target}/nemesis-long
mkdir -p "$LOGS"

cargo build --release -p bkswitch-nemesis --bin nemesis || exit 1
BIN=${CARGO_TARGET_DIR:-target}/release/nemesis

status=0
if [ "$EMBEDDED" -gt 0 ]; then
    echo "== $EMBEDDED embedded histories from seed $FIRST"
    "$BIN" run --stack embedded --histories "$EMBEDDED" --seed "$FIRST" --jobs "$JOBS" \
        | tee "$LOGS/embedded.log" | { grep -E "^(history|  replay|Totals|Faults|Below)" || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$REAL" -gt 0 ]; then
    echo "== $REAL histories on real ZooKeeper and bookies from seed $FIRST"
    BKSWITCH_REQUIRE_ZK=1 BKSWITCH_REQUIRE_BK=1 \
        "$BIN" run --stack real --histories "$REAL" --seed "$FIRST" \
        | tee "$LOGS/real.log" | { grep -E "^(history|  replay|Totals)" || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$MIGRATION" -gt 0 ]; then
    echo "== $MIGRATION migration histories from seed $FIRST"
    "$BIN" migration --histories "$MIGRATION" --seed "$FIRST" \
        | tee "$LOGS/migration.log" | { grep -E "^(  replay|  violation|Totals)" || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
exit $status
