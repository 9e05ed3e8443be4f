#!/usr/bin/env bash
# Outputs that must not damage files, sweeps that must not resume across
# changed inputs or beside a running sweep, YAML/JSON that must not be read
# quietly wrong. Each case: exit status 1, one line naming the option (or
# file:line:col and key) and the path, and no file created or changed.
set -u
bin=$(realpath "$1")
cd "$2" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passes=0 fails=0 cases=0
ok() { passes=$((passes + 1)); }
bad() { fails=$((fails + 1)); echo "FAIL $*"; }

# Fingerprint of the folder: every entry with its type, link target and content hash.
snap() { (cd "$tmp" && find . -mindepth 1 \( -path ./snap -o -path ./log \) -prune -o -printf '%p %y %l\n' | sort &&
  find . -type f ! -name log -print0 | sort -z | xargs -0 -r sha256sum) ; }

# refused NAME "FRAGMENT..." -- COMMAND...: exit 1, a one-line message holding
# every fragment, and the folder exactly as before.
refused() {
  local name=$1
  shift
  local frags=()
  while [ "$1" != "--" ]; do frags+=("$1"); shift; done
  shift
  cases=$((cases + 1))
  local before after out rc
  before=$(snap)
  out=$(timeout 60 "$@" 2>&1 < /dev/null)
  rc=$?
  after=$(snap)
  if [ $rc != 1 ]; then bad "$name: exit $rc (expected 1): $out"; return; fi
  if [ "$(printf '%s\n' "$out" | wc -l)" != 1 ]; then bad "$name: not one line: $out"; return; fi
  for f in "${frags[@]}"; do
    if [[ $out != *"$f"* ]]; then bad "$name: message lacks '$f': $out"; return; fi
  done
  if [ "$before" != "$after" ]; then bad "$name: files changed: $(diff <(echo "$before") <(echo "$after"))"; return; fi
  ok
}

D=tests/data
T=topologies/dgx-h100.yaml
G=experiments/graphs/overlap-demo.yaml
mkdir "$tmp/dir"
echo "keep me" > "$tmp/target.txt"
ln -s target.txt "$tmp/link.csv"
ln -s target.txt "$tmp/link.json"
mkfifo "$tmp/fifo.csv"
mknod "$tmp/null.csv" c 1 3 2> /dev/null  # as root only: a device node like /dev/full
cp $D/small-sweep.yaml "$tmp/spec.yaml"
sed -i 's|\.\./\.\./topologies/|topos/|' "$tmp/spec.yaml"
mkdir "$tmp/topos"
cp topologies/pcie-8gpu.yaml topologies/parm-32gpu.yaml "$tmp/topos/"
cp $G "$tmp/graph.yaml"
cp $D/layer.yaml "$tmp/l.baseline.forward.yaml"
cp $D/nccl-tests/all_reduce_perf.8gpu.txt "$tmp/ar.txt"

# ---- outputs: links, directories, FIFOs, devices, inputs -------------------
S="$bin sweep $tmp/spec.yaml -q -o"
refused sweep-spec-as-output "--output: '$tmp/spec.yaml' is the sweep spec" -- $S "$tmp/spec.yaml"
refused sweep-spec-as-output-dot "--output: '$tmp/./spec.yaml' is the sweep spec" -- $S "$tmp/./spec.yaml"
refused sweep-topology-as-output "--output: '$tmp/topos/pcie-8gpu.yaml' is the topology file" -- $S "$tmp/topos/pcie-8gpu.yaml"
refused sweep-dir-output "--output: '$tmp/dir' is a directory" -- $S "$tmp/dir"
refused sweep-dir-slash-output "--output: '$tmp/dir/' is a directory" -- $S "$tmp/dir/"
refused sweep-link-output "--output: '$tmp/link.csv' is a symbolic link" -- $S "$tmp/link.csv"
refused sweep-fifo-output "--output: '$tmp/fifo.csv' is a FIFO" -- $S "$tmp/fifo.csv"
[ -e "$tmp/null.csv" ] && refused sweep-device-output "--output: '$tmp/null.csv' is a character device" -- $S "$tmp/null.csv"
refused sweep-no-folder "--output: '$tmp/no/r.csv'" "directory '$tmp/no' does not exist" -- $S "$tmp/no/r.csv"
ln -s elsewhere "$tmp/p.csv.partial"
refused sweep-partial-is-link "'$tmp/p.csv.partial' is a symbolic link" -- $S "$tmp/p.csv"
rm "$tmp/p.csv.partial"
ln -s target.txt "$tmp/q.run.json"
refused sweep-runjson-is-link "'$tmp/q.run.json' is a symbolic link" -- $S "$tmp/q.csv"
rm "$tmp/q.run.json"

