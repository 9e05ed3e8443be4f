#!/usr/bin/env bash
# Comparing with measurements and what a calibration covers (issue 31): the
# commands docs/measured.md and docs/calibration.md show, run as shown; bad
# measured rows refused in one line naming the row and the column; the runs
# `calibrate --plan` prints, measured (here: the simulator's own times written
# as nccl-tests tables) and imported, covering the layer they were planned for;
# `compare --measured` agreeing with `validate moe` on the same rows; every
# example key of the help texts and topology comments; the rail-only topology.
set -u
source "$(dirname "$0")/lib.sh"
cases=0
. "$(dirname "$(realpath "$0")")/refusal.sh"
# has NAME "FRAGMENT" TEXT: TEXT holds FRAGMENT.
has() { if [[ $3 == *"$2"* ]]; then ok; else bad "$1: lacks '$2': $3"; fi; }

T=topologies/dgx-h100.yaml
P5=examples/all_reduce_perf.aws-p5-2node.txt

# ---- the documents' commands, and the output they show ----------------------
if python3 tests/cli/doc_commands.py "$bin" . docs/measured.md docs/calibration.md > "$tmp/doc.log" 2>&1; then ok
else bad "documented commands: $(cat "$tmp/doc.log")"; fi

# ---- bad measured rows: one line, the row and the column ---------------------
H='name,kind,topology,layer,schedule,what,op,ranks,nodes,bytes,measured_us'
row() { printf '%s\n%s\n' "$H" "$2" > "$tmp/$1.csv"; }
row unknown-key "r,layer,$PWD/$T,\"B=4,Q=3\",baseline,total,,,,,100"
refused measured-unknown-key "unknown-key.csv:2: column 'layer': unknown layer key 'Q'" -- "$bin" compare --measured "$tmp/unknown-key.csv"
row negative "r,layer,$PWD/$T,\"B=4\",baseline,total,,,,,-5"
refused measured-negative-time "negative.csv:2: column 'measured_us':" "got -5: not above 0" -- "$bin" compare --measured "$tmp/negative.csv"
row unplaced "r,layer,$PWD/$T,\"mp=3\",s1,total,,,,,100"
refused measured-layer-not-placed "unplaced.csv:2: column 'layer': the layer cannot be placed on topology dgx-h100 (8 GPUs, 8 per node): mp=3" -- \
  "$bin" compare --measured "$tmp/unplaced.csv"
printf '%s,colour\n%s\n' "$H" "r,layer,,B=4,s1,total,,,,,100,red" > "$tmp/column.csv"
refused measured-unknown-column "column.csv:1: column 'colour': unknown column" -- "$bin" compare --measured "$tmp/column.csv" -t $T
row other-kind "r,layer,$PWD/$T,B=4,s1,total,allreduce,,,,100"
refused measured-column-of-other-kind "other-kind.csv:2: column 'op': a layer row does not read it" -- "$bin" compare --measured "$tmp/other-kind.csv"
row group "r,collective,$PWD/$T,,,,allreduce,16,2,1MiB,100"
refused measured-group-beyond-topology "group.csv:2: columns 'ranks', 'nodes': measured on 2 host(s) of 8 GPUs" -- \
  "$bin" compare --measured "$tmp/group.csv"
row op "r,collective,$PWD/$T,,,,broadcast,8,1,1MiB,100"
refused measured-unknown-op "op.csv:2: column 'op': expected allreduce" -- "$bin" compare --measured "$tmp/op.csv"
refused compare-nothing "compare: give the measurements" -- "$bin" compare -t $T
refused compare-nccl-without-topology "compare --nccl-tests: give the topology" -- "$bin" compare --nccl-tests $P5 --ranks 16 --nodes 2
refused compare-nccl-without-ranks "$P5: the ranks are not listed" "--ranks N [--nodes M]" -- \
  "$bin" compare --nccl-tests $P5 -t $T --topo-set nodes=2
refused compare-nccl-beyond-topology "$P5: measured on 2 host(s) of 8 GPUs; topology 'dgx-h100' has 1 node(s)" -- \
  "$bin" compare --nccl-tests $P5 -t $T --ranks 16 --nodes 2 -o "$tmp/c.csv"
refused compare-nccl-network "--network: compare --nccl-tests times each collective alone" -- \
  "$bin" compare --nccl-tests $P5 -t $T --topo-set nodes=2 --ranks 16 --nodes 2 -n flow
A2A=tests/data/nccl-tests/alltoall_perf.16gpu-2node.txt
refused import-ranks-disagree "$A2A: --ranks 8: the table lists 16 ranks" -- "$bin" calibrate --import-nccl-tests $A2A --ranks 8
refused import-ranks-uneven "--ranks 16 --nodes 3: the ranks do not spread evenly" -- \
  "$bin" calibrate --import-nccl-tests $P5 --ranks 16 --nodes 3 -o "$tmp/c.yaml"
