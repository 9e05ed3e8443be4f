#!/usr/bin/env bash
# scripts/report.py on a small sweep: its summary agrees with the CSV, counted here
# independently; its figures are PNGs; a CSV that is no sweep is refused in one line.
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"

"$bin" sweep tests/data/small-sweep.yaml -o "$tmp/s.csv" -q || { echo "FAIL sweep"; exit 1; }
if scripts/report.py "$tmp/s.csv" -o "$tmp/rep/new" > "$tmp/log" 2>&1; then ok; else bad "report.py: $(cat "$tmp/log")"; fi
# The default folder: SWEEP-report beside the CSV.
if scripts/report.py "$tmp/s.csv" > /dev/null 2>&1 && [ -s "$tmp/s-report/summary.md" ]; then ok; else bad "default folder"; fi

/usr/bin/python3 - "$tmp/s.csv" "$tmp/rep/new/summary.md" "$tmp/log" <<'PY' && ok || bad "summary"
import csv, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
text = open(sys.argv[2]).read()
assert text == open(sys.argv[3]).read().split("report: ")[0], "printed and written summaries differ"
# The title: the spec's name (small), the keys it fixes (L, M, H from its grid), those it varies
# (B and mp; E = experts_per_gpu x GPUs follows the topology).
assert text.startswith("# Sweep small\n"), text[:40]
fixed = re.search(r"^Fixed: (.*)\. Varied: (.*)\.$", text, re.M)
assert fixed and {"L=256", "M=512", "H=1024"} <= set(fixed.group(1).split(", ")), fixed
assert fixed.group(2).split(", ") == ["B", "E", "mp"], fixed.group(2)
table = [l.split("|")[1:-1] for l in text.splitlines() if l.startswith("| ") and not l.startswith("| topology")]
got = {(c[0].strip(), c[1].strip()): [x.strip() for x in c[2:]] for c in table}
# 2 topologies x 3 schedules; the sweep has 2 B x 2 mp = 4 configurations per topology.
assert len(table) == 6 and set(got) == {(t, s) for t in ("pcie-8gpu", "parm-32gpu") for s in ("baseline", "s1", "s2")}
for (t, s), cols in got.items():
    x = sorted(float(r["speedup_vs_baseline"]) for r in rows if r["topology"] == t and r["schedule"] == s)
    mid = (x[1] + x[2]) / 2  # the median of 4 values
    assert cols[0] == "4" and cols[1:4] == [f"{x[0]:.2f}x", f"{mid:.2f}x", f"{x[3]:.2f}x"], (t, s, cols, x)
    assert cols[5] == "4 of 4", cols  # every layer of this sweep fits
    if s == "baseline":
        assert cols[1:4] == ["1.00x"] * 3 and cols[4] == "0", cols
# Wins: per configuration, the schedule with the least total_us; each topology's add up to 4.
for t in ("pcie-8gpu", "parm-32gpu"):
    best = {}
    for r in rows:
        if r["topology"] == t and (r["config"] not in best or float(r["total_us"]) < best[r["config"]][0]):
            best[r["config"]] = (float(r["total_us"]), r["schedule"])
    for s in ("baseline", "s1", "s2"):
        assert int(got[(t, s)][4]) == sum(v[1] == s for v in best.values()), (t, s)
    assert sum(int(got[(t, s)][4]) for s in ("baseline", "s1", "s2")) == 4
PY

for f in speedup_cdf.png s1_vs_s2_wins.png time_breakdown.png speedup_by_param_parm-32gpu.png speedup_by_param_pcie-8gpu.png; do
  if [ -s "$tmp/rep/new/$f" ] && [ "$(head -c 4 "$tmp/rep/new/$f" | tail -c 3)" = PNG ]; then ok; else bad "missing $f"; fi
done
ls -a "$tmp/rep/new" | grep -q tmp && bad "temporary file left" || ok

# Not a sweep CSV: one line naming the file and what is wrong, exit 1.
printf 'config,topology,schedule,total_us\n0,a,s1,1\n' > "$tmp/no.csv"
out=$(scripts/report.py "$tmp/no.csv" -o "$tmp/r2" 2>&1); rc=$?
if [ $rc = 1 ] && [ "$(echo "$out" | wc -l)" = 1 ] && [[ $out == *"$tmp/no.csv: not a sweep CSV: no column 'speedup_vs_baseline', 'fits'"* ]] &&
   [ ! -e "$tmp/r2" ]; then ok; else bad "missing columns: rc $rc: $out"; fi
sed '3s/^\([^,]*,[^,]*,\([^,]*,\)\{18\}\)[^,]*/\1abc/' "$tmp/s.csv" > "$tmp/bad.csv"
out=$(scripts/report.py "$tmp/bad.csv" -o "$tmp/r3" 2>&1); rc=$?
if [ $rc = 1 ] && [[ $out == *"$tmp/bad.csv:3: column 'total_us': 'abc' is not a number"* ]]; then ok; else bad "bad number: rc $rc: $out"; fi

echo "report: $passes passed, $fails failed"
[ "$fails" = 0 ]
