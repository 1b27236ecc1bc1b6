#!/usr/bin/env python3
"""Draws the fc-checkpoint-sigmod11 §5 figures from `epochdb bench fcc`
JSON (written by scripts/fcc-sitting.sh) and prints the tables that go into
BENCHMARKS.md (also written to DIR/summary.md).

Usage: scripts/plot-fcc.py DIR [FIGDIR]   (FIGDIR defaults to docs/figures)
"""
import json
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DIR = sys.argv[1]
FIG = sys.argv[2] if len(sys.argv) > 2 else "docs/figures"
os.makedirs(FIG, exist_ok=True)
NAMES = {
    "ns": "NS", "bacou": "BACOU", "nzz": "NZZ", "bazz": "BAZZ",
    "npp-copy": "NPP-Copy", "npp-merge": "NPP-Merge",
    "ipp-copy": "IPP-Copy", "ipp-merge": "IPP-Merge",
}
STYLE = {
    "ns": "s-", "bacou": "^-", "nzz": "v--", "bazz": "o-",
    "npp-copy": "x--", "npp-merge": "+--", "ipp-copy": "D-", "ipp-merge": "d:",
}
out_md = []
PERIOD_S = 4.0


def load(name):
    path = os.path.join(DIR, name)
    if not os.path.exists(path):
        print(f"(no {path})", file=sys.stderr)
        return None
    with open(path) as f:
        return json.load(f)


def med(xs):
    return statistics.median(xs)


def minf(rs):
    """Overhead per checkpoint period from the per-interval minimum over
    repeats, for the algorithm and for the raw mutator of the same repeats:
    a scheduler preemption lands in one repeat's interval, a checkpointing
    cost in every repeat's, so the minimum keeps the cost and drops most of
    the noise of a shared machine."""
    n = min(len(r["interval_ms"]) for r in rs)
    algo = [min(r["interval_ms"][i] for r in rs) for i in range(n)]
    raw = [min(r["raw_interval_ms"][i] for r in rs) for i in range(n)]
    periods = n * 0.1 / PERIOD_S
    return (sum(algo) - sum(raw)) / periods


def grouped(runs, key):
    """{(algo, key): [runs over repeats]}"""
    g = defaultdict(list)
    for r in runs:
        g[(r["algo"], key(r))].append(r)
    return g


def save(fig, name):
    path = os.path.join(FIG, name)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    print("wrote", path, file=sys.stderr)


def md(line=""):
    out_md.append(line)


