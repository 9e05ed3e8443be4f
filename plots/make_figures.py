#!/usr/bin/python3
"""Regenerates every parmsim figure from result files (CSV/JSON) only.

    plots/make_figures.py --results out --out out/figures   (Debian python3 + python3-matplotlib)

Reads, when present in --results:
  paper-grid.csv                      speedup CDFs, box plots per parameter, S1/S2 wins,
                                      model-vs-simulator agreement, time breakdown
  whatif-*.csv                        S2 over S1 against NIC / NVLink bandwidth, clusters
  bert-moe.json, gpt2-moe.json        end-to-end iteration breakdown (parmsim model --json)
  *.trace.csv                         timeline (Gantt per rank and stream) of a task trace
  compare*.csv                        simulated against measured times
                                      (columns: name, measured_us, predicted_us)
  sensitivity-*.json                  tornado: auto's speedup at each end of each input's range
                                      (parmsim layer --sensitivity --json)
A figure whose input is missing is skipped with a note, never faked.
"""
import argparse
import csv
import glob
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCHED_COLORS = {"baseline": "#7f7f7f", "s1": "#1f77b4", "s2": "#d62728"}


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def save(fig, out, name, made):
    path = os.path.join(out, name)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)
    plt.close(fig)
    made.append(path)


def by_config(rows):
    cfg = defaultdict(dict)
    for r in rows:
        cfg[r["config"]][r["schedule"]] = r
    return cfg


def paper_grid(path, out, made):
    rows = read_csv(path)
    cfg = by_config(rows)
    topos = sorted({r["topology"] for r in rows})

    # 1. Speedup CDF per testbed.
    fig, axes = plt.subplots(1, len(topos), figsize=(5 * len(topos), 3.6), squeeze=False)
    for ax, t in zip(axes[0], topos):
        for s in ("s1", "s2"):
            v = sorted(float(c[s]["speedup_vs_baseline"]) for c in cfg.values() if s in c and c[s]["topology"] == t)
            if v:
                ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=f"{s} ({min(v):.2f}x-{max(v):.2f}x)",
                        color=SCHED_COLORS[s])
        ax.axvline(1.0, color="k", lw=0.5)
        ax.set_title(t)
        ax.set_xlabel("speedup over DeepSpeed-MoE baseline")
        ax.set_ylabel("fraction of layers")
        ax.legend()
    fig.suptitle("Simulated speedup across the paper grid")
    save(fig, out, "speedup_cdf.png", made)

    # 2. Box plots of the better Parm schedule's speedup per parameter.
    params = ["B", "L", "M", "H", "k", "f", "mp"]
    for t in topos:
        fig, axes = plt.subplots(1, len(params), figsize=(2.4 * len(params), 3.2), sharey=True)
        for ax, p in zip(axes, params):
            groups = defaultdict(list)
            for c in cfg.values():
                if "s1" in c and "s2" in c and c["s1"]["topology"] == t:
                    best = max(float(c["s1"]["speedup_vs_baseline"]), float(c["s2"]["speedup_vs_baseline"]))
                    groups[c["s1"][p]].append(best)
            keys = sorted(groups, key=float)
            ax.boxplot([groups[k] for k in keys], labels=keys)
            ax.set_xlabel(p)
        axes[0].set_ylabel("best Parm speedup")
        fig.suptitle(f"{t}: speedup by parameter")
        save(fig, out, f"speedup_by_param_{t}.png", made)

    # 3. Where S1 or S2 wins, and where the model's choice disagrees.
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels, s1w, s2w, dis = [], [], [], []
    for t in topos:
        n1 = n2 = d = 0
        for c in cfg.values():
            if "s1" not in c or "s2" not in c or c["s1"]["topology"] != t:
                continue
            sim = "s2" if float(c["s2"]["total_us"]) < float(c["s1"]["total_us"]) else "s1"
            model = "s2" if c["s2"]["chosen_by_model"] == "1" else "s1"
            n1 += sim == "s1"
            n2 += sim == "s2"
            d += sim != model
        labels.append(t)
        s1w.append(n1)
        s2w.append(n2)
        dis.append(d)
    x = range(len(labels))
    axes[0].bar([i - 0.27 for i in x], s1w, 0.27, label="S1 faster", color=SCHED_COLORS["s1"])
    axes[0].bar(list(x), s2w, 0.27, label="S2 faster", color=SCHED_COLORS["s2"])
    axes[0].bar([i + 0.27 for i in x], dis, 0.27, label="model picks the slower", color="#ff7f0e")
    axes[0].set_xticks(list(x))
    axes[0].set_xticklabels(labels)
    axes[0].set_ylabel("layers")
    axes[0].legend()
    axes[0].set_title("simulator's winner vs the alpha-beta choice")
    for t, m in zip(topos, "os"):
        xs = [float(c["s2"]["total_us"]) / float(c["s1"]["total_us"]) for c in cfg.values()
              if "s2" in c and c["s2"]["topology"] == t]
        ys = [float(c["s2"]["model_us"]) / float(c["s1"]["model_us"]) for c in cfg.values()
              if "s2" in c and c["s2"]["topology"] == t]
        axes[1].scatter(xs, ys, s=6, marker=m, label=t, alpha=0.6)
    axes[1].axvline(1, color="k", lw=0.5)
    axes[1].axhline(1, color="k", lw=0.5)
    axes[1].set_xlabel("simulated T_S2 / T_S1")
    axes[1].set_ylabel("model T_S2 / T_S1")
    axes[1].set_title("disagreements: off-diagonal quadrants")
    axes[1].legend()
    save(fig, out, "s1_vs_s2_wins.png", made)

    # 4. Time breakdown per schedule (mean over layers): compute vs exposed communication.
    fig, axes = plt.subplots(1, len(topos), figsize=(5 * len(topos), 3.6), squeeze=False)
    for ax, t in zip(axes[0], topos):
        scheds = ["baseline", "s1", "s2"]
        comp, exp_, intra, inter = [], [], [], []
        for s in scheds:
            rs = [c[s] for c in cfg.values() if s in c and c[s]["topology"] == t]
            comp.append(sum(float(r["compute_us"]) for r in rs) / len(rs) / 1e3)
            exp_.append(sum(float(r["exposed_comm_us"]) for r in rs) / len(rs) / 1e3)
            intra.append(sum(int(r["intra_node_bytes"]) for r in rs) / len(rs) / 2**30)
            inter.append(sum(int(r["inter_node_bytes"]) for r in rs) / len(rs) / 2**30)
        ax.bar(scheds, comp, label="compute (rank 0)", color="#2ca02c")
        ax.bar(scheds, exp_, bottom=comp, label="exposed communication", color="#9467bd")
        ax.set_ylabel("mean time per layer (ms)")
        ax2 = ax.twinx()
        ax2.plot(scheds, intra, "o-", color="#17becf", label="intra-node GiB")
        ax2.plot(scheds, inter, "s-", color="#bcbd22", label="inter-node GiB")
        ax2.set_ylabel("mean bytes moved per layer (GiB, all GPUs)")
        ax.set_title(t)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7)
    save(fig, out, "time_breakdown.png", made)


