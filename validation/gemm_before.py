#!/usr/bin/env python3
"""The GEMM cost model parmsim had before the tile-and-wave model (commit b55d5a2,
sim/compute/gpu_profile.cpp), run on validation/gemm.csv, for the before/after figure
in validation/README.md. Independent of the C++ build: it restates that formula,

    time = launch + max(flops / (peak(dtype) * eff), bytes / (hbm * mem_eff))
    eff = eff_max * flops / (flops + f_half),  mem_eff = 0.85 * bytes / (bytes + b_half)

with that commit's profile figures, and prints MAPE overall, by GPU and by dtype.

    validation/gemm_before.py [validation/gemm.csv]
"""
import csv
import sys
from collections import defaultdict

# name: (peak fp32, fp16, bf16 FLOP/s, HBM B/s, launch s, eff_max, f_half, b_half), from b55d5a2.
OLD = {
    "h100": (67e12, 989e12, 989e12, 3.35e12, 4e-6, 0.75, 8e9, 8e6),
    "h200": (67e12, 989e12, 989e12, 4.8e12, 4e-6, 0.75, 8e9, 8e6),
    "a100": (19.5e12, 312e12, 312e12, 2.039e12, 4e-6, 0.8, 4e9, 4e6),
    "rtx2080ti": (13.45e12, 53.8e12, 0, 616e9, 5e-6, 0.8, 1e9, 1e6),
    "rtx_a6000": (38.7e12, 154.8e12, 154.8e12, 768e9, 5e-6, 0.8, 2e9, 2e6),
    "b200": (80e12, 2250e12, 2250e12, 8e12, 4e-6, 0.75, 16e9, 16e6),
}
BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def old_time(gpu, dtype, m, n, k, batch):
    p32, p16, pbf, hbm, launch, eff_max, f_half, b_half = OLD[gpu]
    peak = {"fp32": p32, "fp16": p16, "bf16": pbf}[dtype]
    flops = 2.0 * m * n * k * batch
    byts = (m * k + k * n + m * n) * batch * BYTES[dtype]
    math = flops / (peak * eff_max * flops / (flops + f_half))
    mem = byts / (hbm * 0.85 * byts / (byts + b_half))
    return launch + max(math, mem)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "validation/gemm.csv"
    with open(path) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    err = defaultdict(list)
    for r in rows:
        # b55d5a2 had no fp8 and no H800 profile: those rows (DeepGEMM's) have no "before".
        if r["gpu"] not in OLD or r["dtype"] not in BYTES:
            continue
        m, n, k, b = (int(r[x]) for x in ("m", "n", "k", "batch"))
        meas = float(r["measured_us"]) * 1e-6 if r["measured_us"] else 2.0 * m * n * k * b / (float(r["measured_tflops"]) * 1e12)
        e = abs(old_time(r["gpu"], r["dtype"], m, n, k, b) / meas - 1)
        for key in ("overall", r["gpu"], r["dtype"]):
            err[key].append(e)
    for key, v in err.items():
        print(f"MAPE {key:<10} {100 * sum(v) / len(v):6.1f}% ({len(v)} rows)")


if __name__ == "__main__":
    main()
