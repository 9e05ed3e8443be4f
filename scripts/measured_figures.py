#!/usr/bin/env python3
"""The README's measured-figures table, measured now on this machine.

Runs each command the table names (the Google Benchmark programs, /usr/bin/time
around parmsim) and writes the table to OUT (default out/measured-figures.md),
printing it too; scripts/readme_blocks.py copies it into docs/generated/ and
the README. Called by scripts/run-main.sh.

    scripts/measured_figures.py [--build build] [--out out/measured-figures.md]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run_timed(cmd, cpu=False):
    """Wall seconds and peak RSS (KiB) of one run: a clock around the run (/usr/bin/time's %e
    has 10 ms resolution, which prints start-up as 0 ms) and /usr/bin/time's %M (the rusage of
    a child forked from Python would count Python's pages); with cpu, also user + system seconds."""
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M %U %S"] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"measured_figures: {' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")
    rss, user, system = r.stderr.strip().splitlines()[-1].split()
    if cpu:
        return wall, int(rss), float(user) + float(system)
    return wall, int(rss)


def bench(binary, flt, reps=3):
    """Google Benchmark results for the filter: the median of `reps` repetitions of each case
    (this machine is shared and noisy; counters such as peak RSS come from the repetitions too)."""
    r = subprocess.run([binary, f"--benchmark_filter={flt}", "--benchmark_format=json",
                        f"--benchmark_repetitions={reps}"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"measured_figures: {binary} --benchmark_filter={flt} failed: {r.stderr.strip()[-500:]}")
    runs = json.loads(r.stdout)["benchmarks"]
    if reps <= 1:
        return runs
    return [b for b in runs if b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median"]


def ms(b, key="real_time"):
    unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
    return b[key] * unit


def cpu_wall(b):
    """'x CPU (y wall)': CPU time is what the code costs; wall time also counts other processes."""
    return f"{fmt_s(ms(b, 'cpu_time') / 1e3)} CPU ({fmt_s(ms(b) / 1e3)} wall)"


def fmt_s(seconds):
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="out/measured-figures.md")
    a = ap.parse_args()
    bin_ = os.path.join(a.build, "parmsim")
    bench_bin = os.path.join(a.build, "parmsim_bench")
    if not os.access(bench_bin, os.X_OK):
        sys.exit(f"measured_figures: no {bench_bin}: configure {a.build} with -DPARMSIM_BENCH=ON (the default)")
    tmp = tempfile.mkdtemp(prefix="figures.")
    rows = []
    try:
        # Start-up: median of 21 wall times, peak RSS of the first of them.
        for label, cmd in [("--version", [bin_, "--version"]),
                           ("collective", [bin_, "collective", "-t", "topologies/dgx-h100.yaml", "--op", "allreduce",
                                           "-b", "1MiB"])]:
            runs = [run_timed(cmd) for _ in range(21)]
            rows.append((label, statistics.median(w for w, _ in runs), max(r for _, r in runs)))
        (_, v_wall, v_rss), (_, c_wall, c_rss) = rows
        rows = [("start-up: `parmsim --version`; `parmsim collective -t topologies/dgx-h100.yaml --op allreduce -b 1MiB`",
                 f"{v_wall * 1e3:.0f} ms and {v_rss / 1024:.0f} MiB peak RSS; {c_wall * 1e3:.0f} ms and "
                 f"{c_rss / 1024:.0f} MiB (median of 21)",
                 '`/usr/bin/time -f "%e s %M KiB" build/parmsim --version`')]

        eq = {b["run_name"]: b for b in bench(bench_bin, "EventQueue")}
        rows.append(("event queue, schedule+pop with 100,000 pending / with 64 pending",
                     f"{eq['BM_EventQueue/100000']['items_per_second'] / 1e6:.1f} M/s / "
                     f"{eq['BM_EventQueue/64']['items_per_second'] / 1e6:.1f} M/s",
                     "`build/parmsim_bench --benchmark_filter=EventQueue`"))

        fa = bench(bench_bin, "FatTreeAlltoAll")[0]
        rows.append(("AlltoAll (NCCL send/recv with PXN), 64 MiB per GPU, 1024 GPUs of the fat-tree, `flow` "
                     f"({int(fa['transfers']):,} transfers)",
                     f"{cpu_wall(fa)}, {fa['peak_rss_MiB']:.0f} MiB peak RSS",
                     "`build/parmsim_bench --benchmark_filter=FatTreeAlltoAll`"))

        sw = bench(bench_bin, "Switch1024")
        rows.append(("1024 GPUs on one switch (`topologies/switch-1024.yaml`), 64 MiB per GPU: direct AlltoAll / "
                     "textbook flat ring AllReduce / AllReduce with NCCL's choice",
                     f"{cpu_wall(sw[0])} ({sw[0]['peak_rss_MiB']:.0f} MiB) / {cpu_wall(sw[1])} / {cpu_wall(sw[2])}",
                     "`build/parmsim_bench --benchmark_filter=Switch1024`"))

        la = bench(bench_bin, "LayerAll")
        rows.append(("one layer, baseline + S1 + S2, forward + backward, `flow`, 32-GPU cluster: the rate memo "
                     "holding earlier layers' sets of flows (a sweep) / emptied first (one layer alone) / off",
                     " / ".join(f"{ms(b, 'cpu_time'):.1f} ms CPU ({ms(b):.1f} ms wall)" for b in la),
                     "`build/parmsim_bench --benchmark_filter=LayerAll`"))

        def rate_range(flt):
            rates = sorted(b["items_per_second"] / 1e6 for b in bench(bench_bin, flt))
            return f"{rates[0]:.2f}-{rates[-1]:.2f} M/s"
        rows.append(("closed-form layer evaluations (one schedule, forward + backward; S1 and S2): "
                     "864 distinct layer shapes in turn / one shape",
                     f"{rate_range('ModelLayerEvalDistinct')} / {rate_range('ModelLayerEval/')}",
                     "`build/parmsim_bench --benchmark_filter=ModelLayer`"))

        wall, rss, cpu = run_timed([bin_, "sweep", "experiments/paper-grid.yaml", "-o", os.path.join(tmp, "pg.csv"),
                                    "-q"], cpu=True)
        rows.append((f"the 1296-layer grid, 3 schedules, `flow`, {os.cpu_count()} threads",
                     f"{wall:.1f} s wall ({cpu:.1f} s CPU), {rss / 1024:.0f} MiB peak RSS",
                     "`/usr/bin/time -v build/parmsim sweep experiments/paper-grid.yaml -o out/pg.csv -q`"))

        # One layer on 1024 GPUs, all three schedules (docs/performance.md, "Symmetry"): median of 3.
        layer = [bin_, "layer", "-t", "topologies/fat-tree-1024.yaml", "--set",
                 "B=8,L=2048,M=4096,H=14336,E=1024,k=2,f=1.25,mp=8,dtype=bf16"]
        runs = [run_timed(layer, cpu=True) for _ in range(3)]
        rows.append(("one layer on 1024 GPUs (fat-tree, E=1024, mp=8), baseline + S1 + S2, forward + backward, `flow`, "
                     "median of 3",
                     f"{statistics.median(r[0] for r in runs):.1f} s wall ({statistics.median(r[2] for r in runs):.1f} s "
                     f"CPU), {max(r[1] for r in runs) / 1024:.0f} MiB peak RSS",
                     "`/usr/bin/time -v build/parmsim layer -t topologies/fat-tree-1024.yaml --set "
                     "B=8,L=2048,M=4096,H=14336,E=1024,k=2,f=1.25,mp=8,dtype=bf16`"))

        wall, rss = run_timed([bin_, "collective", "-t", "topologies/fat-tree-1024.yaml", "--op", "allreduce", "-b",
                               "64MiB"])
        rows.append(("AllReduce of 64 MiB over 1024 GPUs (fat-tree), NCCL's choice, `flow`",
                     f"{fmt_s(wall)} wall, {rss / 1024:.0f} MiB peak RSS",
                     "`/usr/bin/time -v build/parmsim collective -t topologies/fat-tree-1024.yaml --op allreduce -b 64MiB`"))

        wall, _ = run_timed([bin_, "validate", "nccl"])
        rows.append(("`parmsim validate nccl` (each row simulated on its own generated cluster)", f"{fmt_s(wall)} wall",
                     "`time build/parmsim validate nccl`"))

        gpu_bench = os.path.join(a.build, "backend", "parmsim-gpu-bench")
        have_gpu = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
        if have_gpu and os.access(gpu_bench, os.X_OK):
            r = subprocess.run([gpu_bench], capture_output=True, text=True)
            fig = "; ".join(l.strip() for l in r.stdout.splitlines() if l.strip())[:400] if r.returncode == 0 \
                else f"failed: {r.stderr.strip()[-200:]}"
        else:
            fig = "not measured: no GPU here"
        rows.append(("GPU kernels: Order / I-Order bandwidth on 64 MiB, expert GEMMs against bare cuBLAS", fig,
                     "`build/backend/parmsim-gpu-bench` (on a GPU machine)"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    text = "| what | figure | command |\n|---|---|---|\n" + "".join(f"| {w} | {f} | {c} |\n" for w, f, c in rows)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    fd, tmpf = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.out)), prefix=".measured-figures.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmpf, a.out)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
