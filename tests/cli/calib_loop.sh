#!/usr/bin/env bash
# The calibration loop on the CPU executor: calibrate on a grid of small
# layers, execute a layer outside that grid, simulate it with and without the
# calibration, compare. CPU timings are noisy (8 rank threads share 2 cores):
# the test checks that the loop runs and reports, that the calibration makes
# the per-kind error smaller than the uncalibrated profile's, and bounds the
# end-to-end error loosely.
set -u
bin=$(realpath "$1")
cd "$2" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*"; echo "calib-loop: 0 passed, 1 failed"; exit 1; }
"$bin" calibrate --backend cpu --quick -o "$tmp/cal.yaml" > "$tmp/cal.txt" 2>&1 || fail "calibrate: $(cat "$tmp/cal.txt")"
grep -q "^kernels:" "$tmp/cal.yaml" && grep -q "^collectives:" "$tmp/cal.yaml" || fail "calibration file sections"
# Held out: M=64, H=128, B=2 is not in the quick grid (M 16/48, H 32/96, B 1/4).
"$bin" execute --backend cpu --schedule s1 --set B=2,M=64,H=128 --seed 9 --trace "$tmp/run.csv" > /dev/null || fail execute
[ -s "$tmp/run.csv.json" ] || fail "execute wrote no sidecar"
"$bin" compare --measured "$tmp/run.csv" -t topologies/cpu-host.yaml --calibration "$tmp/cal.yaml" -o "$tmp/compare.csv" > "$tmp/with.txt" || fail "compare with calibration"
"$bin" compare --measured "$tmp/run.csv" -t topologies/cpu-host.yaml > "$tmp/without.txt" || fail "compare without calibration"
grep -q "^end_to_end," "$tmp/compare.csv" || fail "compare CSV has no end_to_end row"
with=$(sed -n 's/^per task kind: MAPE \([0-9.]*\)%.*/\1/p' "$tmp/with.txt")
without=$(sed -n 's/^per task kind: MAPE \([0-9.]*\)%.*/\1/p' "$tmp/without.txt")
e2e=$(sed -n 's/^end to end: .*error \([-+0-9.]*\)%/\1/p' "$tmp/with.txt")
echo "calibrated MAPE ${with}%, uncalibrated ${without}%, end-to-end error ${e2e}%"
python3 -c "import sys; w,wo,e=map(float,sys.argv[1:]); sys.exit(0 if w < wo and -98 < e < 5000 else 1)" "$with" "$without" "$e2e" ||
  fail "calibration did not help or the end-to-end error is unbounded"
echo "calib-loop: 1 passed, 0 failed"
