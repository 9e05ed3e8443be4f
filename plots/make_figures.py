#!/usr/bin/python3
"""Regenerates every parmsim figure from result files (CSV/JSON) only.

    plots/make_figures.py --results out --out out/figures   (Debian python3 + python3-matplotlib)

Reads, when present in --results:
  paper-grid.csv                      speedup CDFs, box plots per parameter, S1/S2 wins,
                                      model-vs-simulator agreement, time breakdown
  whatif-*.csv                        S2 over S1 against NIC / NVLink bandwidth, clusters
  whatif-today.csv                    today's layers: TP=8 with S1/S2 against the EP-only layout
  bert-moe.json, gpt2-moe.json        end-to-end iteration breakdown (parmsim model --json)
  *.trace*.csv                        timeline (Gantt per rank and stream) of a task trace; a
                                      `layer --trace` CSV (run and pass columns) gives one per
                                      schedule, forward then backward, titled from NAME.json
                                      beside it (`layer --json`) when there is one
  compare*.csv                        simulated against measured times
                                      (columns: name, measured_us, predicted_us)
  sensitivity-*.json                  tornado: auto's speedup at each end of each input's range
                                      (parmsim layer --sensitivity --json)
A sweep's figures are titled with its name (from SWEEP.csv.run.json, else the file's)
and the layer keys every row shares. scripts/report.py draws the same figures for any
sweep CSV. A figure whose input is missing is skipped with a note, never faked.
"""
import argparse
import csv
import glob
import json
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCHED_COLORS = {"baseline": "#7f7f7f", "s1": "#1f77b4", "s2": "#d62728"}
# The sweep CSV's layer keys (sim/moe/layer_keys.cpp), in its column order, and the network.
LAYER_KEYS = ["B", "L", "M", "H", "E", "k", "f", "mp", "dtype", "ds_moe", "dispatch", "saa", "host_op", "network"]
# The keys a box plot per parameter shows, when they vary.
PARAMS = ["B", "L", "M", "H", "E", "k", "f", "mp", "dtype", "ds_moe", "dispatch", "saa", "host_op"]


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


def sweep_name(path):
    """The sweep's name: its run.json's `name` (the spec's), else the CSV's file name."""
    try:
        with open(path + ".run.json") as f:
            name = json.load(f).get("name")
        if name:
            return name
    except (OSError, ValueError):
        pass
    return os.path.splitext(os.path.basename(path))[0]


def fixed_keys(rows):
    """The layer keys with one value in every row, as 'K=V' strings, and the keys that vary."""
    fixed, varying = [], []
    for k in LAYER_KEYS:
        vals = {r[k] for r in rows if k in r}
        if len(vals) == 1:
            fixed.append(f"{k}={next(iter(vals))}")
        elif len(vals) > 1:
            varying.append(k)
    return fixed, varying


def title_of(name, rows, width=110):
    """'NAME: fixed B=4, L=512, ...; varied: M, H' wrapped to lines of about `width` characters."""
    fixed, varying = fixed_keys(rows)
    parts = [f"sweep {name}"]
    if fixed:
        parts.append("fixed " + ", ".join(fixed))
    if varying:
        parts.append("varied " + ", ".join(varying))
    text, line = [], ""
    for p in "; ".join(parts).split(" "):
        if line and len(line) + 1 + len(p) > width:
            text.append(line)
            line = p
        else:
            line = f"{line} {p}" if line else p
    text.append(line)
    return "\n".join(text)


def sorted_values(vals):
    def key(v):
        try:
            return (0, float(v.rstrip("us")))
        except ValueError:
            return (1, v)
    return sorted(vals, key=key)


def schedules(rows):
    """The schedules of a sweep in the order its rows give them (baseline first)."""
    seen = []
    for r in rows:
        if r["schedule"] not in seen:
            seen.append(r["schedule"])
    return seen


def preset(s):
    """The preset a schedule's row name comes from: s1[chunks=2] (a sweep's schedule keys) and s1* are s1."""
    return s.split("[")[0].rstrip("*")


def color(s):
    return SCHED_COLORS.get(preset(s))


