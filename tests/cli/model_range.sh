#!/usr/bin/env bash
# scripts/model_range.py runs the model specs over moe_every and batch, and
# scripts/paper_tables.py prints them: checked on small ranges against a direct
# `parmsim model` run and against counts derived by hand.
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"

# 1. BERT-MoE, moe_every 1 and 2 at the shipped batch 8, its own testbed only.
if /usr/bin/python3 scripts/model_range.py --bin "$bin" --out "$tmp/r1.csv" --models bert-moe --moe-every 1,2 \
    --batch 8 --no-p2p > "$tmp/log" 2>&1; then ok; else bad "model_range.py exited non-zero"; cat "$tmp/log"; fi
"$bin" model experiments/bert-moe.yaml --json > "$tmp/direct.json"
/usr/bin/python3 - "$tmp/r1.csv" "$tmp/direct.json" <<'PY' && ok || bad "range rows"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2, len(rows)                      # 1 model x 2 moe_every x 1 batch x 1 testbed
by = {int(r["moe_every"]): r for r in rows}
# layers: 12 in experiments/bert-moe.yaml: every block's FFN an MoE layer = 12, every other = 12 / 2 = 6.
assert int(by[1]["moe_layers"]) == 12 and int(by[2]["moe_layers"]) == 6, rows
# The shipped setting is the spec's own (moe_every 2, batch 8, parm-32gpu), and only it.
assert [r["shipped"] for r in (by[1], by[2])] == ["0", "1"], rows
assert all(r["p2p"] == "0" and r["topology"] == "parm-32gpu" for r in rows), rows
# The rewritten spec at the shipped setting runs the same model as the spec itself.
d = json.load(open(sys.argv[2]))["schedules"]
s = by[2]
assert abs(float(s["baseline_iteration_us"]) - d["baseline"]["iteration_us"]) < 1e-3, (s, d["baseline"]["iteration_us"])
for k in ("s1", "s2"):
    assert abs(float(s[f"iteration_speedup_{k}"]) - d[k]["speedup_vs_baseline"]) < 1e-4, k
    assert abs(float(s[f"moe_speedup_{k}"]) - d[k]["moe_speedup_vs_baseline"]) < 1e-4, k
    # The same MoE layer, 12 of them instead of 6: the MoE layers alone speed up alike (12a / 12b = 6a / 6b),
    # and twice the MoE layers add MoE time, so the iteration speeds up more with moe_every 1.
    assert by[1][f"moe_speedup_{k}"] == by[2][f"moe_speedup_{k}"], k
    assert float(by[1][f"iteration_speedup_{k}"]) > float(by[2][f"iteration_speedup_{k}"]), k
assert float(by[1]["baseline_iteration_us"]) > float(by[2]["baseline_iteration_us"])
PY

# 2. Both testbeds, two batches; the paper comparison prints them.
"$bin" sweep tests/data/small-sweep.yaml -o "$tmp/paper-grid.csv" -q
cp "$tmp/paper-grid.csv" "$tmp/ablation.csv"
"$bin" model experiments/bert-moe.yaml --json > "$tmp/bert-moe.json"
"$bin" model experiments/gpt2-moe.yaml --json > "$tmp/gpt2-moe.json"
/usr/bin/python3 scripts/model_range.py --bin "$bin" --out "$tmp/model-range.csv" --moe-every 2 --batch 2,8 > /dev/null \
  && ok || bad "model_range.py, both testbeds"
if /usr/bin/python3 scripts/paper_tables.py --results "$tmp" > "$tmp/table.md" 2> "$tmp/log"; then ok; else bad "paper_tables.py"; cat "$tmp/log"; fi
/usr/bin/python3 - "$tmp/model-range.csv" "$tmp/table.md" <<'PY' && ok || bad "range table"
import csv, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 8, len(rows)                      # 2 models x 1 moe_every x 2 batches x 2 testbeds
assert sorted({r["topology"] for r in rows}) == ["parm-32gpu", "parm-32gpu-p2p"]
# Shipped: bert-moe batch 8 and none of gpt2-moe (batch 4 is not in this range), on parm-32gpu only.
assert [(r["model"], r["batch"], r["topology"]) for r in rows if r["shipped"] == "1"] == [("bert-moe", "8", "parm-32gpu")]
t = open(sys.argv[2]).read()
assert sum(l.startswith("| ") and "**" in l for l in t.splitlines()) == 1, t   # one bold cell
best = lambda r: max(float(r["iteration_speedup_s1"]), float(r["iteration_speedup_s2"]))
moe = lambda r: max(float(r["moe_speedup_s1"]), float(r["moe_speedup_s2"]))
for r in rows:
    cell = f"{best(r):.2f}x ({moe(r):.2f}x)"
    line = next(l for l in t.splitlines() if l.startswith(f"| {r['model']} | 2 (6) | {r['batch']} |"))
    cols = ["parm-32gpu", "parm-32gpu-p2p"]
    got = line.split("|")[4 + cols.index(r["topology"])].strip().strip("*")
    assert got == cell, (line, cell)
# The existing rows stay, and the sentence names the P2P input with its median ratio, from the CSV:
assert re.search(r"^\| bert-moe, iteration \(MoE layers alone\) \| ~3x \|", t, re.M)
ratios = sorted(best(p) / best(n) for n in rows for p in rows if n["topology"] == "parm-32gpu"
                and p["topology"] == "parm-32gpu-p2p" and (n["model"], n["batch"]) == (p["model"], p["batch"]))
med = (ratios[1] + ratios[2]) / 2                      # 4 pairs: the median is the mean of the middle two
m = re.search(r"GPU peer-to-peer \(the testbed's `p2p`[^)]*\) (\d+\.\d+)x", t)
assert m and m.group(1) == f"{med:.2f}", (m and m.group(1), med)
assert "Within 10% of ~3x per iteration:" in t
PY

# 3. Mistakes: one line naming the option, exit 1, nothing written.
for args in "--batch 0" "--moe-every x" "--models nosuch"; do
  /usr/bin/python3 scripts/model_range.py --bin "$bin" --out "$tmp/bad.csv" $args > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q -- "${args%% *}" "$tmp/err" && [ ! -e "$tmp/bad.csv" ]; then ok
  else bad "model_range.py $args: rc $rc, $(cat "$tmp/err")"; fi
done
rm "$tmp/model-range.csv"
/usr/bin/python3 scripts/paper_tables.py --results "$tmp" > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q "model-range.csv: not found" "$tmp/err" && ok || bad "paper_tables.py without model-range.csv: $(cat "$tmp/err")"

echo "model_range: $passes passed, $fails failed"
[ "$fails" = 0 ]
