#!/usr/bin/env python3
"""How a fold-over checkpoint's throughput comes back, against the keys copied.

After a fold-over (cpr-sigmod19 §6.2) read-only sits at the log's tail, so
a key's first update copies its record to the tail and later updates are in
place. With uniform keys the share of keys not yet copied after U updates
is f = exp(-U / N). This reads `epochdb bench hybridlog --checkpoint
foldover --json F` files and, for every checkpoint, follows the 0.1 s
windows from the fold-over (the start of WAIT_FLUSH) to the next
checkpoint: each window's rate over the REST second before the checkpoint,
binned by f at the window's start; and U / N when a window after the
checkpoint's end first reached 95%.

Usage: scripts/foldover-recovery.py RUN.json [RUN.json ...]
"""

import json
import math
import statistics
import sys


def checkpoints(path):
    """(end_s, [(t_s, f, rate / REST, U / N), ...]) per checkpoint of one run."""
    with open(path) as file:
        run = json.load(file)
    config = run["config"]
    keys = config["keys"]
    update_share = int(config["mix"].split(":")[1]) / 100
    windows = run["fine_series"]
    starts = sorted(c["start_s"] for c in run["checkpoints"])
    for checkpoint in run["checkpoints"]:
        phases = {p["phase"]: p for p in checkpoint["phases"]}
        if "wait_flush" not in phases:
            continue
        folded = phases["wait_flush"]["from_s"]
        start, end = checkpoint["start_s"], checkpoint["end_s"]
        following = [s for s in starts if s > start] + [config["duration_s"]]
        rest = [w["txn_s"] for w in windows if start - 1.0 <= w["t_s"] - 0.1 and w["t_s"] <= start]
        if not rest:
            continue
        rest_rate = statistics.mean(rest)
        updates = 0.0
        series = []
        for w in windows:
            if w["t_s"] - 0.1 < folded:
                continue
            if w["t_s"] > following[0]:
                break
            series.append((w["t_s"], math.exp(-updates / keys), w["txn_s"] / rest_rate, updates / keys))
            updates += update_share * w["txn_s"] * 0.1
        yield end, series


def main(paths):
    all_checkpoints = [c for path in paths for c in checkpoints(path)]
    bins = {}
    for _, series in all_checkpoints:
        for _, f, ratio, _ in series:
            bins.setdefault(min(int(f * 10), 9), []).append(ratio)
    print(f"{len(paths)} runs, {len(all_checkpoints)} fold-over checkpoints")
    print("f (keys not yet copied) | windows | rate / REST, median")
    for b in sorted(bins, reverse=True):
        print(f"{b / 10:.1f}-{(b + 1) / 10:.1f} | {len(bins[b])} | {statistics.median(bins[b]):.3f}")
    reached = []
    within_one_s = 0
    for end, series in all_checkpoints:
        first = next((w for w in series if w[0] - 0.1 >= end - 1e-9 and w[2] >= 0.95), None)
        if first is not None:
            reached.append(first[3])
            within_one_s += first[0] - end <= 1.0
    if reached:
        print(
            f"95% reached after U/N = {statistics.median(reached):.2f} (median; "
            f"{min(reached):.2f}-{max(reached):.2f}) in {len(reached)} of {len(all_checkpoints)}; "
            f"within 1 s of the end in {within_one_s}"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
