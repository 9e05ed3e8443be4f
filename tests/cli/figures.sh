#!/usr/bin/env bash
# The plot script draws every figure from a small sweep, a model JSON and a
# trace, and a comparison CSV; it writes PNGs and nothing else.
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"
"$bin" sweep tests/data/small-sweep.yaml -o "$tmp/paper-grid.csv" -q
"$bin" model experiments/bert-moe.yaml --json > "$tmp/bert-moe.json"
"$bin" simulate -t topologies/dgx-h100.yaml -g experiments/graphs/overlap-demo.yaml --csv "$tmp/demo.trace.csv" > /dev/null
"$bin" layer -t topologies/dgx-h100.yaml --set B=2,L=64,M=64,H=128,E=8,mp=2 --json --trace "$tmp/layer.trace.csv" > "$tmp/layer.json"
printf 'name,measured_us,predicted_us\na,10,11\nb,100,95\n' > "$tmp/compare-demo.csv"
if /usr/bin/python3 plots/make_figures.py --results "$tmp" --out "$tmp/fig" > "$tmp/log" 2>&1; then
  # A layer trace: a timeline per schedule (forward, then backward).
  for f in speedup_cdf.png s1_vs_s2_wins.png time_breakdown.png models_iteration.png timeline_demo.png compare-demo.png \
           timeline_layer_baseline.png timeline_layer_s1.png timeline_layer_s2.png; do
    if [ -s "$tmp/fig/$f" ] && [ "$(head -c 4 "$tmp/fig/$f" | tail -c 3)" = PNG ]; then passes=$((passes + 1)); else fails=$((fails + 1)); echo "FAIL missing $f"; fi
  done
  ls "$tmp/fig" | grep -q tmp && { fails=$((fails + 1)); echo "FAIL temporary file left"; } || passes=$((passes + 1))
else
  fails=$((fails + 1)); echo "FAIL plots/make_figures.py:"; cat "$tmp/log"
fi
# The model JSON adds up: iteration = sum of components, and Parm is faster.
/usr/bin/python3 - "$tmp/bert-moe.json" <<'PY' && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL model json"; }
import json, sys
j = json.load(open(sys.argv[1]))
for s, v in j["schedules"].items():
    assert abs(sum(c["total_us"] for c in v["components"]) - v["iteration_us"]) < 1e-3, s
assert j["schedules"]["s1"]["speedup_vs_baseline"] > 1 and j["schedules"]["s2"]["speedup_vs_baseline"] > 1
# Only the MoE layers differ between schedules.
b, s1 = j["schedules"]["baseline"]["components"], j["schedules"]["s1"]["components"]
for x, y in zip(b, s1):
    assert (x["total_us"] == y["total_us"]) == (x["component"] != "moe_layer"), x
PY
echo "figures: $passes passed, $fails failed"
[ "$fails" = 0 ]
