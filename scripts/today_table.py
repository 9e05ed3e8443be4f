#!/usr/bin/env python3
"""The "today" table: do Parm's ideas pay on today's MoE layers and machines?

Reads a `parmsim sweep experiments/whatif-today.yaml` CSV (a `case` per model layer, each
on several topologies, with mp = 1 at several expert-parallel sizes and mp = 8) and writes
Markdown: per model and machine, the fastest expert-parallel-only layout (mp = 1, B = 1, the
layout Megatron-Core and DeepSeek train MoE layers with), and with tensor parallelism
(mp = 8, B = 8: an MP group's GPUs hold the same tokens, so both move the same tokens) the
baseline, S1 and S2, each against that layout.

    scripts/today_table.py --csv out/whatif-today.csv --out out/today.md
"""
import argparse
import csv
import os
import sys
import tempfile
from collections import defaultdict


def fail(msg):
    sys.exit(f"today_table.py: {msg}")


def load(path):
    if not os.path.isfile(path):
        fail(f"{path}: not found (run scripts/run-main.sh first)")
    rows = defaultdict(dict)  # (case, topology, mp, ep) -> schedule -> total_us
    with open(path, newline="") as f:
        for line, r in enumerate(csv.DictReader(f), start=2):
            try:
                mp, b = int(r["mp"]), int(r["B"])
                if (mp, b) not in ((1, 1), (8, 8)):  # the pairs that move the same tokens
                    continue
                key = (r["case"], r["topology"], mp, int(r["ep"]))
                rows[key][r["schedule"]] = float(r["total_us"])
            except (KeyError, ValueError) as e:
                fail(f"{path}:{line}: {e}")
    return rows


def table(rows):
    cases, topos = [], []
    for (c, t, _, _) in rows:
        if c not in cases:
            cases.append(c)
        if t not in topos:
            topos.append(t)
    out = [
        "| layer | machine | EP only (mp=1, B=1): best ep, ms | mp=8, B=8: baseline, ms | S1 | S2 | best of S1/S2 against EP only |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    pays = []
    for c in cases:
        for t in topos:
            ep_only = [(v["baseline"], ep) for (cc, tt, mp, ep), v in rows.items() if (cc, tt, mp) == (c, t, 1)]
            tp = [v for (cc, tt, mp, _), v in rows.items() if (cc, tt, mp) == (c, t, 8)]
            if not ep_only or not tp:
                continue
            best, ep = min(ep_only)
            v = tp[0]
            parm = min(v["s1"], v["s2"])
            ratio = best / parm
            pays.append((ratio, c, t))
            out.append(
                f"| {c} | {t} | {best / 1e3:.2f} (ep={ep}) | {v['baseline'] / 1e3:.2f} | "
                f"{v['s1'] / 1e3:.2f} ({v['baseline'] / v['s1']:.2f}x) | {v['s2'] / 1e3:.2f} ({v['baseline'] / v['s2']:.2f}x) | "
                f"{ratio:.2f}x |"
            )
    if not pays:
        fail("no layer has both an mp=1 and an mp=8 row")
    won = [p for p in pays if p[0] > 1]
    out.append("")
    out.append(
        f"S1 or S2 with mp=8 beats the fastest EP-only layout on {len(won)} of {len(pays)} (layer, machine) pairs"
        + (f": {', '.join(f'{c} on {t} ({r:.2f}x)' for r, c, t in sorted(won, reverse=True))}." if won else ".")
    )
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    text = table(load(a.csv))
    d = os.path.dirname(os.path.abspath(a.out))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".today.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, a.out)
    print(text, end="")


if __name__ == "__main__":
    main()
