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
[ -s "$tmp/j1.run.json" ] && python3 -c "import json;j=json.load(open('$tmp/j1.run.json'));assert j['configurations']==8 and j['input_hash'].startswith('fnv1a64:')" && ok || bad "run.json"
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

echo "sweep: $passes passed, $fails failed"
[ "$fails" = 0 ]
