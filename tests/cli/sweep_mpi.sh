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
    python3 -c "import json;assert json.load(open('$tmp/mpi.run.json'))['mpi_ranks']==2" && ok || bad "run.json mpi_ranks"
  else
    bad "mpirun -np 2 failed: $(tail -5 "$tmp/mpi.log")"
  fi
else
  bad "mpirun not installed (scripts/setup.sh installs openmpi-bin)"
fi

echo "sweep under mpirun: $passes passed, $fails failed"
[ "$fails" = 0 ]
