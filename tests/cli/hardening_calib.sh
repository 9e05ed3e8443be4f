#!/usr/bin/env bash
# Calibration honesty (issue 30, classes J and K): nccl-tests outputs holding
# several tables, sizes measured twice, times that are no measurement, machine
# fits that end at a bound of their search range or make the worst row worse,
# and time overflows that must name what caused them. Each refusal: exit status
# 1, one line naming the file:line (or option, key, row) and nothing written.
set -u
source "$(dirname "$0")/lib.sh"
cases=0

. "$(dirname "$(realpath "$0")")/refusal.sh"
needless() { check_refusal 107 "$@"; }
# lacks NAME "FRAGMENT" TEXT: TEXT does not hold FRAGMENT.
lacks() { if [[ $3 == *"$2"* ]]; then bad "$1: holds '$2': $3"; else ok; fi; }

D=tests/data
N=$D/nccl-tests
AR=$N/all_reduce_perf.8gpu.txt        # 8 ranks, one host
AG=$N/all_gather_perf.h100-4gpu.txt   # 4 ranks, 3 rows of 0 B (nccl-tests prints them; not a repeat)
RS=$N/reduce_scatter_perf.h100-4gpu.txt
AR4=$N/all_reduce_perf.h100-4gpu.txt
J=$N/alltoall_perf.16gpu-2node.json
T=topologies/dgx-h100.yaml
CAL="$bin calibrate -o $tmp/cal.yaml --import-nccl-tests"
line_of() { grep -n "$2" "$1" | head -1 | cut -d: -f1; }  # the first line of FILE matching PATTERN

# ---- several tables in one file: several entries ---------------------------
cat $AR $AG > "$tmp/two.txt"
second=$(($(wc -l < $AR) + $(line_of $AG 'Collective test starting') ))  # AG's start line, after AR's lines
if out=$("$bin" calibrate --import-nccl-tests "$tmp/two.txt" -o "$tmp/two.yaml" 2>&1) &&
   [ "$(grep -c '^  - {op:' "$tmp/two.yaml")" = 2 ] &&
   grep -q "op: allreduce, ranks: 8, hosts: 1, link: intra,.*source: \"$tmp/two.txt:1\"" "$tmp/two.yaml" &&
   grep -q "op: allgather, ranks: 4, hosts: 1, link: intra,.*source: \"$tmp/two.txt:$second\"" "$tmp/two.yaml"; then ok
else bad "two tables, two entries: $out $(cat "$tmp/two.yaml" 2> /dev/null)"; fi
# Each entry is the table alone: the same curve as importing the file by itself.
"$bin" calibrate --import-nccl-tests $AG -o "$tmp/ag.yaml" > /dev/null
diff <(grep -o 'points_us: .*' "$tmp/ag.yaml") <(grep -A1 'op: allgather' "$tmp/two.yaml" | grep -o 'points_us: .*') > /dev/null &&
  ok || bad "the allgather entry of two.txt differs from importing $AG alone"
rm -f "$tmp/two.yaml" "$tmp/ag.yaml"
# Three tables: three entries, and the table listing names each.
cat $AR $AG $RS > "$tmp/three.txt"
out=$("$bin" calibrate --import-nccl-tests "$tmp/three.txt" 2>&1)
[ "$(printf '%s\n' "$out" | grep -cE '^(allreduce|allgather|reducescatter) ')" = 3 ] && ok || bad "three tables: $out"
# Two tables of one (op, ranks, link) are one entry twice: refused naming both tables.
cat $AR $AR > "$tmp/twice.txt"
refused calib-two-tables-one-entry "$tmp/twice.txt:$(($(wc -l < $AR) + 1)): allreduce over 8 ranks (intra) is already imported from $tmp/twice.txt:1" -- \
  $CAL "$tmp/twice.txt"
# A run that printed its header and no data line, then another run.
{ sed -n '1,/^# *(B)/p' $AR; cat $AG; } > "$tmp/nodata.txt"
refused calib-table-without-data "$tmp/nodata.txt:1: the table starting here has no data lines" -- $CAL "$tmp/nodata.txt"
# --fit-machine reads each table too: the AllReduce and AllGather of the 4 x H100, fitted together.
cat $AR4 $AG > "$tmp/h100.txt"
out=$("$bin" calibrate --fit-machine -t $T --import-nccl-tests "$tmp/h100.txt" 2>&1)
[[ $out == *"fitted to 59 measurement(s) from 1 file(s)"* ]] && [[ $out == *"fitted    $tmp/h100.txt:1 "* ]] &&
  [[ $out == *"fitted    $tmp/h100.txt:$(($(wc -l < $AR4) + $(line_of $AG 'Collective test starting'))) "* ]] &&
  ok || bad "fit-machine over a two-table file: $out"