L="$bin layer -t $T -n analytical --set B=2,L=64,M=64,H=128,E=8,mp=2"
refused layer-trace-link "--trace: '$tmp/link.baseline.forward.json' is a symbolic link" -- \
  bash -c "ln -sf target.txt $tmp/link.baseline.forward.json && $L --trace $tmp/link.json; rc=\$?; rm $tmp/link.baseline.forward.json; exit \$rc"
refused layer-trace-is-layer-file "--trace: '$tmp/l.baseline.forward.yaml' is the --layer file" -- \
  $L --layer "$tmp/l.baseline.forward.yaml" --trace "$tmp/l.yaml"
refused layer-trace-dir "--trace: '$tmp/dir' is a directory" -- $L --trace "$tmp/dir"

# simulate: checked as each file is written; the run writes all its outputs or none.
SIM="$bin simulate -t $T -g $tmp/graph.yaml"
refused simulate-csv-is-graph "'$tmp/graph.yaml' is a file this command reads as input" -- $SIM --csv "$tmp/graph.yaml"
refused simulate-trace-link "'$tmp/link.json' is a symbolic link" -- $SIM --trace "$tmp/link.json"
refused simulate-trace-fifo "'$tmp/fifo.csv' is a FIFO" -- $SIM --csv "$tmp/fifo.csv"
refused simulate-one-of-two-fails "'$tmp/dir' is a directory" -- $SIM --trace "$tmp/never.json" --csv "$tmp/dir"
refused simulate-same-file-twice "'$tmp/twice.txt' is written twice" -- $SIM --trace "$tmp/twice.txt" --csv "$tmp/twice.txt"

E="$bin execute --backend cpu --schedule s1 --trace"
refused execute-trace-dir "--trace: '$tmp/dir' is a directory" -- $E "$tmp/dir"
refused execute-sidecar-link "--trace (its .json sidecar): '$tmp/link.json' is a symbolic link" -- $E "$tmp/link"

refused calibrate-output-is-input "--output: '$tmp/ar.txt' is an --import-nccl-tests input" -- \
  "$bin" calibrate --import-nccl-tests "$tmp/ar.txt" -o "$tmp/ar.txt"
refused calibrate-output-link "--output: '$tmp/link.csv' is a symbolic link" -- \
  "$bin" calibrate --import-nccl-tests "$tmp/ar.txt" -o "$tmp/link.csv"
[ -e "$tmp/null.csv" ] && refused calibrate-output-device "--output: '$tmp/null.csv' is a character device" -- \
  "$bin" calibrate --import-nccl-tests "$tmp/ar.txt" -o "$tmp/null.csv"

# compare: a measured trace to compare against.
if "$bin" execute --backend cpu --schedule s1 --trace "$tmp/m.csv" > /dev/null 2>&1; then
  C="$bin compare --measured $tmp/m.csv -t topologies/cpu-host.yaml -o"
  refused compare-output-is-measured "--output: '$tmp/m.csv' is the --measured trace" -- $C "$tmp/m.csv"
  refused compare-output-is-sidecar "--output: '$tmp/m.csv.json' is the --measured trace's .json sidecar" -- $C "$tmp/m.csv.json"
  refused compare-output-is-topology "--output: 'topologies/cpu-host.yaml' is the topology file" -- $C topologies/cpu-host.yaml
  cp "$tmp/m.csv.json" "$tmp/side.bak"
  sed -i 's/"gpus": \([0-9]*\),/"gpus": \1, "gpus": 1,/' "$tmp/m.csv.json"
  grep -q '"gpus": 1' "$tmp/m.csv.json" || bad "sidecar not edited"
  refused compare-sidecar-duplicate "m.csv.json:" "duplicate key 'gpus'" -- $C "$tmp/cmp.csv"
  cp "$tmp/side.bak" "$tmp/m.csv.json"
else
  bad "execute for compare failed"
fi

# ---- sweeps: a lock, and no resume across changed inputs --------------------
# A running sweep holds a lock on its partial file: a second one is refused at once.
# (This shell holds the lock, on fd 9, as the running sweep would.)
touch "$tmp/busy.csv.partial"
exec 9<> "$tmp/busy.csv.partial"
flock -n 9 || bad "cannot take the lock for the test"
refused sweep-second-writer "--output: '$tmp/busy.csv' is being written by another sweep" -- $S "$tmp/busy.csv"
refused sweep-second-writer-resume "another sweep" -- $S "$tmp/busy.csv" --resume
exec 9>&-
rm -f "$tmp/busy.csv.partial"