def pair(rows):
    """The sweep's S1 and S2 (the first rows of each preset, under whatever schedule keys), or None."""
    names = schedules(rows)
    s1 = next((s for s in names if preset(s) == "s1"), None)
    s2 = next((s for s in names if preset(s) == "s2"), None)
    return (s1, s2) if s1 and s2 else None


def speedup_cdf(rows, out, made, title, name="speedup_cdf.png"):
    cfg = by_config(rows)
    topos = sorted({r["topology"] for r in rows})
    scheds = [s for s in schedules(rows) if preset(s) != "baseline"]
    fig, axes = plt.subplots(1, len(topos), figsize=(5 * len(topos), 3.8), squeeze=False)
    for ax, t in zip(axes[0], topos):
        for s in scheds:
            v = sorted(float(c[s]["speedup_vs_baseline"]) for c in cfg.values() if s in c and c[s]["topology"] == t)
            if v:
                ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=f"{s} ({min(v):.2f}x-{max(v):.2f}x)",
                        color=color(s))
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set_title(t)
        ax.set_xlabel("speedup over the baseline")
        ax.set_ylabel("fraction of layers")
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Simulated speedup over the baseline\n{title}", fontsize=9)
    fig.tight_layout()
    save(fig, out, name, made)


def speedup_by_param(rows, out, made, title, prefix="speedup_by_param_"):
    """Box plots of the better Parm schedule's speedup per varied parameter, one figure per topology."""
    cfg = by_config(rows)
    _, varying = fixed_keys(rows)
    params = [p for p in PARAMS if p in varying]
    if not params:
        return
    for t in sorted({r["topology"] for r in rows}):
        fig, axes = plt.subplots(1, len(params), figsize=(2.4 * len(params) + 1, 3.4), sharey=True, squeeze=False)
        for ax, p in zip(axes[0], params):
            groups = defaultdict(list)
            for c in cfg.values():
                parm = [x for s, x in c.items() if preset(s) != "baseline" and x["topology"] == t]
                if parm:
                    groups[parm[0][p]].append(max(float(x["speedup_vs_baseline"]) for x in parm))
            keys = sorted_values(groups)
            if keys:
                ax.boxplot([groups[k] for k in keys], labels=keys)
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            ax.set_xlabel(p)
            ax.tick_params(axis="x", labelsize=7)
        axes[0][0].set_ylabel("best Parm speedup")
        fig.suptitle(f"{t}: speedup by parameter\n{title}", fontsize=9)
        fig.tight_layout()
        save(fig, out, f"{prefix}{t}.png", made)


