#!/usr/bin/env python3
"""Two runs of one benchmark, interleaved in time.

Back-to-back runs on a shared VM compare two modes across minutes in which
the machine's own speed moves by +-20%. Here both benchmark processes load
their databases side by side, then take turns: one runs for a slice of S
seconds while the other is frozen with SIGSTOP (all of its threads:
workers, loggers, checkpointers, epoch advancer), so every slice of one
sits between two slices of the other and slow drift cancels.

Each process prints a progress line a second (`[mode] t s rate txn/s
committed ...`); a window counts only if it spans about one second, i.e.
no freeze fell inside it. A slice's throughput is the mean of its
windows; each slice of the second run (B) is divided by the mean of the
first run's (A) slices before and after it (the order is A B A B ... A).
Reported: the median of those ratios, a bootstrap 90% interval, and B's
windows split by whether a checkpoint was running when the window closed.

One pair of processes is not enough: A/A runs (the same binary and flags
on both sides) of fresh pairs gave medians from 0.965 to 1.097, each with
a narrow interval of its own, so a process's own speed varies (memory
placement, say). `--pairs P` runs P pairs one after another and resamples
pairs, then slices, for the interval.

The two runs may differ in mode (`--modes none,silor`), in binary
(`--bin-b`, an A/B of builds), in environment (`--env-b`) or in flags
(`--flags-b`); an A/A run (same everything) shows the method's own spread.

Since each process runs half of the wall time, `--checkpoint-interval I`
is passed as 2*I so that a checkpoint still follows the previous one after
about I seconds of running time. Data directories are removed at the end
(`log` keeps every log file: about 40 MB/s of YCSB at one worker here).

Usage: scripts/interleaved.py OUTDIR [--workload ycsb|tpcc]
         [--modes none,silor] [--threads T] [--pairs P] [--slices N] [--slice-s S]
         [--checkpoint-interval I] [--bin-b B] [--env-b V=X] [--flags-b F]
         [-- flags for both]
e.g.   scripts/interleaved.py /tmp/il --pairs 6 --slices 10 -- --pin-threads
"""

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

LINE = re.compile(
    r"^\[(\w+)\]\s+([\d.]+) s\s+([\d.]+)(?: ([KM]))? txn/s\s+(\d+) committed.*?(checkpointing)?$"
)
SCALE = {None: 1.0, "K": 1e3, "M": 1e6}


