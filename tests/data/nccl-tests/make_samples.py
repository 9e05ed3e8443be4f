#!/usr/bin/env python3
"""Writes the nccl-tests-format samples of this folder (see README.md)."""
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def table(name, op_bin, ranks, hosts, alpha_us, bw_gbps, factor, phase):
    lines = [f"# Collective test starting: {op_bin}",
             "# nThread 1 nGpus 1 minBytes 1024 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0",
             "#", "# Using devices"]
    per = ranks // hosts
    for r in range(ranks):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on     node{r // per:02d} device {r % per:2d} "
                     f"[0x{r:02x}] NVIDIA H100 80GB HBM3")
    lines += ["#",
              "#" + " " * 62 + "out-of-place                       in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw "
              "  busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s) "
              " (GB/s)       "]
    n, i = 1024, 0
    while n <= 1 << 30:
        t = (alpha_us + n / (bw_gbps * 1e3)) * (1 + 0.015 * math.sin(1.7 * i + phase))
        algbw = n / t / 1e3
        lines.append(f"{n:12d} {n // 4:13d}     float     sum      -1 {t:8.2f} {algbw:7.2f} {algbw * factor:7.2f}      0 "
                     f"{t * 1.01:8.2f} {algbw / 1.01:7.2f} {algbw * factor / 1.01:7.2f}      0")
        n, i = n * 2, i + 1
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 100.0 ", "#"]
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines) + "\n")


def json_table(name, op_bin, ranks, hosts, alpha_us, bw_gbps, factor, phase):
    """The same figures in the layout nccl-tests writes with -J."""
    per = ranks // hosts
    results = []
    n, i = 1024, 0
    while n <= 1 << 30:
        t = (alpha_us + n / (bw_gbps * 1e3)) * (1 + 0.015 * math.sin(1.7 * i + phase))
        algbw = n / t / 1e3
        body = {"time": round(t, 3), "alg_bw": round(algbw, 3), "bus_bw": round(algbw * factor, 3), "nwrong": 0.0}
        results.append({"size": n, "count": n // 4, "type": "float", "redop": "none", "root": "    -1",
                        "out_of_place": body, "in_place": dict(body, time=round(t * 1.01, 3)),
                        "actual_iterations": 20, "experiment_name": ""})
        n, i = n * 2, i + 1
    doc = {"version": 1, "start_time": "2026-01-01 00:00:00", "args": [f"./build/{op_bin}", "-b", "1K", "-e", "1G"],
           "env": [], "nccl_version": 22700,
           "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 1024, "maximum_bytes": 1 << 30, "step_factor": 2,
                      "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                      "blocking_collectives": "false", "parallel_init": "false",
                      "devices": [{"rank": r, "group": 0, "pid": 1000 + r, "hostname": f"node{r // per:02d}",
                                   "device": r % per, "device_hex": "0000:00:00", "device_info": "NVIDIA H100 80GB HBM3"}
                                  for r in range(ranks)]},
           "results": results, "out_of_bounds": {"count": 0, "okay": "true"},
           "average_bus_bandwidth": {"bandwidth": 100.0, "okay": "unchecked"}, "errors": [],
           "end_time": "2026-01-01 00:01:00"}
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


table("all_reduce_perf.8gpu.txt", "all_reduce_perf", 8, 1, 15.0, 240.0, 2 * 7 / 8, 0.3)
json_table("alltoall_perf.16gpu-2node.json", "alltoall_perf", 16, 2, 25.0, 40.0, 15 / 16, 1.1)
table("alltoall_perf.16gpu-2node.txt", "alltoall_perf", 16, 2, 25.0, 40.0, 15 / 16, 1.1)
