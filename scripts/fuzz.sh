#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, one per input loader) with clang under
# AddressSanitizer + UndefinedBehaviorSanitizer in build-fuzz/ and runs each for
# SECONDS (default 60), as many at once as there are cores (or FUZZ_JOBS):
#   scripts/fuzz.sh [SECONDS] [TARGET...]        targets: topology graph_yaml ... (fuzz/CMakeLists.txt)
# Each starts from its committed corpus (fuzz/corpus/TARGET/) and seeds taken
# from the repository's real files; new inputs go to build-fuzz/corpus/TARGET/,
# so a run leaves the repository as it was. A finding (crash, exception other
# than UserError, sanitizer report, timeout, out of memory) is saved under
# build-fuzz/findings/TARGET/ and makes the script exit non-zero after the rest ran.
# To grow the committed corpus from a run: build-fuzz/fuzz/fuzz_T -merge=1 fuzz/corpus/T build-fuzz/corpus/T
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
bash scripts/setup.sh --fuzz
all=(topology graph_yaml graph_json layer sweep model calibration nccl_text nccl_json trace_csv trace_sidecar overlay validation_csv)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

dir=build-fuzz
mkdir -p "$dir"
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARMSIM_FUZZ=ON \
  -DPARMSIM_ENABLE_CUDA=OFF -DPARMSIM_BENCH=OFF -DBUILD_TESTING=OFF > "$dir/configure.log" 2>&1 ||
  { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" -j "$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")

# The repository's real files of each format.
seeds() {
  case "$1" in
    topology) ls topologies/*.yaml tests/data/{negative-bandwidth,nvls-pcie,unknown-gpu,unknown-key,unreachable,zero-bandwidth}.yaml ;;
    graph_yaml) ls experiments/graphs/*.yaml tests/data/{cycle,dangling}.yaml ;;
    graph_json) ls tests/data/graph.json ;;
    layer) ls tests/data/layer.yaml tests/data/layer-typo.yaml ;;
    sweep) ls experiments/{paper-grid,ablation,whatif-*}.yaml tests/data/{small-sweep,bad-sweep}.yaml ;;
    model) ls experiments/{bert,gpt2}-moe.yaml ;;
    nccl_text) ls tests/data/nccl-tests/*.txt ;;
    nccl_json) ls tests/data/nccl-tests/*.json ;;
    validation_csv) ls validation/*.csv examples/*.csv ;;
    *) ;;  # calibration, trace_csv, trace_sidecar, overlay: their seeds are in fuzz/corpus/ (written by parmsim)
  esac
}

# Input files are text: 64 KiB holds every seed. A run of one input over 10 s,
# or a process over 2 GiB, is a finding. Each libFuzzer process runs on one core:
# FUZZ_JOBS targets (default: the number of cores) run at once.
run_one() {
  local t=$1 work="$dir/corpus/$1" found="$dir/findings/$1" seed="$dir/seeds/$1"
  if UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    "$dir/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" "$seed" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$found/" \
    > "$dir/fuzz-$t.log" 2>&1; then
    echo 0 > "$dir/fuzz-$t.rc"
  else
    echo 1 > "$dir/fuzz-$t.rc"
  fi
}
jobs_max=${FUZZ_JOBS:-$(nproc)}
for t in "${targets[@]}"; do
  work="$dir/corpus/$t" found="$dir/findings/$t" seed="$dir/seeds/$t"
  rm -rf "$seed" "$dir/fuzz-$t.rc" && mkdir -p "$work" "$found" "$seed" "fuzz/corpus/$t"
  for f in $(seeds "$t"); do cp "$f" "$seed/$(echo "$f" | tr / _)"; done
  echo "fuzz: $t for ${secs}s" >&2
  run_one "$t" &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
done
wait
failed=()
for t in "${targets[@]}"; do
  if [ "$(cat "$dir/fuzz-$t.rc" 2>/dev/null)" != 0 ]; then
    failed+=("$t")
    echo "fuzz: $t:" >&2
    tail -n 60 "$dir/fuzz-$t.log" >&2
  fi
  echo -n "fuzz: $t: " >&2
  { grep -h "stat::number_of_executed_units\|stat::new_units_added" "$dir/fuzz-$t.log" || true; } | tr '\n' ' ' >&2
  echo >&2
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (inputs under $dir/findings/, logs $dir/fuzz-TARGET.log)" >&2
  exit 1
fi
echo "fuzz: no findings in ${targets[*]} (${secs}s each, $jobs_max at once)" >&2
