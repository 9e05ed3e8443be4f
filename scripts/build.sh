#!/usr/bin/env bash
# Configures and builds parmsim into build/ (or build-asan/ with --sanitize,
# build-minimal/ with --minimal: without MPI, benchmarks and CUDA, as a machine
# without them would build it). Installs missing Debian packages first
# (scripts/setup.sh). Incremental. README.md lists the CMake options.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
dir=build
flags=(-DCMAKE_BUILD_TYPE=Release -DPARMSIM_REQUIRE_CUDA="${PARMSIM_REQUIRE_CUDA:-OFF}")
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  # The sanitizer build checks the host code; CUDA and benchmarks are left to the main build.
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARMSIM_SANITIZE=ON -DPARMSIM_ENABLE_CUDA=OFF -DPARMSIM_BENCH=OFF)
elif [ "${1:-}" = "--minimal" ]; then
  dir=build-minimal
  flags=(-DCMAKE_BUILD_TYPE=Release -DPARMSIM_MPI=OFF -DPARMSIM_BENCH=OFF -DPARMSIM_ENABLE_CUDA=OFF)
fi
mkdir -p "$dir"
cmake -S . -B "$dir" "${flags[@]}" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" -j "$(nproc)"
echo "$dir"
