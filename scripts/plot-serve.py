#!/usr/bin/env python3
"""Plots a serve-sitting.sh comparison: median requests per second of each
target for SET, GET, INCR and MSET, unpipelined and with -P 16, and prints
the markdown table of medians and ratios to Redis with appendfsync always.

    scripts/plot-serve.py OUT/compare.tsv docs/figures/serve-vs-redis.svg
"""

import collections
import csv
import statistics
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
runs = collections.defaultdict(list)
for r in rows:
    runs[(r["target"], r["test"], int(r["pipeline"]))].append(float(r["rps"]))
targets = list(dict.fromkeys(r["target"] for r in rows))
tests = ["set", "get", "incr", "mset"]
median = {k: statistics.median(v) for k, v in runs.items()}

print("| target | pipeline | " + " | ".join(t.upper() for t in tests) + " |")
print("|---|---|" + "---|" * len(tests))
for p in (1, 16):
    for t in targets:
        cells = []
        for test in tests:
            m = median.get((t, test, p))
            base = median.get(("redis-always", test, p))
            cells.append(f"{m / 1000:.1f} k ({m / base:.2f}×)" if m and base else "–")
        print(f"| {t} | {p} | " + " | ".join(cells) + " |")

fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
width = 0.8 / len(targets)
for ax, p in zip(axes, (1, 16)):
    for i, t in enumerate(targets):
        values = [median.get((t, test, p), 0) / 1000 for test in tests]
        ax.bar([x + i * width for x in range(len(tests))], values, width, label=t)
    ax.set_xticks([x + width * (len(targets) - 1) / 2 for x in range(len(tests))])
    ax.set_xticklabels([t.upper() for t in tests])
    ax.set_ylabel("thousand requests / s (median)")
    ax.set_title(f"redis-benchmark -c 50 -P {p}")
axes[0].legend(fontsize=8)
fig.suptitle("epochdb serve against Redis 7 (one sitting, 2 cores)")
fig.tight_layout()
fig.savefig(sys.argv[2])