# Killed partway (the file size limit: SIGXFSZ), then a topology is edited.
{ (ulimit -c 0; ulimit -f 4; exec $S "$tmp/r.csv" -j 1) > /dev/null 2>&1; } 2> /dev/null
rc=$?
if [ $rc -gt 128 ] && [ -s "$tmp/r.csv.partial" ] && [ ! -e "$tmp/r.csv" ]; then ok; else bad "killed sweep: exit $rc"; fi
head -c 23 "$tmp/r.csv.partial" | grep -q '^#parmsim-sweep-partial ' && ok || bad "partial file has no record of its inputs"
cp "$tmp/topos/parm-32gpu.yaml" "$tmp/topo.bak"
echo "# edited" >> "$tmp/topos/parm-32gpu.yaml"
refused resume-topology-changed "topology '$tmp/topos/parm-32gpu.yaml' changed since the interrupted run" -- $S "$tmp/r.csv" --resume
cp "$tmp/topo.bak" "$tmp/topos/parm-32gpu.yaml"
sed -i 's/^name: small/name: smaller/' "$tmp/spec.yaml"
refused resume-spec-changed "sweep spec '$tmp/spec.yaml' changed since the interrupted run" -- $S "$tmp/r.csv" --resume
sed -i 's/^name: smaller/name: small/' "$tmp/spec.yaml"
"$bin" calibrate --import-nccl-tests "$tmp/ar.txt" -o "$tmp/cal.yaml" > /dev/null
refused resume-calibration-added "did not read calibration '$tmp/cal.yaml'" -- $S "$tmp/r.csv" --resume --calibration "$tmp/cal.yaml"
# A row that is not the spec's is still refused.
cp "$tmp/r.csv.partial" "$tmp/r.bak"
sed -i '3s/^0,[^,]*,/0,elsewhere,/' "$tmp/r.csv.partial"
refused resume-foreign-row "does not belong to configuration 0" -- $S "$tmp/r.csv" --resume
cp "$tmp/r.bak" "$tmp/r.csv.partial"
rm "$tmp/r.bak" "$tmp/topo.bak"
# Inputs as they were: the resume completes and equals an uninterrupted run (the killed sweep's lock died with it).
out=$($S "$tmp/r.csv" --resume -j 2 2>&1 > /dev/null) || bad "resume: $out"
$S "$tmp/full.csv" -j 1 > /dev/null 2>&1
cmp -s "$tmp/r.csv" "$tmp/full.csv" && [ ! -e "$tmp/r.csv.partial" ] && [ -s "$tmp/r.run.json" ] && ok || bad "resumed result differs"
python3 -c "
import json; j = json.load(open('$tmp/r.run.json'))
assert {i['role'] for i in j['inputs']} == {'sweep spec', 'topology'} and all(len(i['fnv1a64']) == 16 for i in j['inputs'])
" && ok || bad "run.json records the inputs"

# ---- input files read quietly wrong ----------------------------------------
printf 'name: a\nname: b\n' > "$tmp/dup.yaml"
cat $T > "$tmp/dup-topo.yaml"
key=$(grep -m1 -o '^[a-z_][a-z_]*' $T)
first=$(grep -n -m1 "^$key:" $T | cut -d: -f1)
echo "$key: again" >> "$tmp/dup-topo.yaml"
refused topology-duplicate-key "$tmp/dup-topo.yaml:$(wc -l < "$tmp/dup-topo.yaml"):1: duplicate key '$key' (first at line $first)" -- \
  "$bin" topology -t "$tmp/dup-topo.yaml"
printf 'B: 4\nL: 128\nB: 8\n' > "$tmp/dup-layer.yaml"
refused layer-file-duplicate-key "$tmp/dup-layer.yaml:3:1: duplicate key 'B' (first at line 1)" -- \
  "$bin" layer -t $T --layer "$tmp/dup-layer.yaml"
sed 's/]}$/],}/' $D/graph.json > "$tmp/comma.json"
refused graph-json-trailing-comma "$tmp/comma.json:3:" "malformed JSON" -- "$bin" simulate -t $T -g "$tmp/comma.json"
sed 's/"ranks": 2,/"ranks": 2, "ranks": 4,/' $D/graph.json > "$tmp/dup.json"
refused graph-json-duplicate-key "$tmp/dup.json:1:" "duplicate key 'ranks'" -- "$bin" simulate -t $T -g "$tmp/dup.json"
{ cat $D/small-sweep.yaml; printf -- '---\nname: other\n'; } > "$tmp/twodocs.yaml"
refused sweep-second-document "$tmp/twodocs.yaml:" "second YAML document" -- "$bin" sweep "$tmp/twodocs.yaml" --count

echo "hardening: $passes passed, $fails failed ($cases refused inputs)"
[ "$fails" = 0 ]