def overhead_vs(runs, algos, key, xlabel, title, name, logx=True):
    g = grouped(runs, key)
    fig, ax = plt.subplots(figsize=(6, 4))
    for a in algos:
        xs = sorted({k for (al, k) in g if al == a})
        if not xs:
            continue
        ys = [max(minf(g[(a, x)]), 1e-2) for x in xs]
        ax.plot(xs, ys, STYLE.get(a, "o-"), label=NAMES.get(a, a))
    if logx:
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("overhead per checkpoint period (ms)\n(per-interval minimum over repeats)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save(fig, name)


def latency(runs, algos, rate, title, name, workload="zipf"):
    """Mutator time per interval: per interval, the minimum over the
    repeats (see `minf`), for each algorithm and for the raw mutator."""
    fig, ax = plt.subplots(figsize=(7, 4))
    raw = None
    reps = 1
    for a in algos:
        sel = [r for r in runs if r["algo"] == a
               and (workload == "mmo" or r["updates_per_sec"] == rate)]
        if not sel:
            continue
        reps = len(sel)
        n = min(len(r["interval_ms"]) for r in sel)
        series = [min(r["interval_ms"][i] for r in sel) for i in range(n)]
        raw = [min(r["raw_interval_ms"][i] for r in sel) for i in range(n)]
        ax.plot(range(1, n + 1), series, "-", label=NAMES.get(a, a), lw=1)
    if raw:
        ax.plot(range(1, len(raw) + 1), raw, "k:", label="raw mutator", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("0.1 s interval")
    ax.set_ylabel(f"mutator time per interval (ms)\n(minimum over {reps} repeats)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, name)


def table_rates(runs, algos):
    algos = [a for a in algos if any(r["algo"] == a for r in runs)]
    g = grouped(runs, lambda r: r["updates_per_sec"])
    rates = sorted({k for (_, k) in g})
    reps = max(r["repeat"] for r in runs) + 1
    md(f"Overhead per checkpoint period, ms: from the per-interval minimum over {reps} repeats "
       f"(the figures' measure), and in brackets the median of the {reps} runs' own overheads:")
    md()
    md("| updates/s | " + " | ".join(NAMES[a] for a in algos) + " | lowest |")
    md("|---:|" + "---:|" * len(algos) + "---|")
    for x in rates:
        vals = {a: minf(g[(a, x)]) for a in algos if (a, x) in g}
        meds = {a: med([r["overhead_ms_per_period"] for r in g[(a, x)]]) for a in algos if (a, x) in g}
        best = min(vals, key=vals.get)
        md(f"| {x:,} | " + " | ".join(f"{vals[a]:.1f} ({meds[a]:.1f})" if a in vals else "" for a in algos)
           + f" | {NAMES[best]} |")
    md()


def zipf_rates():
    d = load("zipf-rates.json")
    if not d:
        return
    runs = d["runs"]
    overhead_vs(runs, ["nzz", "bazz"], lambda r: r["updates_per_sec"], "updates per second",
                "Figure 3: Wait-Free Zigzag variants (200 MB)", "fcc-fig3-zigzag.svg")
    overhead_vs(runs, ["npp-copy", "npp-merge", "ipp-copy", "ipp-merge"],
                lambda r: r["updates_per_sec"], "updates per second",
                "Figure 4: Wait-Free Ping-Pong variants (200 MB)", "fcc-fig4-pingpong.svg")
    overhead_vs(runs, ["ns", "bacou", "bazz", "ipp-copy"], lambda r: r["updates_per_sec"],
                "updates per second", "Figure 5: Zipf workload overhead (200 MB)",
                "fcc-fig5-overhead.svg")
    main = ["ns", "bacou", "nzz", "bazz", "npp-copy", "npp-merge", "ipp-copy", "ipp-merge"]
    md("### Zipf, 200 MB (Figures 3-5)")
    md()
    table_rates(runs, main)
    for rate, fig in [(320000, 8), (1280000, 9)]:
        latency(runs, ["ns", "bacou", "bazz", "ipp-copy"], rate,
                f"Figure {fig}: mutator time per 0.1 s, {rate:,} updates/s",
                f"fcc-fig{fig}-latency-{rate // 1000}k.svg")
    md("Per-interval mutator time (ms; medians over repeats of each run's p50 and max; "
       "added = above the raw mutator in the same interval):")
    md()
    md("| updates/s | algorithm | raw p50 | raw max / p50 | p50 | max | max / p50 | added p50 | added max | min-filtered: added p50 | max / p50 |")
    md("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    g = grouped(runs, lambda r: r["updates_per_sec"])
    for rate in (320000, 1280000):
        for a in ["ns", "bacou", "bazz", "ipp-copy", "ipp-merge"]:
            rs = g.get((a, rate))
            if not rs:
                continue
            p50 = med([r["interval_ms_p50"] for r in rs])
            mx = med([r["interval_ms_max"] for r in rs])
            ratio = med([r["interval_ms_max"] / r["interval_ms_p50"] for r in rs])
            n = min(len(r["interval_ms"]) for r in rs)
            mins = [min(r["interval_ms"][i] for r in rs) for i in range(n)]
            raw_mins = [min(r["raw_interval_ms"][i] for r in rs) for i in range(n)]
            mf_added = med([a - b for a, b in zip(mins, raw_mins)])
            mf_ratio = max(mins) / med(mins)
            raw_ratio = med([max(r["raw_interval_ms"]) / med(r["raw_interval_ms"]) for r in rs])
            md(f"| {rate:,} | {NAMES[a]} | {med([r['raw_interval_ms_p50'] for r in rs]):.3f} | "
               f"{raw_ratio:.2f} | {p50:.3f} | {mx:.3f} | {ratio:.2f} | "
               f"{med([r['interval_added_ms']['p50'] for r in rs]):.3f} | "
               f"{med([r['interval_added_ms']['max'] for r in rs]):.3f} | "
               f"{mf_added:.3f} | {mf_ratio:.2f} |")
    md()


def zipf_writer():
    d = load("zipf-writer.json")
    if not d:
        return
    runs = d["runs"]
    algos = [a for a in NAMES if any(r["algo"] == a for r in runs)]
    g = grouped(runs, lambda r: r["updates_per_sec"])
    reps = max(r["repeat"] for r in runs) + 1
    md(f"With each algorithm's own writer running between intervals (`--writer between`, off the "
       f"clock; {reps} repeats): overhead per checkpoint period, ms, and the worst interval over the "
       "median (min-filtered series):")
    md()
    md("| updates/s | " + " | ".join(NAMES[a] for a in algos) + " |")
    md("|---:|" + "---:|" * len(algos))
    for x in sorted({k for (_, k) in g}):
        cells = []
        for a in algos:
            rs = g[(a, x)]
            n = min(len(r["interval_ms"]) for r in rs)
            mins = [min(r["interval_ms"][i] for r in rs) for i in range(n)]
            cells.append(f"{minf(rs):.1f} ({max(mins) / med(mins):.1f}×)")
        md(f"| {x:,} | " + " | ".join(cells) + " |")
    md()


def zipf_sizes():
    d = load("zipf-sizes.json")
    if not d:
        return
    runs = d["runs"]
    algos = ["ns", "bacou", "bazz", "ipp-copy"]
    md("### State size (Figures 6-7)")
    md()
    reps = max(r["repeat"] for r in runs) + 1
    md(f"Overhead per checkpoint period, ms (per-interval minimum over {reps} repeats), and NS's "
       "latency spike (the largest per-interval minimum above the raw mutator):")
    md()
    md("| state MB | updates/s | " + " | ".join(NAMES[a] for a in algos) + " | NS spike ms |")
    md("|---:|---:|" + "---:|" * len(algos) + "---:|")
    for pct, lo_hi, fig in [(0.08, 0, 6), (2.56, 1, 7)]:
        # Each size has two rates; the lower one is 0.08%.
        by_size = defaultdict(list)
        for r in runs:
            by_size[round(r["state_mb"], 1)].append(r)
        sel = []
        for size, rs in by_size.items():
            rates = sorted({r["updates_per_sec"] for r in rs})
            rate = rates[lo_hi] if len(rates) > lo_hi else None
            sel += [r for r in rs if r["updates_per_sec"] == rate]
        overhead_vs(sel, algos, lambda r: round(r["state_mb"], 1), "state size (MB)",
                    f"Figure {fig}: scale-up, {pct}% of the state updated per second",
                    f"fcc-fig{fig}-sizes.svg")
        g = grouped(sel, lambda r: round(r["state_mb"], 1))
        for size in sorted({k for (_, k) in g}):
            vals = [minf(g[(a, size)]) if (a, size) in g else float("nan") for a in algos]
            rate = g[(algos[0], size)][0]["updates_per_sec"]
            rs = g[("ns", size)]
            n = min(len(r["interval_ms"]) for r in rs)
            spike = max(min(r["interval_ms"][i] - r["raw_interval_ms"][i] for r in rs)
                        for i in range(n))
            md(f"| {size:,.0f} | {rate:,} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {spike:.1f} |")
    md()


def hugepages():
    d = load("zipf-hugepages.json")
    if not d:
        return
    runs = d["runs"]
    g = defaultdict(list)
    for r in runs:
        g[(r["algo"], r["updates_per_sec"], r["huge_pages"])].append(r)
    algos = [a for a in ["ns", "bacou", "nzz", "bazz", "npp-copy", "ipp-copy"]
             if any(k[0] == a for k in g)]
    rates = sorted({k[1] for k in g})
    md("### Huge pages (Figure 14)")
    md()
    md("Overhead per checkpoint period, ms, 4 KiB pages → 2 MiB pages (per-interval minimum over "
       "repeats), and the change; raw mutator ms per interval p50 off → on:")
    md()
    md("| updates/s | raw p50 | " + " | ".join(NAMES[a] for a in algos) + " |")
    md("|---:|---:|" + "---:|" * len(algos))
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(algos)
    for i, a in enumerate(algos):
        cuts = []
        for x in rates:
            off = minf(g[(a, x, "off")])
            on = minf(g[(a, x, "on")])
            cuts.append(100 * (1 - on / off) if off > 0 else 0)
        ax.bar([j + i * width for j in range(len(rates))], cuts, width, label=NAMES[a])
    for x in rates:
        raw_off = med([r["raw_interval_ms_p50"] for r in g[(algos[0], x, "off")]])
        raw_on = med([r["raw_interval_ms_p50"] for r in g[(algos[0], x, "on")]])
        cells = []
        for a in algos:
            off = minf(g[(a, x, "off")])
            on = minf(g[(a, x, "on")])
            change = 100 * (on / off - 1) if off > 0 else 0
            cells.append(f"{off:.1f} → {on:.1f} ({change:+.0f}%)")
        md(f"| {x:,} | {raw_off:.2f} → {raw_on:.2f} | " + " | ".join(cells) + " |")
    md()
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rates))])
    ax.set_xticklabels([f"{x // 1000}K" for x in rates])
    ax.set_xlabel("updates per second")
    ax.set_ylabel("overhead cut by 2 MiB pages (%)")
    ax.set_title("Figure 14: large pages (200 MB, Zipf)")
    ax.axhline(0, color="k", lw=0.5)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "fcc-fig14-hugepages.svg")