class Bench:
    """One benchmark process and the progress windows it printed."""

    def __init__(self, mode, cmd, env, log_path):
        self.mode = mode
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.PIPE, text=True, env=env
        )
        self.measuring = threading.Event()
        self.lines = []  # (bench time s, rate txn/s, checkpointing)
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stderr:
            self.log.write(raw)
            self.log.flush()
            if "measuring" in raw:
                self.stop()
                self.measuring.set()
            m = LINE.match(raw.strip())
            if m:
                rate = float(m.group(3)) * SCALE[m.group(4)]
                with self.lock:
                    self.lines.append((float(m.group(2)), rate, m.group(6) is not None))

    def stop(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def cont(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def mark(self):
        with self.lock:
            return len(self.lines)

    def windows(self, begin, end):
        """Whole one-second windows among the lines printed in [begin, end)."""
        with self.lock:
            lines = self.lines[max(begin, 1) - 1 : end]
        out = []
        for (t0, _, _), (t1, rate, ck) in zip(lines, lines[1:]):
            if 0.9 <= t1 - t0 <= 1.15:
                out.append((rate, ck))
        return out

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def bootstrap(groups, rounds=5000, seed=7):
    """90% interval of the median of all ratios, resampling pairs of
    processes first and then slices within each drawn pair: a pair's own
    speed (its memory placement, say) varies as much as its slices do."""
    rng = random.Random(seed)
    medians = []
    for _ in range(rounds):
        drawn = [rng.choice(groups) for _ in groups]
        medians.append(statistics.median(rng.choice(g) for g in drawn for _ in g))
    medians.sort()
    return medians[int(0.05 * rounds)], medians[int(0.95 * rounds)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--workload", default="ycsb")
    ap.add_argument("--modes", default="none,silor")
    ap.add_argument("--threads", type=int, default=1, help="workers in each run")
    ap.add_argument("--pairs", type=int, default=1,
                    help="pairs of fresh processes, one after another")
    ap.add_argument("--slices", type=int, default=30, help="slices of each mode per pair")
    ap.add_argument("--slice-s", type=float, default=4.0)
    ap.add_argument("--checkpoint-interval", type=float, default=3.0)
    ap.add_argument("--bin", default=os.environ.get("EPOCHDB", "target/release/epochdb"))
    ap.add_argument("--bin-b", help="another binary for the second mode (an A/B of builds)")
    ap.add_argument("--env-b", action="append", default=[],
                    help="VAR=VALUE set for the second process only")
    ap.add_argument("--flags-b", default="",
                    help="bench flags for the second process only (space-separated)")
    # Everything after `--` goes to both benchmark commands.
    argv, extra = sys.argv[1:], []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    args = ap.parse_args(argv)
    base, other = args.modes.split(",")
    pairs = []  # per pair: (slice ratios, A's slice rates, B's windows)
    for pair in range(args.pairs):
        out = os.path.join(args.out, f"pair{pair + 1}") if args.pairs > 1 else args.out
        ratios, base_rates, other_windows = run_pair(args, extra, base, other, out)
        pairs.append((ratios, base_rates, other_windows))
        if args.pairs > 1 and ratios:
            print(f"pair {pair + 1}: {other}/{base} median {statistics.median(ratios):.3f}"
                  f" over {len(ratios)} slices", flush=True)
    ratios = [r for pr, _, _ in pairs for r in pr]
    base_rates = [v for _, br, _ in pairs for v in br]
    if not ratios or not base_rates:
        sys.exit("no slice held a whole one-second progress window; "
                 "use --slice-s of at least 2 (see the logs under OUTDIR)")
    other_windows = [w for _, _, ow in pairs for w in ow]
    lo, hi = bootstrap([pr for pr, _, _ in pairs if pr])
    print(f"{args.workload} {other}/{base}: {args.pairs} pair(s) of processes, {len(ratios)}"
          f" slices of {args.slice_s:g} s, median {statistics.median(ratios):.3f}"
          f" (bootstrap 90% {lo:.3f}-{hi:.3f}), mean {statistics.mean(ratios):.3f},"
          f" min {min(ratios):.3f}, max {max(ratios):.3f}")
    if args.pairs > 1:
        print("  per pair: " + ", ".join(f"{statistics.median(pr):.3f}" if pr else "-"
                                         for pr, _, _ in pairs))
    print(f"{base}: median slice {statistics.median(base_rates):,.0f} txn/s"
          f" (min {min(base_rates):,.0f}, max {max(base_rates):,.0f})")
    mean_base = statistics.mean(base_rates)
    ck = [r for r, c in other_windows if c]
    rest = [r for r, c in other_windows if not c]
    if ck:
        print(f"{other} windows closing in a checkpoint: {len(ck)}, mean / {base} mean"
              f" {statistics.mean(ck) / mean_base:.3f}")
    if rest:
        print(f"{other} windows outside checkpoints: {len(rest)}, mean / {base} mean"
              f" {statistics.mean(rest) / mean_base:.3f}")


def run_pair(args, extra, base, other, out):
    """One pair of fresh processes taking turns; returns B's slice ratios,
    A's slice rates and B's windows."""
    os.makedirs(out, exist_ok=True)
    duration = (2 * args.slices + 1) * (args.slice_s + 0.05) + 600
    benches = []
    for side, mode in (("a", base), ("b", other)):
        data = os.path.join(out, "d-" + side)
        os.makedirs(data, exist_ok=True)
        binary = args.bin_b if side == "b" and args.bin_b else args.bin
        env = dict(os.environ)
        if side == "b":
            env.update(kv.split("=", 1) for kv in args.env_b)
        cmd = [
            binary, "bench", args.workload, "--threads", str(args.threads),
            "--duration", str(duration), "--load-threads", "2", "--durability", mode,
            "--checkpoint-interval", str(2 * args.checkpoint_interval),
            "--dir", data, *extra,
        ]
        if side == "b":
            cmd += args.flags_b.split()
        print(" ".join(cmd), flush=True)
        benches.append(Bench(mode, cmd, env, os.path.join(out, side + ".log")))
    try:
        for b in benches:
            deadline = time.monotonic() + 600
            while not b.measuring.wait(timeout=1):
                if b.proc.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"{b.mode}: exited or did not start measuring; see its log")
        # A B A B ...: every slice follows one of the other mode, so the
        # warm-up after a switch (caches, the other's frozen state) is
        # the same for both.
        order = [0, 1] * args.slices + [0]
        slices = []  # (bench index, first line, last line)
        for who in order:
            b = benches[who]
            first = b.mark()
            b.cont()
            time.sleep(args.slice_s)
            b.stop()
            time.sleep(0.05)
            slices.append((who, first, b.mark()))
    finally:
        for b in benches:
            b.cont()
            b.kill()
        # A `log` run keeps every log file (tens of GB in a few minutes).
        for side in "ab":
            shutil.rmtree(os.path.join(out, "d-" + side), ignore_errors=True)
    per_slice = []
    other_windows = []
    for who, first, last in slices:
        w = benches[who].windows(first, last)
        per_slice.append((who, statistics.mean(r for r, _ in w) if w else None))
        if who == 1:
            other_windows += w
    ratios = []
    for i, (who, value) in enumerate(per_slice):
        if who != 1 or value is None:
            continue
        near = [per_slice[j][1] for j in (i - 1, i + 1) if per_slice[j][1] is not None]
        if near:
            ratios.append(value / statistics.mean(near))
    base_rates = [v for w, v in per_slice if w == 0 and v is not None]
    return ratios, base_rates, other_windows


if __name__ == "__main__":
    main()
