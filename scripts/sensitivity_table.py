#!/usr/bin/env python3
"""The README's sensitivity table: `parmsim layer --sensitivity --json` outputs as markdown.

    scripts/sensitivity_table.py --out out/sensitivity.md out/sensitivity-*.json

Each JSON is one layer on one topology; the table gives, per input, its range, auto's speedup
over the baseline at each end, and whether auto's choice or the simulator's faster Parm
schedule flips (scripts/run-main.sh runs it; plots/make_figures.py draws the tornado).
"""
import argparse
import json
import os
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    lines = []
    for path in a.files:
        j = json.load(open(path))
        n = j["sensitivity_nominal"]
        lines.append(f"**{j['topology']}**, layer {j['layer']}: nominal {n['speedup']:.2f}x, auto picks "
                     f"{n['auto']}, the simulator finds {n['simulator_pick']} faster.\n")
        lines.append("| input | low | high | speedup at low | at high | auto low/high | faster low/high | flips |")
        lines.append("|---|---|---|---:|---:|---|---|---|")
        for r in j["sensitivity"]:
            flips = ", ".join(x for x, f in (("auto", r["flips"]), ("simulator", r["simulator_pick_flips"])) if f)
            lines.append(f"| `{r['parameter']}` | {r['low']} | {r['high']} | {r['speedup_low']:.2f}x | "
                         f"{r['speedup_high']:.2f}x | {r['auto_low']}/{r['auto_high']} | "
                         f"{r['simulator_pick_low']}/{r['simulator_pick_high']} | {flips or '-'} |")
        lines.append("")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.out)), prefix=".sensitivity.")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
