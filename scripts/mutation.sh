#!/usr/bin/env bash
# Mutation score of the model sources (not run in CI; about an hour on 2 busy cores).
#
#   bash scripts/mutation.sh                 # 150 mutants, seed 16, report in out/mutation.md
#   N=200 SEED=7 bash scripts/mutation.sh
#   IDS="12 873" bash scripts/mutation.sh    # re-run chosen mutants (ids from the report)
#   FILES="sim/net/network_model.cpp sim/net/maxmin.cpp" N=40 OUT=out/mutation-net bash scripts/mutation.sh
#                                            # a sample of one part's mutants
#   MUTANTS_FILE=scripts/mutants-reviewer.jsonl OUT=out/reviewer bash scripts/mutation.sh
#                                            # hand-written mutants (the survivors a reviewer found)
#
# Mutants come from scripts/mutate.py (operator swaps, comparison flips,
# constants +1/-1/x2, deleted statements, changed return values) over sim/net,
# sim/coll, sim/compute, sim/moe, sim/calib, sim/engine and the event queue; a
# seeded sample of them runs in the sample's random order (REPORT_ONLY=1 writes
# the report of what has run so far, e.g. after a run was stopped). Each mutant is written into a copy of the tracked tree in
# build-mut/ (the worktree is never touched), parmsim_tests and parmsim are
# rebuilt there (ccache; only the mutated file compiles), and the Catch2 suite
# runs with --abort under a timeout; a mutant it does not kill then gets parmsim
# rebuilt and runs the CLI goldens (tests/cli/run.sh) with their .check files. Outcomes: killed, survived, timeout (the
# tests ran past the limit: counted as killed, as mutation tools do),
# compile-error (not counted). Score = (killed + timeout) / (mutants - compile errors).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
N=${N:-150}
SEED=${SEED:-16}
OUT=${OUT:-out}
mut=$root/build-mut
# ccache and lld when installed (faster rebuilds and links; neither is needed).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
extra=()
command -v ccache > /dev/null && extra+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
command -v ld.lld > /dev/null && extra+=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld)
mkdir -p "$OUT" "$mut"

results=$mut/results.jsonl
report() {
python3 - "$results" "$OUT/mutation.md" "$SEED" "${IDS:-}" <<'PY'
import json, sys, collections
r = [json.loads(l) for l in open(sys.argv[1])]
n = collections.Counter(m["status"] for m in r)
killed = n["killed"] + n["killed-cli"]
valid = len(r) - n["compile-error"]
score = (killed + n["timeout"]) / valid if valid else 0.0
o = open(sys.argv[2], "w")
o.write("# Mutation score (scripts/mutation.sh)\n\n")
o.write(f"Seed {sys.argv[3]}" + (f", mutants {sys.argv[4]}" if sys.argv[4] else "") + f": {len(r)} mutants; "
        f"{killed} killed ({n['killed-cli']} of them only by the CLI goldens), {n['timeout']} timeout, "
        f"{n['survived']} survived, {n['compile-error']} compile errors. "
        f"Score (killed + timeout) / (mutants - compile errors) = {100 * score:.1f}%.\n\n")
by = collections.defaultdict(collections.Counter)
for m in r:
    by[m["file"]][m["status"]] += 1
o.write("| file | mutants | killed | timeout | survived | compile error |\n|---|---|---|---|---|---|\n")
for f, c in sorted(by.items()):
    o.write(f"| {f} | {sum(c.values())} | {c['killed'] + c['killed-cli']} | {c['timeout']} | {c['survived']} | {c['compile-error']} |\n")
o.write("\n## Survivors\n\n")
for m in r:
    if m["status"] == "survived":
        o.write(f"- id {m['id']} `{m['file']}:{m['line']}` ({m['op']}{': ' + m['why'] if 'why' in m else ''})\n"
                f"  ```diff\n  - {m['old'].strip()}\n  + {m['new'].strip()}\n  ```\n")
o.write("\n## Every mutant\n\n| id | where | op | outcome |\n|---|---|---|---|\n")
for m in r:
    o.write(f"| {m['id']} | {m['file']}:{m['line']} | {m['op']} | {m['status']} |\n")
o.close()
print(open(sys.argv[2]).read().split("\n\n")[1])
PY
}
if [ "${REPORT_ONLY:-0}" = 1 ]; then report; exit; fi

# The copy: build-mut/ holds the tracked files and build-mut/build the build, so
# paths relative to the build directory are those of build/ and ccache reuses
# its objects.
# Untracked but not ignored files (new tests not yet committed) travel too.
{ git ls-files -z; git ls-files -z --others --exclude-standard; } | tar --null -T - -cf - | tar -xmf - -C "$mut"  # -m: new mtimes, so objects of an interrupted run rebuild
cmake -S "$mut" -B "$mut/build" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" \
  -DPARMSIM_BENCH=OFF -DPARMSIM_ENABLE_CUDA=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON > "$mut/configure.log" || exit 1
