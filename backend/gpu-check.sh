#!/usr/bin/env bash
# backend/gpu-check.sh OUTDIR: the GPU checks of the CUDA backend, on a
# machine with one or more NVIDIA GPUs (about 5 minutes on one H200):
#   1. builds parmsim with CUDA (build-gpu/);
#   2. runs the GPU correctness tests (ctest -L gpu: every schedule against the
#      dense reference, fp32 and bf16, world size 1 and loopback 4 and 8);
#   3. measures the kernels (parmsim-gpu-bench: Order/I-Order bandwidth on
#      64 MiB buffers, expert GEMMs against bare cuBLAS);
#   4. runs baseline, S1 and S2 on the paper-like layer (B=4, L=512, M=1024,
#      H=4096, E=32, k=2, f=1.2, mp=4) in loopback with 4 and 8 ranks;
# and writes the logs, the measured traces and summary.txt to OUTDIR.
# BUILD=DIR uses an existing CUDA build instead of building build-gpu/.
# Exit: 0 all passed; 1 a check failed; 2 no usable GPU (or no CUDA build).
set -u
out=${1:?usage: backend/gpu-check.sh OUTDIR}
mkdir -p "$out"
out=$(realpath "$out")
[ -n "${BUILD:-}" ] && BUILD=$(realpath "$BUILD")
cd "$(dirname "$0")/.." || exit 2
status=0
step() { echo "== $*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"

if [ -n "${BUILD:-}" ]; then
  bdir=$BUILD
else
  bdir=build-gpu
  step "build"
  bash scripts/setup.sh > "$out/setup.log" 2>&1 || echo "setup.sh failed (setup.log); building with what is there"
  if ! { cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DPARMSIM_REQUIRE_CUDA=ON -DPARMSIM_BENCH=OFF &&
    cmake --build "$bdir" -j "$(nproc)" --target parmsim parmsim-gpu-info parmsim-gpu-bench; } > "$out/build.log" 2>&1; then
    tail -30 "$out/build.log"
    echo "build failed: $out/build.log" | tee -a "$out/summary.txt"
    exit 1
  fi
fi
bin=$bdir/parmsim
if [ ! -x "$bdir/backend/parmsim-gpu-info" ]; then
  echo "no CUDA build in $bdir (configure with nvcc present)" | tee -a "$out/summary.txt"
  exit 2
fi
if ! "$bdir/backend/parmsim-gpu-info" >> "$out/summary.txt" 2>&1; then
  echo "no usable GPU: nothing measured" | tee -a "$out/summary.txt"
  exit 2
fi
cat "$out/summary.txt"

step "correctness (tests/cli/gpu.sh)"
if bash tests/cli/gpu.sh "$bin" > "$out/gpu-tests.log" 2>&1; then
  echo "correctness: passed, $(grep -c ' ok$' "$out/gpu-tests.log") schedule checks" | tee -a "$out/summary.txt"
else
  status=1
  grep -E "FAIL|error|gpu:" "$out/gpu-tests.log" | head -20 | tee -a "$out/summary.txt"
  echo "correctness: FAILED ($out/gpu-tests.log)" | tee -a "$out/summary.txt"
fi

step "kernel speed (parmsim-gpu-bench)"
"$bdir/backend/parmsim-gpu-bench" 2>&1 | tee "$out/bench.txt" >> "$out/summary.txt" || status=1

step "paper-like layer, loopback (median of 10 runs after 2 warm-ups)"
layer="B=4,L=512,M=1024,H=4096,E=32,k=2,f=1.2,mp=4"
printf '%-9s %-6s %6s %12s %10s %14s %14s\n' schedule dtype ranks layer_ms speedup compute_sum_ms comm_sum_ms \
  >> "$out/summary.txt"
for dtype in fp32 bf16; do
  for ranks in 4 8; do
    base=""
    for s in baseline s1 s2; do
      trace="$out/trace-$s-$ranks-$dtype.csv"
      if ! "$bin" execute --backend cuda --gpus "$ranks" --node-gpus 4 --set "$layer,dtype=$dtype" --schedule "$s" \
        --trace "$trace" >> "$out/execute.log" 2>&1; then
        status=1
        echo "execute $s $ranks $dtype: FAILED (see execute.log)" | tee -a "$out/summary.txt"
        continue
      fi
      read -r ms comp comm < <(bash backend/trace-summary.sh "$trace")
      [ -z "$base" ] && base=$ms
      printf '%-9s %-6s %6s %12s %10.2f %14s %14s\n' "$s" "$dtype" "$ranks" "$ms" \
        "$(awk -v b="$base" -v m="$ms" 'BEGIN { print (m > 0 ? b / m : 0) }')" "$comp" "$comm" >> "$out/summary.txt"
    done
  done
done
echo "(loopback: all ranks share one GPU, so collectives are device-to-device copies and ranks' kernels" \
  "contend for the same SMs; the layer times are not a multi-GPU prediction)" >> "$out/summary.txt"

step "calibration loop: calibrate on a grid of small layers, execute a held-out layer, compare"
if "$bin" calibrate --backend cuda --gpus 4 --quick -o "$out/cuda-calibration.yaml" > "$out/calibrate.log" 2>&1 &&
   "$bin" execute --backend cuda --gpus 4 --schedule s1 --set B=2,M=64,H=128 --trace "$out/heldout-s1.csv" \
     >> "$out/calibrate.log" 2>&1 &&
   "$bin" compare --measured "$out/heldout-s1.csv" -t topologies/cpu-host.yaml \
     --calibration "$out/cuda-calibration.yaml" -o "$out/compare-cuda.csv" > "$out/compare.txt" 2>&1; then
  tail -n 25 "$out/compare.txt" >> "$out/summary.txt"
else
  status=1
  echo "calibration loop: FAILED (see calibrate.log, compare.txt)" | tee -a "$out/summary.txt"
fi
cat "$out/summary.txt"
exit $status
