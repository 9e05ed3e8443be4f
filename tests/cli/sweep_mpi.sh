#!/usr/bin/env bash
# A sweep under `mpirun -np 2` writes the same file as one process (registered
# only in a build with MPI, -DPARMSIM_MPI=ON).
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"
spec=tests/data/small-sweep.yaml

"$bin" sweep $spec -o "$tmp/j1.csv" -j 1 -q || bad "sweep -j 1"
if command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  # OpenMPI keeps allocations in components it unloads before exit, which
  # LeakSanitizer cannot attribute; leak checking stays on for every other test.
  if ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" mpirun -np 2 "$bin" sweep $spec -o "$tmp/mpi.csv" -q > "$tmp/mpi.log" 2>&1; then
    cmp -s "$tmp/j1.csv" "$tmp/mpi.csv" && ok || bad "mpirun -np 2 result differs"
    python3 -c "import json;assert json.load(open('$tmp/mpi.csv.run.json'))['mpi_ranks']==2" && ok || bad "run.json mpi_ranks"
  else
    bad "mpirun -np 2 failed: $(tail -5 "$tmp/mpi.log")"
  fi
  # A configuration that fails on one rank (its fabric at 8 bit/s: the layer
  # would end past 2^63 ps) ends every rank with a non-zero exit, rank 0 saying
  # which rank and why, and nothing written; before, the other ranks waited in
  # the gather for ever. Configurations go to ranks in turn, so the failing
  # variant's place is the failing rank.
  for np in 2 3; do
    for pos in $(seq 0 $((np - 1))); do
      bws=(100Gbps 200Gbps 400Gbps)
      bws[$pos]=8bps
      printf 'name: fail\ntopologies:\n  - {file: %s/topologies/parm-32gpu.yaml, grid: {fabric.bandwidth: [%s]}}\ngrid: {B: [64], L: [2048]}\n' \
        "$PWD" "$(IFS=,; echo "${bws[*]:0:$np}")" > "$tmp/fail.yaml"
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 120 mpirun -np $np "$bin" sweep "$tmp/fail.yaml" \
        -o "$tmp/fail$np$pos.csv" -q > "$tmp/fail.log" 2>&1
      rc=$?
      want="time overflow"
      [ "$pos" -gt 0 ] && want="MPI rank $pos of $np: sweep row $pos "
      if [ $rc -eq 124 ]; then
        bad "mpirun -np $np, failure on rank $pos: hung (killed after 120 s)"
      elif [ $rc -ne 0 ] && grep -q "$want" "$tmp/fail.log" && [ ! -e "$tmp/fail$np$pos.csv" ] &&
        [ ! -e "$tmp/fail$np$pos.csv.partial" ] && [ "$(grep -c 'parmsim: error' "$tmp/fail.log")" = 1 ]; then
        ok
      else
        bad "mpirun -np $np, failure on rank $pos: rc $rc, $(head -c 400 "$tmp/fail.log")"
      fi
    done
  done
  # Rank 0 cannot start (its output's folder is a file): one line from rank 0, every rank ends.
  echo "a file" > "$tmp/afile"
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 120 mpirun -np 2 "$bin" sweep $spec \
    -o "$tmp/afile/dir.csv" -q > "$tmp/fail.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c 'parmsim: error' "$tmp/fail.log")" = 1 ] &&
    grep -q "afile/dir.csv" "$tmp/fail.log"; then ok; else bad "mpirun -np 2, rank 0 cannot start: rc $rc, $(head -c 400 "$tmp/fail.log")"; fi
else
  bad "mpirun not installed (scripts/setup.sh installs openmpi-bin)"
fi

echo "sweep under mpirun: $passes passed, $fails failed"
[ "$fails" = 0 ]