# ---- a size measured twice: refused, not averaged --------------------------
n=$(line_of $AR '^ *8192 ')
awk -v n=$n '{ print } NR == n { $6 = "99.00"; print }' $AR > "$tmp/rep.txt"
refused calib-repeated-size "$tmp/rep.txt:$((n + 1)): size 8192 appears twice in one table (first at line $n)" "not averaged" -- \
  $CAL "$tmp/rep.txt"
# The repeat far from the first, at the end of the table.
awk -v n=$n 'NR == n { keep = $0 } /^# Out of bounds/ { print keep } { print }' $AR > "$tmp/rep-end.txt"
refused calib-repeated-size-last "size 8192 appears twice in one table (first at line $n)" -- $CAL "$tmp/rep-end.txt"
python3 -c "
import json; j = json.load(open('$J')); j['results'][5]['size'] = j['results'][4]['size']
json.dump(j, open('$tmp/rep.json', 'w'), indent=1)"
refused calib-json-repeated-size "$tmp/rep.json: results[5]: size 16384 appears twice in one table (first at results[4])" -- \
  $CAL "$tmp/rep.json"
refused fit-json-repeated-size "$tmp/rep.json: results[5]: size 16384 appears twice" -- \
  "$bin" calibrate --fit-machine -t $T --topo-set nodes=2 --import-nccl-tests "$tmp/rep.json" -o "$tmp/ov.yaml"
# Calibration files: a kernel's x twice (a collective's size twice was refused already).
printf 'kernels:\n  - {name: k, op: gemm, points_us: [[1, 1], [2, 2], [1, 3]]}\n' > "$tmp/k.yaml"
refused cal-kernel-repeated-x "$tmp/k.yaml:2:" "key 'kernels[0].points_us[2]'" "x 1 appears twice (first at points_us[0])" -- \
  "$bin" collective -t $T --op allreduce -b 1MiB --json --calibration "$tmp/k.yaml"

# ---- times that are no measurement ------------------------------------------
n=$(line_of $AR '^ *65536 ')
for v in 1e300 3.6e10 -3.5 0 nan inf; do
  awk -v n=$n -v v=$v 'NR == n { $6 = v } { print }' $AR > "$tmp/t.txt"
  case $v in 1e300|3.6e10) why="above 3.6e+09 us (an hour)" ;; nan|inf) why="not finite" ;; *) why="not above 0" ;; esac
  refused "calib-time-$v" "$tmp/t.txt:$n: expected an nccl-tests data line" "got $v us at size 65536: $why" -- $CAL "$tmp/t.txt"
done
python3 -c "
import json; j = json.load(open('$J')); j['results'][2]['out_of_place']['time'] = 1e300
json.dump(j, open('$tmp/t.json', 'w'), indent=1)"
refused calib-json-time-huge "$tmp/t.json: results[2]: expected a positive \"time\" in microseconds, got 1e+300 at size 4096: above 3.6e+09 us" -- \
  $CAL "$tmp/t.json"
python3 -c "
import json; j = json.load(open('$J')); j['results'][2]['out_of_place']['time'] = -2.0
json.dump(j, open('$tmp/t.json', 'w'), indent=1)"
refused calib-json-time-negative "$tmp/t.json: results[2]: expected a positive \"time\"" -- $CAL "$tmp/t.json"
ent() { printf 'collectives:\n  - {op: allreduce, ranks: 8, link: intra, alpha: %s, bandwidth: 240GBps%s}\n' "$1" "${2:-}" > "$tmp/ld.yaml"; }
C2="$bin collective -t $T --op allreduce -b 1MiB --json --calibration $tmp/ld.yaml"
ent 15us ', points_us: [[1024, 15], [2048, 1e300]]'
refused cal-point-huge "$tmp/ld.yaml:2:" "key 'collectives[0].points_us[1][1]'" "above 3.6e+09 us" -- $C2
ent 7200s
refused cal-alpha-two-hours "$tmp/ld.yaml:2:" "key 'collectives[0].alpha'" "at most 3.6e+09 us (an hour)" -- $C2

# ---- machine fits that did not fit ------------------------------------------
FIT="$bin calibrate --fit-machine --import-nccl-tests"
# An 8 x H100 table on the 8-GPU PCIe server: the model is slower than every small size even without a
# launch latency, which ends at 0, the lower end of its range.
refused fit-pcie-at-bound "calibrate --fit-machine: nccl.launch ended at 0.000 us, the lower bound of its search range [0 us, no upper bound)" \
  "nothing written to $tmp/ov.yaml (--force writes it anyway)" -- $FIT $AR -t topologies/pcie-8gpu.yaml -o "$tmp/ov.yaml"
out=$($FIT $AR -t topologies/pcie-8gpu.yaml 2>&1); rc=$?
[ $rc = 0 ] && [[ $out == *"  warning: nccl.launch ended at 0.000 us, the lower bound"* ]] && ok ||
  bad "fit without -o: exit $rc, no warning: $out"