printf 'name: one\ngpu: h100\nnodes: 1\nnode:\n  gpus: 1\n  links: []\n' > "$tmp/one.yaml"
refused plan-layer-not-placed "mp=4 must divide the GPUs of a node (1)" -- "$bin" calibrate --plan -t "$tmp/one.yaml" --set E=4
refused plan-output "-o: --plan writes nothing" -- "$bin" calibrate --plan -t $T -o "$tmp/p.txt"
# A layer with no collective: --plan says so, and prints no run.
out=$("$bin" calibrate --plan -t "$tmp/one.yaml" --set E=4,mp=1 2>&1); rc=$?
[ $rc = 0 ] && [[ $out == *"no collective of 2 or more ranks (forward and backward): nothing for nccl-tests to measure"* ]] &&
  [[ $out != *"_perf"* ]] && ok || bad "plan without collectives: exit $rc: $out"

# ---- the plan's runs, measured and imported, cover the layer -----------------
# Each run --plan prints becomes an nccl-tests table of the simulator's own times for that
# group (GPUs 0..n-1 of each of its servers), with its '#  Rank' lines; imported together,
# they must time every collective kind of the layer that nccl-tests runs (all but S2's saa).
LAYER="-t $T --topo-set nodes=2"
"$bin" calibrate --plan $LAYER > "$tmp/plan.txt" || bad "plan"
python3 - "$bin" "$tmp" <<'EOF' > "$tmp/tables.log" 2>&1 || bad "tables from the plan: $(cat "$tmp/tables.log")"
import json, re, subprocess, sys
bin, tmp = sys.argv[1], sys.argv[2]
ops = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reducescatter",
       "alltoall_perf": "alltoall"}
