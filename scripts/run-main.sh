#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs parmsim on the
# built-in topologies. Results go to out/ (override with OUT=dir).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh > /dev/null
bin=build/parmsim
out=${OUT:-out}
mkdir -p "$out"
echo "== AllReduce and AlltoAll on the paper's 32-GPU cluster (flow network)"
$bin collective -t topologies/parm-32gpu.yaml --op allreduce -b 1MiB:64MiB
$bin collective -t topologies/parm-32gpu.yaml --op alltoall -b 1MiB:64MiB
echo "== The fused AlltoAll+AllGather (SAA) of Parm S2 on the 32-GPU cluster"
$bin collective -t topologies/parm-32gpu.yaml --op saa -b 1MiB:64MiB
echo "== AllReduce inside a DGX H100 and AlltoAll across 128 H200 GPUs"
$bin collective -t topologies/dgx-h100.yaml --op allreduce -b 1MiB:256MiB
$bin collective -t topologies/h200-cluster.yaml --op alltoall -b 1MiB:64MiB
echo "== A task graph with overlapping streams (trace in $out/)"
$bin simulate -t topologies/dgx-h100.yaml -g experiments/graphs/overlap-demo.yaml \
  --trace "$out/overlap-demo.trace.json" --csv "$out/overlap-demo.csv"
