#!/usr/bin/env bash
# The model presets (experiments/models/*.yaml): each loads as a layer file and runs on
# topologies/dgx-h100.yaml with the keys it cites; gated and shared experts are refused
# by the executors with one line.
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"

n=0
for f in experiments/models/*.yaml; do
  n=$((n + 1))
  name=$(basename "$f" .yaml)
  "$bin" layer -t topologies/dgx-h100.yaml --layer "$f" --json > "$tmp/$name.json" 2> "$tmp/$name.err" \
    && ok || bad "$f: $(cat "$tmp/$name.err")"
  # Every preset sets the keys of its source (glu, bf16, B=1, mp=1; DeepSeek-V3 fp8), and each
  # schedule has a time.
  /usr/bin/python3 - "$tmp/$name.json" "$name" <<'PY' && ok || bad "$f: JSON"
import json, sys
j = json.load(open(sys.argv[1]))
spec = j["layer"]
dtype = "dtype=fp8" if sys.argv[2] == "deepseek-v3" else "dtype=bf16"
for key in ("glu=true", dtype, "B=1,", "mp=1,"):
    assert key in spec, (key, spec)
for name in ("baseline", "s1", "s2"):
    assert j["schedules"][name]["total_us"] > 0, name
PY
done
[ "$n" -eq 5 ] && ok || bad "expected 5 presets, found $n"
# DeepSeek-V3 names its shared expert, and routes each token to at most 4 of 8 groups (nodes).
grep -q '"layer": ".*,shared_H=2048' "$tmp/deepseek-v3.json" && ok || bad "deepseek-v3: shared_H=2048"
grep -q '"layer": ".*,expert_groups=8,topk_groups=4' "$tmp/deepseek-v3.json" && ok || bad "deepseek-v3: groups"
/usr/bin/python3 -c '
import json, sys
l = json.load(open(sys.argv[1]))["load"]
assert (l["expert_groups"], l["topk_groups"]) == (8, 4), l
# One node of 8 GPUs: every expert on the token'"'"'s node, no selection crosses nodes.
assert l["inter_node_selections"] == 0, l
' "$tmp/deepseek-v3.json" && ok || bad "deepseek-v3: load JSON"

# fp8 layers and group-limited routing refuse what they cannot model, in one line.
P=topologies/dgx-h100.yaml
refused "key 'dtype': fp8 needs FP8 tensor cores; GPU 'rtx2080ti' has none (GPUs with fp8: h100, h200, b200, h800)" \
  layer -t topologies/parm-32gpu.yaml --set dtype=fp8
refused "key 'dtype': fp8 scales each token row in blocks of 128 elements; M=1000 is not a multiple of 128" \
  layer -t $P --set dtype=fp8,M=1000
refused "key 'expert_groups': E=32 experts do not divide into 5 equal groups" layer -t $P --set expert_groups=5
refused "key 'topk_groups': 5 groups per token, but expert_groups=4 (0: no limit)" \
  layer -t $P --set load=uniform,expert_groups=4,topk_groups=5
refused "key 'topk_groups': group-limited routing is drawn by the dropless load model; set load=uniform" \
  layer -t $P --set expert_groups=4,topk_groups=2
refused "key 'topk_groups': group-limited routing is drawn from uniform scores" \
  layer -t $P --set load=zipf:1.2,expert_groups=4,topk_groups=2
refused "key 'topk_groups': top-k k=3 experts per token, but 1 group(s) of 2 experts hold only 2" \
  layer -t $P --set load=uniform,expert_groups=16,topk_groups=1,k=3
refused "--set dtype=fp8: the executors (verify, execute) run fp32, fp16 and bf16 layers" verify --set dtype=fp8

refused "--set glu: the executors (verify, execute) run ungated routed experts only" verify --set glu=true
refused "--set shared_H: the executors" execute --set shared_H=32 --trace "$tmp/exec.json"
[ ! -e "$tmp/exec.json" ] && ok || bad "execute refused but wrote its trace"
refused "key 'glu': expected true/false or 1/0, got 'maybe'" layer -t topologies/dgx-h100.yaml --set glu=maybe

echo "presets: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