size = lambda s: s[:-1] + {"K": "KiB", "M": "MiB", "G": "GiB"}[s[-1]] if s[-1] in "KMG" else s + "B"
n = 0
for line in open(f"{tmp}/plan.txt"):
    m = re.search(r"(?:mpirun -np (\d+) -H (\S+) )?\./build/(\w+) -b (\S+) -e (\S+) -f 2 -d float -g (\d+)", line)
    if not m:
        continue
    hosts = [int(h.split(":")[1]) for h in m.group(2).split(",")] if m.group(1) else [int(m.group(6))]
    gpus = [node * 8 + i for node, k in enumerate(hosts) for i in range(k)]
    got = json.loads(subprocess.run([bin, "collective", "-t", "topologies/dgx-h100.yaml", "--topo-set", "nodes=2",
                                     "--op", ops[m.group(3)], "--gpus", ",".join(map(str, gpus)),
                                     "-b", size(m.group(4)) + ":" + size(m.group(5)), "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    with open(f"{tmp}/t{n}.txt", "w") as f:
        f.write(f"# Collective test starting: {m.group(3)}\n# Using devices\n")
        for r, g in enumerate(gpus):
            f.write(f"#  Rank {r:2d} Group  0 Pid {100 + r} on host{g // 8} device {g % 8} [0x00] NVIDIA H100\n")
        for row in got:
            t = row["time_us"]
            f.write(f"{row['bytes']:12d} {row['bytes'] // 4:12d} float sum -1 {t:.2f} 0 0 0 {t:.2f} 0 0 0\n")
    n += 1
print(n)
EOF
[ "$(tail -1 "$tmp/tables.log")" = 4 ] && ok || bad "the plan's runs: expected 4 (alltoall, allgather, reducescatter, allreduce): $(cat "$tmp/plan.txt")"
"$bin" calibrate --import-nccl-tests "$tmp"/t[0-9].txt -o "$tmp/planned.yaml" > /dev/null || bad "import the planned tables"
out=$("$bin" layer $LAYER --calibration "$tmp/planned.yaml" 2>&1)
has plan-covers "4 of the 5 collective kinds (op, ranks, link) this run simulated were timed from it, 1 modelled" "$out"
[ "$(grep -c 'every size within its measured' <<< "$out")" = 4 ] && ok || bad "planned sizes not all within the tables: $out"
has plan-leaves-saa "model      saa              16 inter 2 nodes x 8" "$out"

# ---- compare --measured and validate moe agree on the same rows --------------
# The example's layer rows are rows 42, 43, 54, 55, 66 and 96 of validation/moe.csv, run as
# validate moe runs system megatron-alltoall (an independent path: its own cluster generator).
"$bin" compare --measured examples/measured-h100.csv -o "$tmp/cmp.csv" > /dev/null || bad "compare the example"
"$bin" validate moe --json > "$tmp/vm.json" || bad "validate moe"
python3 - "$tmp" <<'EOF2' > "$tmp/agree.log" 2>&1 && ok || bad "compare --measured and validate moe differ: $(cat "$tmp/agree.log")"
import csv, json, sys
tmp = sys.argv[1]
ours = {r["name"]: float(r["predicted_us"]) for r in csv.DictReader(open(f"{tmp}/cmp.csv"))}
theirs = {r["line"]: r["predicted_ms"] * 1000 for r in json.load(open(f"{tmp}/vm.json"))["rows"] if r["predicted_ms"] is not None}
pairs = {"megatron-perf-m7168-fwd": 42, "megatron-perf-m7168-bwd": 43, "megatron-perf-m4096-fwd": 54,
         "megatron-perf-m4096-bwd": 55, "marin-e128-m2048": 66, "marin-e32-m2048": 96}
bad = [(n, ours[n], theirs[l]) for n, l in pairs.items() if abs(ours[n] - theirs[l]) > 1e-6 * theirs[l]]
print(bad)
sys.exit(1 if bad else 0)
EOF2

# ---- every example key of the help texts and topology comments exists --------
# --topo-set examples on the shipped DGX topology; --set examples as layer keys; --vary's keys
# in an overlay (as --sensitivity applies them); each topology file's "--topo-set ..." on it.
for c in topology collective simulate layer sweep model calibrate compare execute verify validate; do "$bin" $c --help; done > "$tmp/help.txt" 2>&1
"$bin" --help-config >> "$tmp/help.txt"
python3 - "$bin" "$tmp" <<'EOF' > "$tmp/keys.log" 2>&1 || bad "help text keys: $(cat "$tmp/keys.log")"
import re, subprocess, sys
bin, tmp = sys.argv[1], sys.argv[2]
text = open(f"{tmp}/help.txt").read()
fails, n = 0, 0
def run(args, what):
    global fails, n
    n += 1
    p = subprocess.run([bin] + args, capture_output=True, text=True)
    if p.returncode != 0:
        fails += 1
        print(f"{what}: {' '.join(args)}: {p.stderr.strip()}")
for line in text.split("\n"):
    for ex in re.findall(r"e\.g\. ([\w.]+=[^\s,;)]+(?:,[\w.]+=[^\s,;)]+)*)", line):
        if "--vary" in line or re.search(r"=\S*:", ex):
            for a in re.findall(r"([\w.]+)=([^:\s]+):", line):
                if a[0].isupper():
                    continue  # the KEY=LOW:HIGH placeholder
                open(f"{tmp}/ov.yaml", "w").write(f"{a[0]}: {a[1]}\n")
                run(["topology", "-t", "topologies/dgx-h100.yaml", "--overlay", f"{tmp}/ov.yaml"], "--vary example")
        elif "--topo-set" in line or "topology keys" in line:
            run(["topology", "-t", "topologies/dgx-h100.yaml", "--topo-set", ex], "--topo-set example")
        elif re.match(r"[A-Za-z]", ex) and ex.split("=")[0] in ("B", "L", "M", "H", "E", "k", "f", "mp"):
            run(["layer", "--estimate", "-t", "topologies/dgx-h100.yaml", "--topo-set", "nodes=2", "--set", ex], "--set example")
import glob
for f in sorted(glob.glob("topologies/*.yaml")):
    for ex in re.findall(r"--topo-set ([\w.]+=[^\s,.]+(?:\.\d+)?(?:,[\w.]+=[^\s,]+?)*)\.?(?:\s|$)", open(f).read()):
        if not re.search(r"=[A-Z]+\b", ex):  # nodes=N is a placeholder
            run(["topology", "-t", f, "--topo-set", ex.rstrip(".")], f)
print(f"{n} examples, {fails} refused")
sys.exit(1 if fails or n < 8 else 0)
EOF
grep -q "examples, 0 refused" "$tmp/keys.log" && ok || bad "help keys: $(cat "$tmp/keys.log")"

# ---- the rail-only topology: loads, and its AlltoAll crosses rails over NVLink ---
R=topologies/dgx-h100-rail-only.yaml
out=$("$bin" topology -t $R --route 0 --to 11 2>&1)
has rail-only-route "route 0 -> 11: 8 hops" "$out"
[[ $out == *"n0.gpu0->n0.nvswitch"*"n0.nvswitch->n0.gpu3"*"n0.gpu3->n0.pcie3"*"n0.pcie3->n0.nic3"*"n0.nic3->rail3"*"rail3->n1.nic3"* ]] &&
  ok || bad "rail-only route 0 -> 11 is not GPU -> NVLink -> the GPU on rail 3 -> its NIC: $out"
# PXN keeps an AlltoAll off the spines (docs/collectives.md, section 4): the same time with or without them.
a=$("$bin" collective -t $R --op alltoall -b 64MiB --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["time_us"])')
b=$("$bin" collective -t $T --topo-set nodes=4 --op alltoall -b 64MiB --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["time_us"])')
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "rail-only AlltoAll $a us, with spines $b us"

echo "measured: $passes passed, $fails failed ($cases refused inputs)"
[ "$fails" = 0 ]
