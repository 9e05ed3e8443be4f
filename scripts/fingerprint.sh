#!/usr/bin/env bash
# Writes the outputs that a refactoring must leave unchanged, bit for bit, into
# DIR, with their md5 sums in DIR/SUMS; compare two builds with
#   scripts/fingerprint.sh OLD/parmsim /tmp/a && scripts/fingerprint.sh build/parmsim /tmp/b
#   diff /tmp/a/SUMS /tmp/b/SUMS
# (the paper grid, the ablation and two what-ifs, `layer` plain, with --search,
# mp=1 and its traces, an H200 layer as JSON, collectives, `validate nccl` and
# `gemm`, both models, and the help texts). Run from the repository root.
# usage: scripts/fingerprint.sh PARMSIM DIR
set -euo pipefail
bin=$(realpath "$1")
out=$2
mkdir -p "$out"
run() {  # run NAME ARGS...: stdout and stderr to DIR/NAME, exit status appended
  local name=$1
  shift
  local rc=0
  (exec -a parmsim "$bin" "$@") > "$out/$name" 2>&1 || rc=$?
  echo "exit $rc" >> "$out/$name"
  # Paths printed under DIR (layer --trace names its file) as OUT/, so two DIRs compare.
  sed -i "s|$out/|OUT/|g" "$out/$name"
}
for s in paper-grid ablation whatif-nic-bandwidth whatif-nvlink-bandwidth; do
  run "sweep-$s.log" sweep "experiments/$s.yaml" -o "$out/$s.csv" -q
done
P=topologies/parm-32gpu.yaml
run layer.txt layer -t $P
run layer-search.txt layer -t $P --search
run layer-mp1.txt layer -t $P --set mp=1
run layer-trace.txt layer -t $P --trace "$out/trace.json"
run layer-trace-csv.txt layer -t $P --schedule s2 --trace "$out/trace.csv"
run layer-h200.json layer -t topologies/h200-cluster.yaml --search --json
run layer-pcie.json layer -t topologies/pcie-8gpu.yaml --set mp=2,dtype=fp16 --json
run layer-ds.txt layer -t $P --set ds_moe=lean,dispatch=index,saa=pipelined
run coll-fattree.txt collective -t topologies/fat-tree-1024.yaml --op alltoall -b 1MiB
run coll-switch.txt collective -t topologies/switch-1024.yaml --op allreduce -b 64MiB
run coll-dgx.txt collective -t topologies/dgx-h100.yaml --op allreduce -b 1MiB
run validate-nccl.txt validate nccl
run validate-nccl-all.txt validate nccl --all
run validate-nccl-textbook.txt validate nccl --textbook
run validate-gemm.txt validate gemm validation/gemm.csv
run model-bert.txt model experiments/bert-moe.yaml
run model-gpt2.txt model experiments/gpt2-moe.yaml
run help-config.txt --help-config
run help-layer.txt layer --help
run help-sweep.txt sweep --help
(cd "$out" && md5sum $(ls | grep -v '^SUMS$') > SUMS)
echo "$out/SUMS"
