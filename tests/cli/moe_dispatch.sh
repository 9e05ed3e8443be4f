#!/usr/bin/env bash
# parmsim moe-dispatch and validate moe-dispatch, whole commands: the JSON
# keys, the same seed giving the same bytes, and bad input refused with one
# line naming the option, a non-zero exit and nothing on stdout.
set -u
. "$(dirname "$(realpath "$0")")/lib.sh" "$@"

run() {  # extra options -> JSON on stdout
  "$bin" moe-dispatch -t topologies/h800-cluster.yaml --ranks 16 --tokens 512 --hidden 7168 --experts 64 --topk 8 \
    --topk-groups 2 --dispatch-dtype fp8 --json "$@"
}
run --kernel deepep-normal > "$tmp/a.json" && ok || bad "deepep-normal"
run --kernel deepep-normal > "$tmp/b.json" && ok || bad "deepep-normal again"
cmp -s "$tmp/a.json" "$tmp/b.json" && ok || bad "the same seed gives the same output"
run --kernel deepep-normal --seed 3 > "$tmp/c.json" && ok || bad "deepep-normal, seed 3"
run --kernel deepep-ll > "$tmp/ll.json" && ok || bad "deepep-ll"
run --kernel nccl-alltoall > "$tmp/a2a.json" && ok || bad "nccl-alltoall"
/usr/bin/python3 - "$tmp/a.json" "$tmp/c.json" "$tmp/ll.json" "$tmp/a2a.json" <<'PY' && ok || bad "moe-dispatch JSON"
import json, sys
a, c, ll, a2a = (json.load(open(p)) for p in sys.argv[1:])
keys = ("dispatch_us", "combine_us", "dispatch_rdma_GBps", "dispatch_nvl_GBps", "combine_rdma_GBps", "combine_nvl_GBps")
for k in keys:
    assert k in a and a[k] > 0, k
# Another seed draws other tokens: other byte counts.
assert c["dispatch_nvl_bytes"] != a["dispatch_nvl_bytes"]
# The bandwidths are the byte counts over the times.
assert abs(a["dispatch_rdma_GBps"] - a["dispatch_rdma_bytes"] / 1e3 / a["dispatch_us"]) < 1e-9 * a["dispatch_rdma_GBps"]
# Low-latency: DeepEP's test counts every selection of rank 0's tokens, 512 x 8,
# x (7168 + 7168/128 x 4 + 16) = 7408 B in fp8, and prints no NVL figure.
assert ll["dispatch_rdma_bytes"] == 512 * 8 * 7408, ll["dispatch_rdma_bytes"]
assert ll["dispatch_nvl_GBps"] is None and ll["combine_nvl_GBps"] is None
# The AlltoAll sends a copy per selection where DeepEP sends one per node and
# rank: more bytes through the NICs.
assert a2a["wire_rdma_bytes"] > a["wire_rdma_bytes"]
PY

refused() {  # expected text, then the command's arguments
  local want=$1
  shift
  "$bin" "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ "$rc" -ne 0 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err"; then
    ok
  else
    bad "refusal '$want' (exit $rc): $(cat "$tmp/err")"
  fi
}
base=(moe-dispatch -t topologies/dgx-h100.yaml --ranks 8 --tokens 64 --hidden 1024 --experts 32)
refused "--kernel: unknown dispatcher 'deepep': expected deepep-normal, deepep-ll or nccl-alltoall" "${base[@]}" \
  --topk 4 --kernel deepep
refused "--topk: 40 experts per token but only --experts 32" "${base[@]}" --kernel deepep-ll --topk 40
refused "--dispatch-dtype: fp8 needs FP8 tensor cores; GPU 'a100'" moe-dispatch -t topologies/dgx-a100.yaml --ranks 8 \
  --tokens 64 --hidden 1024 --experts 32 --topk 4 --kernel deepep-normal --dispatch-dtype fp8
refused "--dispatch-dtype: expected fp8 or bf16, got 'fp16'" "${base[@]}" --topk 4 --kernel deepep-normal \
  --dispatch-dtype fp16
refused "--topk: 20 experts per token but the 1 node(s) --topk-groups allows hold only 16" moe-dispatch \
  -t topologies/h800-cluster.yaml --ranks 16 --tokens 64 --hidden 1024 --experts 32 --topk 20 --topk-groups 1 \
  --kernel deepep-normal

echo "moe_dispatch: $passes passed, $fails failed"
[ "$fails" = 0 ]
