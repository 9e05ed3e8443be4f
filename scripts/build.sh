#!/usr/bin/env bash
# Configures and builds parmsim into build/ (or build-asan/ with --sanitize: ASan +
# UBSan, without MPI, benchmarks and CUDA; build-minimal/ with --minimal: a Release
# build without MPI, benchmarks and CUDA, as a machine without them would build it).
# Installs missing Debian packages first (scripts/setup.sh). Incremental. README.md
# lists the CMake options.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
dir=build
flags=(-DCMAKE_BUILD_TYPE=Release -DPARMSIM_REQUIRE_CUDA="${PARMSIM_REQUIRE_CUDA:-OFF}")
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  # The sanitizer build checks the host code; CUDA, benchmarks and MPI are left to the main
  # build. Without them it is also the build a machine without MPI, Google Benchmark or CUDA
  # makes (--minimal's options), so CI checks both with one build.
  # -O1 with line tables (-g1) is what ASan's documentation recommends for stack traces with
  # lines; it compiles ~40% faster than -O2 -g here (sim/moe/schedule_ops.cpp: 7.5 s vs 12.4 s).
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
         -DPARMSIM_SANITIZE=ON -DPARMSIM_ENABLE_CUDA=OFF -DPARMSIM_BENCH=OFF -DPARMSIM_MPI=OFF)
elif [ "${1:-}" = "--minimal" ]; then
  dir=build-minimal
  flags=(-DCMAKE_BUILD_TYPE=Release -DPARMSIM_MPI=OFF -DPARMSIM_BENCH=OFF -DPARMSIM_ENABLE_CUDA=OFF)
fi
mkdir -p "$dir"
cmake -S . -B "$dir" "${flags[@]}" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" -j "$(nproc)"
echo "$dir"
