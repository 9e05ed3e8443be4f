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
  # Every preset sets the keys of its source (glu, bf16, B=1, mp=1), and each schedule has a time.
  /usr/bin/python3 - "$tmp/$name.json" <<'PY' && ok || bad "$f: JSON"
import json, sys
j = json.load(open(sys.argv[1]))
spec = j["layer"]
for key in ("glu=true", "dtype=bf16", "B=1,", "mp=1,"):
    assert key in spec, (key, spec)
for name in ("baseline", "s1", "s2"):
    assert j["schedules"][name]["total_us"] > 0, name
PY
done
[ "$n" -eq 5 ] && ok || bad "expected 5 presets, found $n"
# DeepSeek-V3 names its shared expert.
grep -q '"layer": ".*,shared_H=2048"' "$tmp/deepseek-v3.json" && ok || bad "deepseek-v3: shared_H=2048"

refused "--set glu: the executors (verify, execute) run ungated routed experts only" verify --set glu=true
refused "--set shared_H: the executors" execute --set shared_H=32 --trace "$tmp/exec.json"
[ ! -e "$tmp/exec.json" ] && ok || bad "execute refused but wrote its trace"
refused "key 'glu': expected true/false or 1/0, got 'maybe'" layer -t topologies/dgx-h100.yaml --set glu=maybe

echo "presets: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
