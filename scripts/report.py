#!/usr/bin/python3
"""A report on any sweep: a summary per topology and schedule, and the standard figures.

    scripts/report.py SWEEP.csv [-o DIR]          (DIR defaults to SWEEP-report/ beside the CSV)

SWEEP.csv is what `parmsim sweep SPEC -o SWEEP.csv` wrote. Writes DIR/summary.md (also
printed): per topology and schedule, the configurations, the speedup over the baseline
(min / median / max), the configurations where the schedule is the fastest run (wins;
a tie goes to the schedule listed first) and the rows that fit the GPU's memory. The
figures (plots/make_figures.py; Debian's python3-matplotlib) go beside it:
speedup_cdf.png, speedup_by_param_TOPOLOGY.png (each varied layer key), s1_vs_s2_wins.png
and time_breakdown.png. Each is titled with the sweep's name (from SWEEP.csv.run.json,
else the file's) and the layer keys every row shares.
"""
import argparse
import csv
import os
import statistics
import sys
import tempfile
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDED = ["config", "topology", "schedule", "total_us", "speedup_vs_baseline", "fits"]


def fail(msg):
    sys.exit(f"report.py: {msg}")


def load(path):
    try:
        f = open(path, newline="")
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    with f:
        rd = csv.DictReader(f)
        missing = [c for c in NEEDED if c not in (rd.fieldnames or [])]
        if missing:
            fail(f"{path}: not a sweep CSV: no column {', '.join(repr(c) for c in missing)} "
                 f"(parmsim sweep SPEC -o FILE writes one)")
        rows = []
        for line, r in enumerate(rd, start=2):
            for c in ("total_us", "speedup_vs_baseline"):
                try:
                    v = float(r[c])
                except (TypeError, ValueError):
                    fail(f"{path}:{line}: column '{c}': {str(r[c])[:40]!r} is not a number")
                if not v > 0 or v == float("inf"):
                    fail(f"{path}:{line}: column '{c}': {r[c]!r} is not a positive number")
            if r["fits"] not in ("0", "1"):
                fail(f"{path}:{line}: column 'fits': {str(r['fits'])[:40]!r} is not 0 or 1")
            rows.append(r)
    if not rows:
        fail(f"{path}: no rows")
    return rows


def summary(rows):
    """[(topology, schedule, configs, min, median, max, wins, fits, rows)], topologies in order of appearance."""
    sched_order, topo_order = [], []
    per = defaultdict(list)
    by_cfg = defaultdict(dict)
    for r in rows:
        if r["schedule"] not in sched_order:
            sched_order.append(r["schedule"])
        if r["topology"] not in topo_order:
            topo_order.append(r["topology"])
        per[(r["topology"], r["schedule"])].append(r)
        by_cfg[r["config"]][r["schedule"]] = r
    wins = defaultdict(int)
    for c in by_cfg.values():
        fastest = min((s for s in sched_order if s in c), key=lambda s: float(c[s]["total_us"]))
        wins[(c[fastest]["topology"], fastest)] += 1
    out = []
    for t in topo_order:
        for s in sched_order:
            rs = per.get((t, s))
            if not rs:
                continue
            x = [float(r["speedup_vs_baseline"]) for r in rs]
            out.append((t, s, len({r["config"] for r in rs}), min(x), statistics.median(x), max(x), wins[(t, s)],
                        sum(r["fits"] == "1" for r in rs), len(rs)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="\n".join(__doc__.splitlines()[2:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", metavar="SWEEP.csv")
    ap.add_argument("-o", "--out", metavar="DIR", help="folder for summary.md and the figures (made if missing)")
    a = ap.parse_args()
    rows = load(a.sweep)
    sys.path.insert(0, os.path.join(ROOT, "plots"))
    import make_figures as mf  # the figures' code; reads no file itself here

    out = a.out or os.path.splitext(a.sweep)[0] + "-report"
    os.makedirs(out, exist_ok=True)
    name = mf.sweep_name(a.sweep)
    fixed, varying = mf.fixed_keys(rows)
    lines = [f"# Sweep {name}", "",
             f"{len({r['config'] for r in rows})} configurations, {len(rows)} rows ({a.sweep}).",
             f"Fixed: {', '.join(fixed) if fixed else 'none'}. Varied: {', '.join(varying) if varying else 'none'}.",
             "Speedup: the baseline's time over the schedule's; wins: configurations where the schedule is the "
             "fastest run; fits: rows within the GPU's memory.", "",
             "| topology | schedule | configurations | speedup min | median | max | wins | fits |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for t, s, n, lo, med, hi, w, fits, nrows in summary(rows):
        lines.append(f"| {t} | {s} | {n} | {lo:.2f}x | {med:.2f}x | {hi:.2f}x | {w} | {fits} of {nrows} |")
    text = "\n".join(lines) + "\n"
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".summary.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(out, "summary.md"))
    print(text, end="")
    made = []
    mf.sweep_figures(a.sweep, out, made)
    print(f"report: {os.path.join(out, 'summary.md')} and {len(made)} figures in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
