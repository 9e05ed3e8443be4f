#!/usr/bin/env bash
# Sweep behaviour: same file whatever the thread count; --resume after an
# interruption loses and repeats nothing; a half-written row is dropped.
# Under mpirun: tests/cli/sweep_mpi.sh (with MPI) or without_mpi.sh (without).
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"
spec=tests/data/small-sweep.yaml

"$bin" sweep $spec -o "$tmp/j1.csv" -j 1 -q || bad "sweep -j 1"
"$bin" sweep $spec -o "$tmp/j2.csv" -j 2 -q || bad "sweep -j 2"
cmp -s "$tmp/j1.csv" "$tmp/j2.csv" && ok || bad "thread count changes the results"
[ "$(wc -l < "$tmp/j1.csv")" = 25 ] && ok || bad "expected 1 header + 8 configurations x 3 schedules"
[ -s "$tmp/j1.csv.run.json" ] && python3 -c "import json;j=json.load(open('$tmp/j1.csv.run.json'));assert j['configurations']==8 and j['input_hash'].startswith('fnv1a64:')" && ok || bad "run.json"
[ ! -e "$tmp/j1.csv.partial" ] && ok || bad "partial left behind"

# Interrupted run: killed (SIGXFSZ) when its partial file reaches 4 KiB, after
# a few complete configurations; half a row more is added for good measure.
{ (ulimit -c 0; ulimit -f 4; exec "$bin" sweep $spec -o "$tmp/r.csv" -j 1 -q) > /dev/null 2>&1; } 2> /dev/null && bad "size-limited sweep finished"
[ -s "$tmp/r.csv.partial" ] && [ ! -e "$tmp/r.csv" ] && ok || bad "no partial file after the kill"
sed -n 11p "$tmp/j1.csv" | head -c 30 >> "$tmp/r.csv.partial"
cp "$tmp/r.csv.partial" "$tmp/killed.partial"
out=$("$bin" sweep $spec -o "$tmp/r.csv" --resume 2>&1) || bad "resume failed: $out"
cmp -s "$tmp/j1.csv" "$tmp/r.csv" && ok || bad "resumed file differs from a full run"
if [[ $out =~ ([0-9]+)\ configurations\ run,\ ([0-9]+)\ resumed ]] && [ "${BASH_REMATCH[2]}" -gt 0 ] &&
   [ $((BASH_REMATCH[1] + BASH_REMATCH[2])) = 8 ]; then ok; else bad "resume did not keep the complete configurations: $out"; fi

# A partial file whose rows are not the spec's is refused.
sed '3s/^0,[^,]*,/0,elsewhere,/' "$tmp/killed.partial" > "$tmp/x.csv.partial"
"$bin" sweep $spec -o "$tmp/x.csv" --resume > "$tmp/x.log" 2>&1 && bad "foreign partial accepted" || ok
grep -q "does not belong to configuration" "$tmp/x.log" && ok || bad "foreign partial message: $(cat "$tmp/x.log")"

# Impossible configurations are named.
"$bin" sweep tests/data/bad-sweep.yaml -o "$tmp/b.csv" > "$tmp/b.log" 2>&1 && bad "bad sweep accepted" || ok
grep -q "configuration B=2,E=12 on parm-32gpu is impossible: E=12 experts must be divisible" "$tmp/b.log" && ok || bad "bad sweep message: $(cat "$tmp/b.log")"
[ ! -e "$tmp/b.csv" ] && ok || bad "output written for a bad spec"

# skip_oom: rows that do not fit are left out and counted (tests/data/oom-sweep.yaml: the 64 KiB
# variant's 2 configurations x 3 schedules = 6 rows go, the 80 GiB variant's 6 stay).
"$bin" sweep tests/data/oom-sweep.yaml -o "$tmp/oom.csv" -q || bad "skip_oom sweep"
[ "$(wc -l < "$tmp/oom.csv")" = 7 ] && ok || bad "skip_oom: expected 1 header + 6 rows, got $(wc -l < "$tmp/oom.csv")"
python3 -c "import json;j=json.load(open('$tmp/oom.csv.run.json'));assert j['skipped_oom']==6 and j['rows']==6 and j['skip_oom'] is True, j" && ok || bad "skip_oom run.json"
python3 -c "import csv;r=list(csv.DictReader(open('$tmp/oom.csv')));assert r and all(x['fits']=='1' and int(x['peak_memory_bytes'])>131072 for x in r)" && ok || bad "skip_oom kept a row that does not fit"
# Without skip_oom the same rows are written, marked fits=0: as many as skip_oom counted.
sed -e 's/^skip_oom: true/skip_oom: false/' -e "s|../../topologies|$PWD/topologies|" tests/data/oom-sweep.yaml > "$tmp/oom-all.yaml"
"$bin" sweep "$tmp/oom-all.yaml" -o "$tmp/all.csv" -q || bad "sweep without skip_oom"
python3 -c "import csv,json;r=list(csv.DictReader(open('$tmp/all.csv')));assert len(r)==12 and sum(x['fits']=='0' for x in r)==6;assert json.load(open('$tmp/all.csv.run.json'))['skipped_oom']==0" && ok || bad "fits column without skip_oom"

echo "sweep: $passes passed, $fails failed"
[ "$fails" = 0 ]
