#!/usr/bin/env bash
# A what-if that changes only a latency changes the answer: `parmsim layer`
# on two DGX H100 with the fabric's latency raised from 1 us to 1 ms takes
# longer under every schedule (NCCL's model takes each hop as at least the
# topology's route latency, docs/collectives.md section 3).
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"

layer() {  # topology overrides -> JSON
  "$bin" layer -t topologies/dgx-h100.yaml --topo-set "$1" --json
}
layer nodes=2 > "$tmp/default.json" && ok || bad "layer, default fabric latency"
layer nodes=2,fabric.latency=1us > "$tmp/same.json" && ok || bad "layer, fabric latency 1us"
layer nodes=2,fabric.latency=1ms > "$tmp/slow.json" && ok || bad "layer, fabric latency 1ms"
/usr/bin/python3 - "$tmp/default.json" "$tmp/same.json" "$tmp/slow.json" <<'PY' && ok || bad "fabric latency what-if"
import json, sys
d, same, slow = (json.load(open(p))["schedules"] for p in sys.argv[1:])
for s in ("baseline", "s1", "s2"):
    # The file's own 1 us, set again, is the same machine: the same time.
    assert same[s]["total_us"] == d[s]["total_us"], (s, same[s]["total_us"], d[s]["total_us"])
    # 1 ms: larger, in the simulator and in the closed form.
    for k in ("total_us", "model_us"):
        assert slow[s][k] > d[s][k] + 1000, (s, k, slow[s][k], d[s][k])
# The baseline's four AlltoAlls (dispatch and combine, forward and backward)
# cross the network one after another, each one send/recv batch whose network
# latency goes from 8.4 + max(14, 4) = 22.4 us to 8.4 + max(14, 2 x 1000 +
# 4 x 0.5) = 2010.4 us: 4 x 1988 = 7952 us more.
g = slow["baseline"]["total_us"] - d["baseline"]["total_us"]
assert abs(g - 7952.0) < 0.01, g
PY

echo "latency: $passes passed, $fails failed"
[ "$fails" = 0 ]