def whatif(path, out, made):
    rows = read_csv(path)
    cfg = by_config(rows)
    name = os.path.splitext(os.path.basename(path))[0]
    topos = []
    for c in cfg.values():
        t = c["baseline"]["topology"]
        if t not in topos:
            topos.append(t)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    if "[" in topos[0]:  # a swept topology parameter: line plot against its value
        series = defaultdict(list)
        for c in cfg.values():
            if "s1" not in c or "s2" not in c:
                continue
            t = c["s1"]["topology"]
            xval = t[t.index("=") + 1:-1]
            key = f"M={c['s1']['M']}"
            series[key].append((xval, float(c["s1"]["total_us"]) / float(c["s2"]["total_us"])))
        for key, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=key)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_xlabel(topos[0][topos[0].index("[") + 1:topos[0].index("=")])
        ax.set_ylabel("T_S1 / T_S2 (above 1: S2's overlap pays)")
    else:
        for i, s in enumerate(("s1", "s2")):
            vals = [[float(c[s]["speedup_vs_baseline"]) for c in cfg.values() if s in c and c[s]["topology"] == t]
                    for t in topos]
            ax.boxplot(vals, positions=[j * 3 + i for j in range(len(topos))], widths=0.8,
                       patch_artist=True, boxprops={"facecolor": SCHED_COLORS[s]})
        ax.set_xticks([j * 3 + 0.5 for j in range(len(topos))])
        ax.set_xticklabels(topos, fontsize=8)
        ax.set_ylabel("speedup over baseline (S1 blue, S2 red)")
    ax.set_title(name)
    ax.legend() if ax.get_legend_handles_labels()[0] else None
    save(fig, out, f"{name}.png", made)


def models(paths, out, made):
    fig, axes = plt.subplots(1, len(paths), figsize=(5.5 * len(paths), 3.8), squeeze=False)
    for ax, p in zip(axes[0], paths):
        with open(p) as f:
            j = json.load(f)
        scheds = list(j["schedules"])
        comps = [c["component"] for c in j["schedules"][scheds[0]]["components"]]
        bottom = [0.0] * len(scheds)
        for comp in comps:
            vals = [next(c["total_us"] for c in j["schedules"][s]["components"] if c["component"] == comp) / 1e3
                    for s in scheds]
            ax.bar(scheds, vals, bottom=bottom, label=comp)
            bottom = [a + b for a, b in zip(bottom, vals)]
        for i, s in enumerate(scheds):
            ax.text(i, bottom[i], f"{j['schedules'][s]['speedup_vs_baseline']:.2f}x", ha="center", va="bottom")
        ax.set_title(f"{j['model']} on {j['topology']}")
        ax.set_ylabel("iteration time (ms)")
        ax.legend(fontsize=7)
    save(fig, out, "models_iteration.png", made)