def s1_vs_s2_wins(rows, out, made, title, name="s1_vs_s2_wins.png"):
    names = pair(rows)
    if not names:
        return
    # The sweep's S1 and S2 under the names the figure uses.
    cfg = {k: {("s1" if s == names[0] else "s2" if s == names[1] else s): r for s, r in c.items()}
           for k, c in by_config(rows).items()}
    topos = sorted({r["topology"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
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
    axes[0].bar([i + 0.27 for i in x], dis, 0.27, label="the model picks the slower", color="#ff7f0e")
    axes[0].set_xticks(list(x))
    axes[0].set_xticklabels(labels, fontsize=8)
    axes[0].set_ylabel("layers")
    # Below the axes, so it covers no bar.
    axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8, frameon=False)
    axes[0].set_title("the simulator's winner and the closed form's choice", fontsize=9)
    for t, m in zip(topos, "os^vD<>"):
        xs = [float(c["s2"]["total_us"]) / float(c["s1"]["total_us"]) for c in cfg.values()
              if "s1" in c and "s2" in c and c["s2"]["topology"] == t]
        ys = [float(c["s2"]["model_us"]) / float(c["s1"]["model_us"]) for c in cfg.values()
              if "s1" in c and "s2" in c and c["s2"]["topology"] == t]
        axes[1].scatter(xs, ys, s=6, marker=m, label=t, alpha=0.6)
    axes[1].axvline(1, color="k", lw=0.5)
    axes[1].axhline(1, color="k", lw=0.5)
    axes[1].set_xlabel("simulated T_S2 / T_S1")
    axes[1].set_ylabel("closed form T_S2 / T_S1")
    axes[1].set_title("disagreements: the off-diagonal quadrants", fontsize=9)
    axes[1].legend(loc="best", fontsize=8, markerscale=2)
    fig.suptitle(f"S1 against S2\n{title}", fontsize=9)
    fig.tight_layout()
    save(fig, out, name, made)


def time_breakdown(rows, out, made, title, name="time_breakdown.png"):
    """Mean time per layer (compute on rank 0 and communication it did not hide) and bytes per GPU."""
    cfg = by_config(rows)
    topos = sorted({r["topology"] for r in rows})
    fig, axes = plt.subplots(1, len(topos), figsize=(5.2 * len(topos), 4.0), squeeze=False)
    for n, (ax, t) in enumerate(zip(axes[0], topos)):
        scheds = [s for s in schedules(rows) if any(s in c and c[s]["topology"] == t for c in cfg.values())]
        comp, exp_, intra, inter = [], [], [], []
        for s in scheds:
            rs = [c[s] for c in cfg.values() if s in c and c[s]["topology"] == t]
            gpus = [int(r["gpus"]) for r in rs]
            comp.append(statistics.fmean(float(r["compute_us"]) for r in rs) / 1e3)
            exp_.append(statistics.fmean(float(r["exposed_comm_us"]) for r in rs) / 1e3)
            intra.append(statistics.fmean(int(r["intra_node_bytes"]) / g for r, g in zip(rs, gpus)) / 2**20)
            inter.append(statistics.fmean(int(r["inter_node_bytes"]) / g for r, g in zip(rs, gpus)) / 2**20)
        ax.bar(scheds, comp, label="compute (rank 0)", color="#2ca02c")
        ax.bar(scheds, exp_, bottom=comp, label="communication not hidden", color="#9467bd")
        if n == 0:
            ax.set_ylabel("mean time per layer (ms)")
        ax2 = ax.twinx()
        ax2.plot(scheds, intra, "o-", color="#17becf", label="sent inside a node")
        ax2.plot(scheds, inter, "s-", color="#bcbd22", label="sent to other nodes")
        ax2.set_ylim(bottom=0)
        if n == len(topos) - 1:
            ax2.set_ylabel("mean MiB per GPU per layer")
        ax.set_title(t, fontsize=9)
        if n == 0:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = ax2.get_legend_handles_labels()
            fig.legend(h1 + h2, l1 + l2, loc="lower center", ncol=4, fontsize=8, frameon=False,
                       bbox_to_anchor=(0.5, -0.04))
    fig.suptitle(f"Where a layer's time goes (means over the layers)\n{title}", fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1), w_pad=3.0)
    save(fig, out, name, made)


def sweep_figures(path, out, made, prefix=""):
    """The standard figures of any sweep CSV, titled with its name and fixed keys."""
    rows = read_csv(path)
    if not rows:
        return
    title = title_of(sweep_name(path), rows)
    speedup_cdf(rows, out, made, title, f"{prefix}speedup_cdf.png")
    speedup_by_param(rows, out, made, title, f"{prefix}speedup_by_param_")
    s1_vs_s2_wins(rows, out, made, title, f"{prefix}s1_vs_s2_wins.png")
    time_breakdown(rows, out, made, title, f"{prefix}time_breakdown.png")


def whatif(path, out, made):
    rows = read_csv(path)
    cfg = by_config(rows)
    name = os.path.splitext(os.path.basename(path))[0]
    topos = []
    for c in cfg.values():
        t = c["baseline"]["topology"]
        if t not in topos:
            topos.append(t)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    if "[" in topos[0]:  # a swept topology parameter: line plot against its value
        series = defaultdict(list)
        varying = fixed_keys(rows)[1]
        for c in cfg.values():
            if "s1" not in c or "s2" not in c:
                continue
            t = c["s1"]["topology"]
            xval = t[t.index("=") + 1:-1]
            key = ", ".join(f"{k}={c['s1'][k]}" for k in varying) or "layer"
            series[key].append((xval, float(c["s1"]["total_us"]) / float(c["s2"]["total_us"])))
        for key, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=key)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xlabel(topos[0][topos[0].index("[") + 1:topos[0].index("=")])
        ax.set_ylabel("T_S1 / T_S2 (above 1: S2's overlap pays)")
        ax.legend(fontsize=8)
    else:
        for i, s in enumerate(("s1", "s2")):
            vals = [[float(c[s]["speedup_vs_baseline"]) for c in cfg.values() if s in c and c[s]["topology"] == t]
                    for t in topos]
            ax.boxplot(vals, positions=[j * 3 + i for j in range(len(topos))], widths=0.8,
                       patch_artist=True, boxprops={"facecolor": SCHED_COLORS[s]})
        ax.axhline(1.0, color="k", lw=0.8, ls="--")  # below it the schedule is slower than the baseline
        ax.set_xticks([j * 3 + 0.5 for j in range(len(topos))])
        ax.set_xticklabels(topos, fontsize=8)
        ax.set_ylabel("speedup over the baseline (S1 blue, S2 red)")
    ax.set_title(title_of(sweep_name(path), rows, width=80), fontsize=9)
    save(fig, out, f"{name}.png", made)


