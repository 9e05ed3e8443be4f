#!/usr/bin/env python3
"""The model configurations' own choices as a range: BERT-/GPT-2-MoE under each reading.

Runs `parmsim model` on each model spec with every `moe_every` and per-GPU `batch`
below, on the spec's testbed and on its variant with GPU peer-to-peer (the same file
name with `-p2p`), and writes one CSV row per run to OUT (default out/model-range.csv).
scripts/paper_tables.py prints the table from it.

    scripts/model_range.py --bin build/parmsim --out out/model-range.csv
        [--models bert-moe,gpt2-moe] [--moe-every 1,2] [--batch 2,4,8] [--no-p2p] [-j 2]

The ranges (see the comments in experiments/bert-moe.yaml and gpt2-moe.yaml):
  moe_every {1, 2}: 2 is DeepSpeed-MoE's (Megatron-DeepSpeed `--expert-interval`,
    default 2, megatron/arguments.py:614 at f4157bea); 1 (every block an MoE layer)
    is the other reading; the Parm paper's text we could read does not say.
  batch {2, 4, 8} per GPU: the same authors' ScheMoE Table 4 (B {2, 4, 8}) and
    DeepSpeed-MoE's GPT MoE examples' micro batch 4 and 8
    (examples_deepspeed/MoE/ds_pretrain_gpt_125M_MoE64.sh:113, _1.3B_MoE128.sh:113).
Columns: model, topology, p2p, moe_every, batch, moe_layers, shipped (1 for the
spec's own moe_every, batch and testbed), baseline_iteration_us, and per schedule
s1/s2: iteration_speedup_*, moe_speedup_* (the MoE layers alone).
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOE_EVERY = (1, 2)
BATCH = (2, 4, 8)
COLUMNS = ["model", "topology", "p2p", "moe_every", "batch", "moe_layers", "shipped", "baseline_iteration_us",
           "iteration_speedup_s1", "iteration_speedup_s2", "moe_speedup_s1", "moe_speedup_s2"]


def fail(msg):
    sys.exit(f"model_range.py: {msg}")


def ints(text, name):
    try:
        v = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"{name} {text!r}: expected integers separated by commas, e.g. 1,2")
    if not v or min(v) < 1:
        fail(f"{name} {text!r}: expected positive integers")
    return v


def key(text, name, path):
    m = re.search(rf"^{name}:\s*(\S+)\s*$", text, re.M)
    if not m:
        fail(f"{path}: no top-level `{name}:` line")
    return m.group(1)


def variant(text, topology, moe_every, batch):
    """The spec with its topology (absolute), moe_every and batch replaced."""
    text = re.sub(r"^topology:.*$", f"topology: {topology}", text, flags=re.M)
    text = re.sub(r"^batch:.*$", f"batch: {batch}", text, flags=re.M)
    if re.search(r"^moe_every:", text, re.M):
        return re.sub(r"^moe_every:.*$", f"moe_every: {moe_every}", text, flags=re.M)
    return text + f"moe_every: {moe_every}\n"


def run(binary, tmpdir, model, text, topology, p2p, moe_every, batch, shipped):
    fd, spec = tempfile.mkstemp(dir=tmpdir, prefix=f"{model}.", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(variant(text, topology, moe_every, batch))
    p = subprocess.run([binary, "model", spec, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{model} moe_every={moe_every} batch={batch} on {os.path.basename(topology)}: "
             f"parmsim model exited {p.returncode}: {p.stderr.strip()}")
    j = json.loads(p.stdout)
    sc = j["schedules"]
    moe_layers = sum(c["count"] for c in sc["baseline"]["components"] if c["component"] == "moe_layer")
    return {"model": model, "topology": j["topology"], "p2p": int(p2p), "moe_every": moe_every, "batch": batch,
            "moe_layers": moe_layers, "shipped": int(shipped),
            "baseline_iteration_us": f"{sc['baseline']['iteration_us']:.3f}",
            "iteration_speedup_s1": f"{sc['s1']['speedup_vs_baseline']:.4f}",
            "iteration_speedup_s2": f"{sc['s2']['speedup_vs_baseline']:.4f}",
            "moe_speedup_s1": f"{sc['s1']['moe_speedup_vs_baseline']:.4f}",
            "moe_speedup_s2": f"{sc['s2']['moe_speedup_vs_baseline']:.4f}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "parmsim"))
    ap.add_argument("--out", default="out/model-range.csv")
    ap.add_argument("--models", default="bert-moe,gpt2-moe", help="spec names under experiments/")
    ap.add_argument("--moe-every", default=",".join(map(str, MOE_EVERY)))
    ap.add_argument("--batch", default=",".join(map(str, BATCH)))
    ap.add_argument("--no-p2p", action="store_true", help="only the spec's own testbed")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    a = ap.parse_args()
    if not os.access(a.bin, os.X_OK):
        fail(f"{a.bin}: not an executable (build first: bash scripts/build.sh)")
    moe_every, batch = ints(a.moe_every, "--moe-every"), ints(a.batch, "--batch")
    jobs = []
    for model in [m for m in a.models.split(",") if m]:
        path = os.path.join(ROOT, "experiments", f"{model}.yaml")
        if not os.path.isfile(path):
            fail(f"{path}: not found (--models names specs under experiments/)")
        text = open(path).read()
        topo = os.path.normpath(os.path.join(os.path.dirname(path), key(text, "topology", path)))
        own_every = int(key(text, "moe_every", path)) if re.search(r"^moe_every:", text, re.M) else 2
        own_batch = int(key(text, "batch", path))
        topos = [(topo, "-p2p" in os.path.basename(topo))]
        if not a.no_p2p and "-p2p" not in os.path.basename(topo):
            p2p = topo[:-len(".yaml")] + "-p2p.yaml"
            if not os.path.isfile(p2p):
                fail(f"{p2p}: not found (the P2P variant of {topo}; or pass --no-p2p)")
            topos.append((p2p, True))
        for t, p2p in topos:
            for e in moe_every:
                for b in batch:
                    jobs.append((model, text, t, p2p, e, b, t == topo and e == own_every and b == own_batch))
    with tempfile.TemporaryDirectory(prefix="model-range.") as tmpdir, \
            ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        rows = list(ex.map(lambda x: run(a.bin, tmpdir, *x), jobs))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.out)), prefix=".model-range.")
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, a.out)
    print(f"model_range: {len(rows)} runs -> {a.out}")


if __name__ == "__main__":
    main()