# A mutated .cpp is compiled at -O0 (its object only; half the time of -O3 on
# these files, whose headers dominate), then make links it: the object is newer
# than the source. A mutated header goes through make.
compile_o0() {
  local cmd
  cmd=$(python3 - "$mut/build/compile_commands.json" "$mut/$1" "$mut/build/mut-pch.hpp" <<'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]:
        a = [x for x in shlex.split(e["command"]) if x != "ccache" and not x.endswith("/ccache")]
        a = [a[0], "-include", sys.argv[3], "-Winvalid-pch"] + ["-O0" if x == "-O3" else x for x in a[1:]]
        print("cd " + shlex.quote(e["directory"]) + " && " + shlex.join(a))
        break
PY
)
  [ -n "$cmd" ] || return 0
  (eval "nice -n 10 bash -c $(printf '%q' "$cmd")") > "$mut/build.log" 2>&1
}
# The system and library headers the mutated sources include, precompiled once
# for those -O0 compiles (a third of their time otherwise).
make_pch() {
  nice -n 10 python3 - "$mut/build/compile_commands.json" "$mut/sim/moe/model.cpp" "$mut/build/mut-pch.hpp" <<'PY'
import json, re, shlex, subprocess, sys, glob, os
root = os.path.dirname(os.path.dirname(sys.argv[2].rstrip("/")))
root = os.path.dirname(root)
heads = set()
for f in glob.glob(root + "/sim/*/*.[ch]pp"):
    heads |= set(re.findall(r"^#include (<[^>]+>)", open(f).read(), re.M))
open(sys.argv[3], "w").write("".join(f"#include {h}\n" for h in sorted(heads)))
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]:
        a = [x for x in shlex.split(e["command"]) if x != "ccache" and not x.endswith("/ccache")]
        out, skip = [], 0
        for x in a:
            if skip:
                skip -= 1
                continue
            if x in ("-o", "-MT", "-MF"):
                skip = 1
                continue
            if x in ("-c", "-MD", e["file"]):
                continue
            out.append("-O0" if x == "-O3" else x)
        sys.exit(subprocess.run(out + ["-x", "c++-header", sys.argv[3], "-o", sys.argv[3] + ".gch"], cwd=e["directory"]).returncode)
sys.exit(1)
PY
}
build() { nice -n 10 cmake --build "$mut/build" -j 2 --target "${@:-parmsim_tests}" > "$mut/build.log" 2>&1; }
echo "building the unmutated copy in $mut/build ..."
build parmsim_tests parmsim || { tail -20 "$mut/build.log"; exit 1; }
make_pch > "$mut/pch.log" 2>&1 || { echo "precompiling the headers failed: $mut/pch.log"; exit 1; }
tests=$mut/build/tests/parmsim_tests
bin=$mut/build/parmsim
# Every test case but one: the ECMP routing test checks sim/topo, which is not
# mutated, and takes half of the suite's time.
skip='~"routing is deterministic and ECMP spreads an all-to-all evenly"'
t0=$(date +%s.%N)
eval nice -n 10 "$tests" "$skip" > /dev/null || { echo "the unmutated tests fail"; exit 1; }
t1=$(date +%s.%N)
nice -n 10 bash tests/cli/run.sh "$bin" "$mut" > /dev/null || { echo "the unmutated CLI goldens fail"; exit 1; }
t2=$(date +%s.%N)
limit=$(python3 -c "print(int(3 * ($t1 - $t0)) + 30)")
climit=$(python3 -c "print(int(3 * ($t2 - $t1)) + 30)")
echo "tests take $(python3 -c "print(round($t1 - $t0, 1))") s, CLI goldens $(python3 -c "print(round($t2 - $t1, 1))") s; limits $limit s, $climit s"

files=${FILES:-$(ls sim/net/*.cpp sim/coll/*.cpp sim/compute/*.cpp sim/moe/*.cpp sim/calib/*.cpp sim/engine/*.cpp sim/core/event_queue.hpp)}
python3 scripts/mutate.py list $files > "$mut/candidates.jsonl"
python3 - "$mut/candidates.jsonl" "$N" "$SEED" "${IDS:-}" "${MUTANTS_FILE:-}" > "$mut/sample.jsonl" <<'PY'
import json, random, sys
c = [json.loads(l) for l in open(sys.argv[1])]
ids = sys.argv[4].split()
if sys.argv[5]:
    s = [json.loads(l) for l in open(sys.argv[5]) if l.strip()]
elif ids:
    s = [c[int(i)] for i in ids]
else:
    s = random.Random(int(sys.argv[3])).sample(c, int(sys.argv[2]))
for m in s:  # in the sample's random order: a run stopped early is a random sample too
    print(json.dumps(m))
PY
total=$(wc -l < "$mut/sample.jsonl")
echo "$(wc -l < "$mut/candidates.jsonl") candidates, $total sampled (seed $SEED)"

results=$mut/results.jsonl
: > "$results"
i=0
while IFS= read -r m; do
  i=$((i + 1))
  f=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['file'])" "$m")
  python3 scripts/mutate.py apply "$mut" "$m"
  if ! compile_o0 "$f" || ! build; then
    status=compile-error
  else
    eval timeout "$limit" nice -n 10 "$tests" --abort "$skip" > "$mut/test.log" 2>&1
    rc=$?
    if [ $rc = 124 ]; then status=timeout
    elif [ $rc != 0 ]; then status=killed
    elif ! build parmsim; then status=compile-error
    else
      timeout "$climit" nice -n 10 bash tests/cli/run.sh "$bin" "$mut" > "$mut/cli.log" 2>&1
      rc=$?
      if [ $rc = 124 ]; then status=timeout
      elif [ $rc != 0 ]; then status=killed-cli
      else status=survived; fi
    fi
  fi
  cp "$root/$f" "$mut/$f"
  python3 -c "import json,sys; m=json.loads(sys.argv[1]); m['status']=sys.argv[2]; print(json.dumps(m))" "$m" "$status" >> "$results"
  echo "[$i/$total] $status $f:$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['line'])" "$m")"
done < "$mut/sample.jsonl"
build parmsim_tests parmsim > /dev/null  # leave the copy unmutated
report

