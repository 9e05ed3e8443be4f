#!/usr/bin/env bash
# The CPU-side parts of backend/gpu-check.sh: its trace summary, and what it
# does where there is no GPU (says so, exits 2, measures nothing).
set -u
bin=$(realpath "$1")
cd "$2" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
# Layer time = the largest end (30 us); compute 10 + 5 us; collectives 20 us.
cat > "$tmp/t.csv" <<'CSV'
task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops,duration_p10_us,duration_p90_us
0,gate#0,0,compute,compute,gemm,0.000000,10.000000,10.000000,0,0,9.000000,11.000000
1,ar#0,0,comm,allreduce,ar,5.000000,25.000000,20.000000,0,0,19.000000,21.000000
2,iorder#0,0,compute,compute,copy,25.000000,30.000000,5.000000,0,0,5.000000,5.000000
CSV
got=$(bash backend/trace-summary.sh "$tmp/t.csv")
if [ "$got" != "0.030 0.015 0.020" ]; then
  echo "FAIL trace-summary: $got"
  fails=$((fails + 1))
fi
if bash backend/trace-summary.sh tests/cli/gpu_check.sh > /dev/null 2>&1; then
  echo "FAIL trace-summary accepted a file that is not a trace"
  fails=$((fails + 1))
fi
# Without a GPU: exit 2 and a summary that says so.
bdir=$(dirname "$bin")
if [ -x "$bdir/backend/parmsim-gpu-info" ] && "$bdir/backend/parmsim-gpu-info" > /dev/null 2>&1; then
  echo "a GPU is here: the no-GPU path of gpu-check.sh is not exercised"
else
  BUILD=$bdir bash backend/gpu-check.sh "$tmp/out" > "$tmp/log" 2>&1
  rc=$?
  if [ $rc != 2 ] || ! grep -q "no usable GPU\|no CUDA build" "$tmp/out/summary.txt" || ls "$tmp/out"/trace-* > /dev/null 2>&1; then
    echo "FAIL gpu-check.sh without a GPU: exit $rc"
    cat "$tmp/log"
    fails=$((fails + 1))
  fi
fi
echo "gpu_check: $fails failed"
[ "$fails" = 0 ]
