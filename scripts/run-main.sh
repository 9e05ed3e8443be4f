#!/usr/bin/env bash
# The main job: installs what is missing, builds, sweeps the 1296-layer paper
# grid and the what-if specs, runs the BERT-MoE and GPT-2-MoE models (and their
# moe_every/batch range) and DeepSeek-V3's pipelined iteration, writes a layer
# timeline, and draws every figure. Results in out/ (override: OUT=dir), and
# nowhere else: the tracked files stay as they are. It then says which of the
# docs' generated blocks differ from this run's; `scripts/readme_blocks.py
# --update out` copies them into docs/ (the explicit refresh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh > /dev/null
bin=build/parmsim
out=${OUT:-out}
mkdir -p "$out"
echo "== 1296-layer paper grid (2 testbeds x 648 layers, baseline/S1/S2, flow network)"
$bin sweep experiments/paper-grid.yaml -o "$out/paper-grid.csv"
/usr/bin/python3 scripts/report.py "$out/paper-grid.csv" -o "$out/paper-grid-report"
echo "== ablation: the paper grid under each baseline, dispatch and SAA model (10368 layers)"
$bin sweep experiments/ablation.yaml -o "$out/ablation.csv"
for s in whatif-clusters whatif-nic-bandwidth whatif-nvlink-bandwidth; do
  echo "== what-if: $s"
  $bin sweep experiments/$s.yaml -o "$out/$s.csv"
done
echo "== what-if today: five published MoE layers, expert-parallel only against TP=8 with S1/S2"
$bin sweep experiments/whatif-today.yaml -o "$out/whatif-today.csv"
/usr/bin/python3 scripts/today_table.py --csv "$out/whatif-today.csv" --out "$out/today.md"
for m in bert-moe gpt2-moe; do
  echo "== model: $m"
  $bin model experiments/$m.yaml
  $bin model experiments/$m.yaml --json > "$out/$m.json.tmp" && mv "$out/$m.json.tmp" "$out/$m.json"
done
echo "== model: deepseek-v3 (2048 H800: PP 16 under DualPipe's bubble, EP 64, MLA, MTP; docs/models.md; 0.1 s)"
$bin model experiments/deepseek-v3.yaml
$bin model experiments/deepseek-v3.yaml --json > "$out/deepseek-v3.json.tmp" && mv "$out/deepseek-v3.json.tmp" "$out/deepseek-v3.json"
echo "== the models' own choices as a range: moe_every {1, 2} x batch {2, 4, 8}, without and with GPU P2P"
/usr/bin/python3 scripts/model_range.py --bin "$bin" --out "$out/model-range.csv"
echo "== the paper-like layer on the 32-GPU cluster, with every schedule's timeline (S1's drawn in figures/)"
$bin layer -t topologies/parm-32gpu.yaml --set B=4,L=512,M=1024,H=4096,E=32,k=2,f=1.2,mp=4 --search
$bin layer -t topologies/parm-32gpu.yaml --set B=4,L=512,M=1024,H=4096,E=32,k=2,f=1.2,mp=4 --json \
  --trace "$out/layer.trace.csv" > "$out/layer.json.tmp"
mv "$out/layer.json.tmp" "$out/layer.json"
echo "== what decides the verdict: the paper-like layer under each uncertain input (layer --sensitivity)"
L=B=4,L=512,M=1024,H=4096,E=32,k=2,f=1.2,mp=4
for t in parm-32gpu pcie-8gpu; do
  $bin layer -t topologies/$t.yaml --set $L --sensitivity --json > "$out/sensitivity-$t.json.tmp"
  mv "$out/sensitivity-$t.json.tmp" "$out/sensitivity-$t.json"
done
$bin layer -t topologies/dgx-h100.yaml --topo-set nodes=4 --set B=4,L=512,M=1024,H=4096,E=32,k=2,f=1.2,mp=8,dtype=bf16 --sensitivity --json \
  > "$out/sensitivity-dgx-h100-4nodes.json.tmp"
mv "$out/sensitivity-dgx-h100-4nodes.json.tmp" "$out/sensitivity-dgx-h100-4nodes.json"
/usr/bin/python3 scripts/sensitivity_table.py --out "$out/sensitivity.md" "$out"/sensitivity-parm-32gpu.json \
  "$out"/sensitivity-pcie-8gpu.json "$out"/sensitivity-dgx-h100-4nodes.json
/usr/bin/python3 scripts/sensitivity_table.py --out "$out/sensitivity-testbeds.md" "$out"/sensitivity-parm-32gpu.json \
  "$out"/sensitivity-pcie-8gpu.json
$bin simulate -t topologies/dgx-h100.yaml -g experiments/graphs/overlap-demo.yaml \
  --trace "$out/overlap-demo.trace.json" --csv "$out/overlap-demo.trace.csv" > /dev/null
echo "== calibration loop on the CPU executor: calibrate, execute a held-out layer, compare"
$bin calibrate --backend cpu -o "$out/cpu-calibration.yaml" > /dev/null
$bin execute --backend cpu --schedule s1 --set B=2,M=64,H=128 --trace "$out/cpu-exec.csv"
$bin compare --measured "$out/cpu-exec.csv" -t topologies/cpu-host.yaml --calibration "$out/cpu-calibration.yaml" \
  -o "$out/compare-cpu.csv"
echo "== GEMM model against published measurements"
$bin validate gemm validation/gemm.csv | tail -n 12
echo "== whole MoE layers against published measurements"
$bin validate moe validation/moe.csv | sed -n '/^MAPE/,$p'
echo "== collective model (NCCL's choice) against published nccl-tests runs"
$bin validate nccl validation/nccl-tests.csv | sed -n '/^MAPE/,$p' 
echo "== the paper side by side, and the ablation (also in $out/paper-comparison.md)"
/usr/bin/python3 scripts/paper_tables.py --results "$out"
echo "== measured figures on this machine (also in $out/measured-figures.md)"
/usr/bin/python3 scripts/measured_figures.py --build build --out "$out/measured-figures.md"
echo "== figures"
/usr/bin/python3 plots/make_figures.py --results "$out" --out "$out/figures"
echo "== the docs' generated blocks against this run (nothing written; scripts/readme_blocks.py --update $out refreshes them)"
/usr/bin/python3 scripts/readme_blocks.py --compare "$out"
echo "== summary: speedup over the baseline per testbed (simulated)"
/usr/bin/python3 - "$out/paper-grid.csv" <<'PY'
import csv, sys
from collections import defaultdict
v = defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    if r["schedule"] != "baseline":
        v[(r["topology"], r["schedule"])].append(float(r["speedup_vs_baseline"]))
for (t, s), x in sorted(v.items()):
    x.sort()
    print(f"  {t:<14} {s}: {x[0]:.2f}x .. {x[-1]:.2f}x (median {x[len(x)//2]:.2f}x, {len(x)} layers)")
PY
