#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
#   scripts/test.sh              the Release build (build/)
#   scripts/test.sh --sanitize   the same tests under ASan + UBSan (build-asan/)
#   scripts/test.sh --minimal    the tests of a build without MPI, benchmarks and CUDA (build-minimal/)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(bash scripts/build.sh "$@" | tail -n 1)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