def today(path, out, made):
    """Today's layers (experiments/whatif-today.yaml): per layer and machine, S1 and S2 with mp=8 at
    B=8, and the mp=8 baseline, as time relative to the fastest expert-parallel-only layout (mp=1,
    B=1): the same tokens either way (scripts/today_table.py makes the table)."""
    rows = read_csv(path)
    t = defaultdict(dict)
    for r in rows:
        mp, b = int(r["mp"]), int(r["B"])
        if (mp, b) not in ((1, 1), (8, 8)):
            continue
        key = (r["case"], r["topology"])
        if mp == 1:
            if r["schedule"] == "baseline":
                t[key]["ep"] = min(t[key].get("ep", float("inf")), float(r["total_us"]))
        else:
            t[key][r["schedule"]] = float(r["total_us"])
    keys = [k for k in t if "ep" in t[k] and "s1" in t[k]]
    if not keys:
        return
    fig, ax = plt.subplots(figsize=(9, 4.2))
    xs = range(len(keys))
    for i, s in enumerate(("baseline", "s1", "s2")):
        ax.bar([x + (i - 1) * 0.27 for x in xs], [t[k][s] / t[k]["ep"] for k in keys], width=0.27,
               color=SCHED_COLORS.get(s, "0.6"), label=f"mp=8 {s}")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")  # the EP-only layout
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{c}\n{m}" for c, m in keys], fontsize=6, rotation=90)
    ax.set_ylabel("time / EP-only layout's (below 1: TP=8 pays)")
    ax.legend(fontsize=8)
    ax.set_title("Today's MoE layers on 32 GPUs: tensor parallelism (mp=8) with Parm's S1/S2 against EP only",
                 fontsize=9)
    save(fig, out, "today.png", made)


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
        ax.set_title(f"{j['model']} on {j['topology']}", fontsize=9)
        ax.set_ylabel("iteration time (ms)")
        ax.legend(fontsize=7, loc="upper right")
    save(fig, out, "models_iteration.png", made)


def layer_phase(task):
    """The phase of an MoE layer's compute task, as `layer` reports it (sim/moe/phases.hpp), from its name."""
    kind = task.split("#")[0]
    kind = kind[len("bwd_"):] if kind.startswith("bwd_") else kind
    for prefix, phase in (("gat", "gate"), ("exp_counts", "gate"), ("softmax", "gate"), ("topk", "gate"),
                          ("dispatch", "order"), ("order", "order"), ("slot", "order"), ("expert", "experts"),
                          ("combine", "iorder"), ("iorder", "iorder"), ("host", "host")):
        if kind.startswith(prefix):
            return phase
    return kind