def timeline(path, out, made):
    rows = read_csv(path)
    lanes = sorted({(int(r["rank"]), r["stream"]) for r in rows})
    if len(lanes) > 48:  # keep it readable: the first ranks only
        keep = sorted({l[0] for l in lanes})[:8]
        lanes = [l for l in lanes if l[0] in keep]
    idx = {l: i for i, l in enumerate(lanes)}
    colors = {}
    palette = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(11, 0.3 * len(lanes) + 1.5))
    for r in rows:
        lane = (int(r["rank"]), r["stream"])
        if lane not in idx:
            continue
        kind = r["kind"] if r["kind"] != "compute" else r["op"]
        c = colors.setdefault(kind, palette(len(colors) % 20))
        s, e = float(r["start_us"]), float(r["end_us"])
        ax.barh(idx[lane], e - s, left=s, color=c, height=0.8)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"r{a}:{b}" for a, b in lanes], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("time (us)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()], labels=list(colors),
              fontsize=6, ncol=4, loc="upper right")
    name = os.path.basename(path).replace(".trace", "").replace(".csv", "")
    ax.set_title(f"timeline: {name}")
    save(fig, out, f"timeline_{name}.png", made)


def compare(path, out, made):
    rows = read_csv(path)
    m = [float(r["measured_us"]) for r in rows]
    p = [float(r["predicted_us"]) for r in rows]
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.scatter(m, p, s=10)
    lo, hi = min(m + p), max(m + p)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (us)")
    ax.set_ylabel("simulated (us)")
    mape = sum(abs(a - b) / a for a, b in zip(m, p)) / len(m) * 100
    ax.set_title(f"simulated vs measured (MAPE {mape:.1f}%)")
    save(fig, out, f"{os.path.splitext(os.path.basename(path))[0]}.png", made)


def tornado(path, out, made):
    j = json.load(open(path))
    rows = j["sensitivity"]
    nominal = j["sensitivity_nominal"]["speedup"]
    # Widest swing on top.
    rows = sorted(rows, key=lambda r: abs(r["speedup_high"] - r["speedup_low"]))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    for i, r in enumerate(rows):
        lo, hi = r["speedup_low"], r["speedup_high"]
        ax.barh(i, lo - nominal, left=nominal, color="#1f77b4", alpha=0.8)
        ax.barh(i, hi - nominal, left=nominal, color="#d62728", alpha=0.8)
        mark = " (flips)" if r["flips"] or r["simulator_pick_flips"] else ""
        ax.text(max(lo, hi, nominal), i, f" {r['low']} .. {r['high']}{mark}", va="center", fontsize=7)
    ax.axvline(nominal, color="black", lw=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["parameter"] for r in rows], fontsize=8)
    ax.set_xlabel(f"auto's speedup over the baseline (nominal {nominal:.2f}x; blue: low end, red: high end)")
    ax.set_title(f"What moves the verdict: {j['topology']}, {j['layer']}", fontsize=9)
    name = "tornado-" + os.path.basename(path)[len("sensitivity-"):-len(".json")] + ".png"
    save(fig, out, name, made)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="out", help="folder with parmsim outputs (default: out)")
    ap.add_argument("--out", default=None, help="folder for the PNG figures (default: RESULTS/figures)")
    a = ap.parse_args()
    out = a.out or os.path.join(a.results, "figures")
    os.makedirs(out, exist_ok=True)
    made, skipped = [], []
    pg = os.path.join(a.results, "paper-grid.csv")
    paper_grid(pg, out, made) if os.path.exists(pg) else skipped.append("paper-grid.csv")
    for p in sorted(glob.glob(os.path.join(a.results, "whatif-*.csv"))):
        whatif(p, out, made)
    mj = [p for p in (os.path.join(a.results, "bert-moe.json"), os.path.join(a.results, "gpt2-moe.json"))
          if os.path.exists(p)]
    models(mj, out, made) if mj else skipped.append("bert-moe.json/gpt2-moe.json")
    traces = sorted(glob.glob(os.path.join(a.results, "*.trace*.csv")))
    for p in traces:
        timeline(p, out, made)
    if not traces:
        skipped.append("*.trace.csv")
    comps = sorted(glob.glob(os.path.join(a.results, "compare*.csv")))
    for p in comps:
        compare(p, out, made)
    if not comps:
        skipped.append("compare*.csv (from the calibration comparison)")
    sens = sorted(glob.glob(os.path.join(a.results, "sensitivity-*.json")))
    for p in sens:
        tornado(p, out, made)
    if not sens:
        skipped.append("sensitivity-*.json (parmsim layer --sensitivity --json)")
    for m in made:
        print(f"wrote {m}")
    for s in skipped:
        print(f"skipped: no {s} in {a.results}", file=sys.stderr)
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
