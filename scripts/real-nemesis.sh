#!/usr/bin/env bash
# Long runs of the real-stack loss checker (cli/tests/real_nemesis): N
# histories of three `bookie-switch serve` processes on two real bookie
# clusters, their metadata links (ZooKeeper for even seeds, etcd for odd
# ones) behind fault-injecting proxies, their bookie links cut by NetCut
# (root and iptables), every acknowledged message read back at the end.
# docs/RELIABILITY.md records the figures.
#
#   scripts/real-nemesis.sh 100 3     # 100 histories in 3 parallel processes
#
# Each job is one test process with its own ZooKeeper, etcd and two 2-bookie
# clusters, running its share of the seeds one after the other. Seeds start
# at REAL_NEMESIS_FIRST_SEED (default 1000). Logs go to
# $CARGO_TARGET_DIR/real-nemesis/; every failed history is printed with the
# command that replays it.
set -uo pipefail
cd "$(dirname "$0")/.."

N=${1:?usage: scripts/real-nemesis.sh N [jobs]}
JOBS=${2:-3}
FIRST=${REAL_NEMESIS_FIRST_SEED:-1000}
LOGS=${CARGO_TARGET_DIR:-target}/real-nemesis
mkdir -p "$LOGS"
rm -f "$LOGS"/job-*.log

BIN=$(cargo test -p bkswitch-cli --features etcd --test real_nemesis --no-run 2>&1 \
    | sed -n 's/.*Executable .*(\(.*real_nemesis-[0-9a-f]*\))$/\1/p' | tail -1)
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "cannot build the real_nemesis test binary" >&2; exit 1; }

export BKSWITCH_REQUIRE_ZK=1 BKSWITCH_REQUIRE_BK=1 BKSWITCH_REQUIRE_NETCUT=1
start=$(date +%s)
pids=()
for ((k = 0; k < JOBS; k++)); do
    # Job k: seeds FIRST+k, FIRST+k+JOBS, … (both backends in every job).
    seeds=$(seq -s, $((FIRST + k)) "$JOBS" $((FIRST + N - 1)))
    [ -n "$seeds" ] || continue
    REAL_NEMESIS_SEEDS=$seeds "$BIN" --ignored --exact histories_from_env --nocapture \
        >"$LOGS/job-$k.log" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
elapsed=$(($(date +%s) - start))

grep -h '^REAL-NEMESIS ' "$LOGS"/job-*.log >"$LOGS/summary.txt"
python3 - "$LOGS/summary.txt" "$N" "$JOBS" "$elapsed" <<'EOF'
import collections, sys
path, wanted, jobs, elapsed = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
by_seed = {}
for line in open(path):
    row = {}
    for word in line.split()[1:]:
        if "=" in word:
            k, v = word.split("=", 1)
            row[k] = v
    by_seed[row["seed"]] = row
rows = list(by_seed.values())
by_backend = collections.Counter(r["backend"] for r in rows)
kinds = collections.Counter()
for r in rows:
    for kv in filter(None, r.get("kinds", "").split(",")):
        k, n = kv.split("=")
        kinds[k.replace("_", " ")] += int(n)
total = lambda key: sum(int(r.get(key, 0)) for r in rows)
failed = [r for r in rows if r["result"] != "PASS"]
print(f"histories: {len(rows)} of {wanted} ({dict(by_backend)}), {jobs} jobs, {elapsed} s")
print(f"acknowledged messages checked: {total('acks')}; read back: {total('read')}; "
      f"consumed and trimmed: {total('trimmed')}; ledgers opened: {total('ledgers')}")
print("steps by kind:")
for k, n in sorted(kinds.items()):
    print(f"  {k}: {n}")
print(f"violations: {total('violations')} in {len(failed)} histories")
for r in failed:
    print(f"  FAILED seed {r['seed']} ({r['backend']}): REAL_NEMESIS_SEEDS={r['seed']} "
          "cargo test -p bkswitch-cli --features etcd --test real_nemesis -- --ignored "
          "histories_from_env --nocapture")
sys.exit(1 if failed or len(rows) < wanted else 0)
EOF