if $FIT $AR -t topologies/pcie-8gpu.yaml -o "$tmp/ov.yaml" --force > /dev/null 2>&1 &&
   grep -q '^# written with --force: nccl.launch ended at 0.000 us' "$tmp/ov.yaml" &&
   grep -q '^nccl.launch: 0.000us$' "$tmp/ov.yaml"; then ok
else bad "--force: $(cat "$tmp/ov.yaml" 2> /dev/null)"; fi
rm -f "$tmp/ov.yaml"
# The 4 x H100 table on the PCIe server with P2P: no parameter at a bound, but the fit leaves the worst row
# (the model some 36 times too slow) a little worse than it was.
refused fit-worst-row-worse "calibrate --fit-machine: the fit makes the worst fitted row worse (" "after): $AR4:" \
  "(allreduce over 4 ranks, " -- $FIT $AR4 -t topologies/pcie-8gpu-p2p.yaml -o "$tmp/ov.yaml"
# The large sizes 10 times slower than measured: NVLink would need 0.08 of line rate, below 0.30.
awk '!/^#/ && $1 >= 268435456 { $6 = $6 * 10 } { print }' $AR4 > "$tmp/slow.txt"
refused fit-lower-bound "link_efficiency.nvlink ended at 0.300, the lower bound of its search range [0.30, 1.00]" -- \
  $FIT "$tmp/slow.txt" -t $T -o "$tmp/ov.yaml"
# The small sizes faster than NCCL's model with no launch at all: nccl.launch clamped at 0.
awk '!/^#/ && $1 <= 65536 { $6 = "2.00" } { print }' $AR4 > "$tmp/fast.txt"
refused fit-launch-at-zero "nccl.launch ended at 0.000 us, the lower bound of its search range [0 us, no upper bound)" -- \
  $FIT "$tmp/fast.txt" -t $T -o "$tmp/ov.yaml"
needless fit-force-alone "--force requires --fit-machine" -- "$bin" calibrate --import-nccl-tests $AR --force
# A good fit still writes without --force, as before.
$FIT $AR4 -t $T -o "$tmp/ov.yaml" > /dev/null 2>&1 && grep -q '^nccl.launch: ' "$tmp/ov.yaml" && ! grep -q 'force' "$tmp/ov.yaml" &&
  ok || bad "the 4 x H100 fit no longer writes its overlay"
rm -f "$tmp/ov.yaml"

# ---- time overflows name their cause ----------------------------------------
# A calibration entry at 1 B/s: 16 GiB take 1.7e10 s, past 2^63 ps. The entry is to blame, not the graph.
# (--json: the table's header would come before the error.)
ent 1us && sed -i 's/240GBps/1Bps/' "$tmp/ld.yaml"
refused overflow-calibration-entry "--bytes 17179869184: simulate: at t = 0.000 us, calibration $tmp/ld.yaml:2 (collectives[0]: allreduce over 8 ranks, intra): 17179869184 B takes past 2^63 ps" -- \
  "$bin" collective -t $T --op allreduce -b 16GiB --json --calibration "$tmp/ld.yaml"
out=$("$bin" collective -t $T --op allreduce -b 16GiB --json --calibration "$tmp/ld.yaml" 2>&1)
lacks overflow-calibration-not-graph "graph's bytes" "$out"
# Without a calibration, an option's size (2^62 B): the option is named.
refused overflow-collective-bytes "--bytes 4611686018427387904: " "2^63 ps" -- \
  "$bin" collective -t $T --op allreduce -b 4194304TiB --json
# A sweep row whose calibration entry overflows: the row and the entry (mp=2 on 8 GPUs: AlltoAll over the
# 4 ranks of an EP group).
mkdir "$tmp/topos" && cp $T "$tmp/topos/"
printf 'name: o\ntopologies:\n  - {file: topos/dgx-h100.yaml}\ngrid: {B: [2], L: [1048576], M: [1024], H: [4096], E: [8], mp: [2]}\n' > "$tmp/spec.yaml"
printf 'collectives:\n  - {op: alltoall, ranks: 4, link: intra, alpha: 1us, bandwidth: 1Bps}\n' > "$tmp/slow.yaml"
refused overflow-sweep-row "sweep row 0 (topology dgx-h100, B=2,L=1048576," "calibration $tmp/slow.yaml:2 (collectives[0]: alltoall over 4 ranks, intra)" -- \
  "$bin" sweep "$tmp/spec.yaml" --calibration "$tmp/slow.yaml" -q -o "$tmp/r.csv"
# The same layer alone: its keys and the entry.
refused overflow-layer-keys "layer B=2,L=1048576,M=1024,H=4096,E=8," "calibration $tmp/slow.yaml:2 (collectives[0]: alltoall over 4 ranks, intra)" -- \
  "$bin" layer -t $T --set B=2,L=1048576,M=1024,H=4096,E=8,mp=2 --calibration "$tmp/slow.yaml"

echo "hardening_calib: $passes passed, $fails failed ($cases refused inputs)"
[ "$fails" = 0 ]