def mmo():
    d = load("mmo.json")
    if d:
        runs = d["runs"]
        algos = [a for a in ["ns", "bacou", "bazz", "ipp-copy"] if any(r["algo"] == a for r in runs)]
        vals = [minf([r for r in runs if r["algo"] == a]) for a in algos]
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.bar([NAMES[a] for a in algos], vals)
        ax.set_ylabel("overhead per checkpoint period (ms)")
        ax.set_title("Figure 10: MMO overhead (2,000 players)")
        ax.grid(True, axis="y", alpha=0.3)
        save(fig, "fcc-fig10-mmo-overhead.svg")
        latency(runs, algos, None, "Figure 11: MMO mutator time per 0.1 s tick",
                "fcc-fig11-mmo-latency.svg", workload="mmo")
        md("### MMO (Figures 10-11)")
        md()
        rate = med([r["updates_per_sec"] for r in runs])
        md(f"{rate:,.0f} updates/s (the model's rate), {runs[0]['state_mb']:.1f} MB of state.")
        md()
        md("| algorithm | overhead ms/period | interval ms p50 | max | added max | min-filtered: max | max / p50 |")
        md("|---|---:|---:|---:|---:|---:|---:|")
        for a, v in zip(algos, vals):
            rs = [r for r in runs if r["algo"] == a]
            n = min(len(r["interval_ms"]) for r in rs)
            mins = [min(r["interval_ms"][i] for r in rs) for i in range(n)]
            md(f"| {NAMES[a]} | {v:.2f} | {med([r['interval_ms_p50'] for r in rs]):.3f} | "
               f"{med([r['interval_ms_max'] for r in rs]):.3f} | "
               f"{med([r['interval_added_ms']['max'] for r in rs]):.3f} | "
               f"{max(mins):.3f} | {max(mins) / med(mins):.2f} |")
        md()
    d = load("mmo-recovery.json")
    if d:
        md("Recovery (§5.4), files evicted from the page cache, then again cached:")
        md()
        md("| algorithm | checkpoint MB (one slot) | log MB | ticks replayed | cold s | of which replay s | warm s | state matches |")
        md("|---|---:|---:|---:|---:|---:|---:|---|")
        for r in d["runs"]:
            md(f"| {NAMES[r['algo']]} | {r['checkpoint_mb']:.1f} | {r['log_mb']:.1f} | "
               f"{r['replayed_ticks']} | {r['cold_s']:.2f} | {r['cold_replay_s']:.2f} | "
               f"{r['warm_s']:.2f} | {r['state_matches']} |")
        md()


zipf_rates()
zipf_writer()
hugepages()
zipf_sizes()
mmo()
text = "\n".join(out_md)
print(text)
with open(os.path.join(DIR, "summary.md"), "w") as f:
    f.write(text + "\n")