def gantt(rows, title, out, name, made):
    lanes = sorted({(int(r["rank"]), r["stream"]) for r in rows})
    ranks = sorted({l[0] for l in lanes})
    shown = f"all {len(ranks)} ranks"
    if len(lanes) > 48:  # keep it readable: the first ranks only
        keep = ranks[:8]
        lanes = [l for l in lanes if l[0] in keep]
        shown = f"ranks 0-{keep[-1]} of {len(ranks)}"
    idx = {l: i for i, l in enumerate(lanes)}
    colors = {}
    palette = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(11, 0.3 * len(lanes) + 1.8))
    passes = defaultdict(list)
    for r in rows:
        lane = (int(r["rank"]), r["stream"])
        if lane not in idx:
            continue
        kind = r["kind"] if r["kind"] != "compute" else layer_phase(r["name"]) if "run" in r else r["op"]
        c = colors.setdefault(kind, palette(len(colors) % 20))
        s, e = float(r["start_us"]), float(r["end_us"])
        ax.barh(idx[lane], e - s, left=s, color=c, height=0.8)
        if "pass" in r:
            passes[r["pass"]].append(s)
    if "backward" in passes:  # where the backward pass starts
        ax.axvline(min(passes["backward"]), color="k", lw=0.8, ls="--")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"r{a}:{b}" for a, b in lanes], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("time (us)" + ("; forward, then backward after the dashed line" if "backward" in passes else ""))
    ax.set_title(f"{title} ({shown})", fontsize=9)
    # The legend below the axes (it would cover tasks inside them).
    height = fig.get_size_inches()[1]
    below = (0.16 * -(-len(colors) // 6) + 0.1) / height
    fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()], labels=list(colors),
               fontsize=6, ncol=6, loc="lower center", bbox_to_anchor=(0.5, 0), frameon=False)
    fig.tight_layout(rect=(0, below, 1, 1))
    save(fig, out, name, made)


def timeline(path, out, made):
    rows = read_csv(path)
    if not rows:
        return
    name = os.path.basename(path).replace(".trace", "").replace(".csv", "")
    if "run" not in rows[0]:
        gantt(rows, f"timeline: {name}", out, f"timeline_{name}.png", made)
        return
    # A layer trace: every schedule's forward and backward pass. Its layer, from `layer --json` beside it.
    about = ""
    side = os.path.join(os.path.dirname(path), name + ".json")
    if os.path.exists(side):
        try:
            with open(side) as f:
                j = json.load(f)
            about = f": layer {j['layer']} on {j['topology']} ({j['network']} network)"
        except (OSError, ValueError, KeyError):
            about = ""
    runs = defaultdict(list)
    for r in rows:
        runs[r["run"]].append(r)
    for run, rs in runs.items():
        gantt(rs, f"{run} timeline{about}", out, f"timeline_{name}_{run}.png", made)


def compare(path, out, made):
    rows = read_csv(path)
    m = [float(r["measured_us"]) for r in rows]
    p = [float(r["predicted_us"]) for r in rows]
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(m, p, s=10)
    lo, hi = min(m + p), max(m + p)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (us)")
    ax.set_ylabel("simulated (us)")
    mape = sum(abs(a - b) / a for a, b in zip(m, p)) / len(m) * 100
    name = os.path.splitext(os.path.basename(path))[0]
    ax.set_title(f"{name}: simulated against measured (MAPE {mape:.1f}%)", fontsize=9)
    if "cpu" in name:
        # The CPU executor's timings say whether the loop works, not how accurate the model is.
        ax.text(0.02, 0.98, "Measured on the CPU executor, its rank threads on shared cores:\n"
                "not a GPU. These errors test the calibration loop, not the model.",
                transform=ax.transAxes, va="top", fontsize=7, color="#b00000",
                bbox={"facecolor": "white", "edgecolor": "#b00000", "alpha": 0.9})
    save(fig, out, f"{name}.png", made)


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
    sweep_figures(pg, out, made) if os.path.exists(pg) else skipped.append("paper-grid.csv")
    for p in sorted(glob.glob(os.path.join(a.results, "whatif-*.csv"))):
        (today if os.path.basename(p) == "whatif-today.csv" else whatif)(p, out, made)
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
