#!/usr/bin/env python3
"""Reads the traces `BENCH_TRACE=<dir>` makes the `bookkeeper_real` bench write
(one file per measurement of adds: "call completion" per add, ns from the
measurement's start, in the order of the calls) and prints, per file:

- the adds in flight on average (Little's law: the latencies from the call
  over the wall time);
- p50 and p99 from the call and from the window's release (the completion
  that freed the add's place; the start for the first window);
- how long a freed place waited for the next call (mean, p99);
- how the completions are spread: the share of milliseconds with none and
  the most in one millisecond.

Usage: add_trace.py <dir> [window]   (window: the adds in flight, default 1024)
"""

import glob
import os
import sys


def pct(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    window = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.txt"))):
        calls, dones = [], []
        with open(path) as f:
            for line in f:
                c, d = line.split()
                calls.append(int(c) / 1e6)
                dones.append(int(d) / 1e6)
        n = len(calls)
        if n <= window:
            continue
        wall = max(dones)
        from_call = [d - c for c, d in zip(calls, dones)]
        freed = sorted(dones)
        waits, from_window = [], []
        for i in range(n):
            free = 0.0 if i < window else min(freed[i - window], calls[i])
            waits.append(calls[i] - free)
            from_window.append(dones[i] - free)
        per_ms = [0] * (int(wall) + 1)
        for d in dones:
            per_ms[int(d)] += 1
        empty = sum(1 for x in per_ms if x == 0) / len(per_ms)
        in_flight = sum(from_call) / wall
        from_call.sort()
        from_window.sort()
        waits_sorted = sorted(waits)
        print(
            f"{os.path.basename(path)}: {n} adds, {n / wall * 1000:.0f}/s, in flight {in_flight:.0f}; "
            f"from the call p50 {pct(from_call, 0.5):.2f} p99 {pct(from_call, 0.99):.2f} ms; "
            f"from the window p50 {pct(from_window, 0.5):.2f} p99 {pct(from_window, 0.99):.2f} ms; "
            f"wait of a freed place mean {sum(waits) / n:.2f} p99 {pct(waits_sorted, 0.99):.2f} ms; "
            f"completions: {empty:.0%} of ms with none, at most {max(per_ms)} in one"
        )


if __name__ == "__main__":
    main()
