#!/usr/bin/env bash
# A parmsim built without MPI (-DPARMSIM_MPI=OFF), started as if by mpirun (the
# environment mpirun sets), refuses what would need MPI in one line, exit 1,
# and writes nothing; what needs no MPI still runs. Registered only in such a build.
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"
export OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0

refused() {  # refused WHAT COMMAND...: one line, "WHAT: started by mpirun, but ... built without MPI"
  local what=$1
  shift
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ "$rc" = 1 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l < "$tmp/err")" = 1 ] &&
     grep -qx "parmsim: error: $what: started by mpirun, but this parmsim was built without MPI (configure with -DPARMSIM_MPI=ON)" "$tmp/err"; then
    ok
  else
    bad "$what: exit $rc, stderr: $(cat "$tmp/err")"
  fi
}
refused sweep "$bin" sweep tests/data/small-sweep.yaml -o "$tmp/s.csv" -q
[ ! -e "$tmp/s.csv" ] && [ ! -e "$tmp/s.csv.partial" ] && ok || bad "sweep wrote output"
refused "verify --backend cuda" "$bin" verify --backend cuda --gpus 2
refused "execute --backend cuda" "$bin" execute --backend cuda --gpus 2 --trace "$tmp/t.csv"
[ ! -e "$tmp/t.csv" ] && ok || bad "execute wrote a trace"
refused "calibrate --backend cuda" "$bin" calibrate --backend cuda --gpus 2 --quick
# No MPI needed: one process, as without mpirun.
"$bin" layer -t topologies/parm-32gpu.yaml --set B=4,L=512,M=1024,H=4096,E=32,k=2,f=1.2,mp=4 > /dev/null && ok ||
  bad "layer under mpirun's environment"

echo "without MPI: $passes passed, $fails failed"
[ "$fails" = 0 ]
