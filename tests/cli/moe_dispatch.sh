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

base=(moe-dispatch -t topologies/dgx-h100.yaml --ranks 8 --tokens 64 --hidden 1024 --experts 32)
refused "--kernel: unknown dispatcher 'deepep': expected deepep-normal, deepep-ll, deepep-ll-nvlink or nccl-alltoall" "${base[@]}" \
  --topk 4 --kernel deepep
refused "--topk: 40 experts per token but only --experts 32" "${base[@]}" --kernel deepep-ll --topk 40
refused "--dispatch-dtype: fp8 needs FP8 tensor cores; GPU 'a100'" moe-dispatch -t topologies/dgx-a100.yaml --ranks 8 \
  --tokens 64 --hidden 1024 --experts 32 --topk 4 --kernel deepep-normal --dispatch-dtype fp8
refused "--dispatch-dtype: expected fp8 or bf16, got 'fp16'" "${base[@]}" --topk 4 --kernel deepep-normal \
  --dispatch-dtype fp16
refused "--sms: DeepEP's normal kernels run on an even number of SMs (channels of two), from 2 to the 132 of GPU 'h100'; got 7" \
  "${base[@]}" --topk 4 --kernel deepep-normal --sms 7
# Fewer SMs, a slower DeepEP normal kernel; the low-latency kernels ignore them.
t2=$("$bin" "${base[@]}" --topk 4 --kernel deepep-normal --sms 2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["dispatch_us"])')
t24=$("$bin" "${base[@]}" --topk 4 --kernel deepep-normal --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["sms"] == 24; print(j["dispatch_us"])')
if python3 -c "import sys; sys.exit(0 if float('$t2') > float('$t24') else 1)"; then ok; else bad "--sms 2 ($t2 us) not slower than 24 ($t24 us)"; fi
refused "--topk: 20 experts per token but the 1 node(s) --topk-groups allows hold only 16" moe-dispatch \
  -t topologies/h800-cluster.yaml --ranks 16 --tokens 64 --hidden 1024 --experts 32 --topk 20 --topk-groups 1 \
  --kernel deepep-normal

# validate moe-dispatch over a few rows (tests/data/moe-dispatch-small.csv:
# DeepSeek's EP8 and EP16 normal and low-latency rows, a UCCL-EP row run as its
# nearest, an MI300X row and a TensorRT-LLM row not predicted).
"$bin" validate moe-dispatch tests/data/moe-dispatch-small.csv --json > "$tmp/v.json" && ok || bad "validate moe-dispatch"
"$bin" validate moe-dispatch tests/data/moe-dispatch-small.csv > "$tmp/v.txt" && ok || bad "validate moe-dispatch table"
grep -q "^MAPE over the 8 phases (4 rows) of modelled kernels: " "$tmp/v.txt" && ok || bad "validate table: MAPE line"
/usr/bin/python3 - "$tmp/v.json" <<'PY' && ok || bad "validate moe-dispatch JSON"
import json, sys
v = json.load(open(sys.argv[1]))
rows = v["rows"]
assert len(rows) == 7 and v["counted"] == 8 and v["counted_rows"] == 4, (len(rows), v["counted"])
assert [r["status"] for r in rows] == ["modelled"] * 4 + ["nearest"] + ["not predicted"] * 2, [r["status"] for r in rows]
# The MAPE is the mean of the modelled rows' absolute errors, dispatch and combine.
errs = [abs(r[p]["error_pct"]) for r in rows[:4] for p in ("dispatch", "combine")]
assert abs(v["mape_pct"] - sum(errs) / len(errs)) < 1e-9, v["mape_pct"]
assert set(v["mape_pct_by_source"]) == {"deepseek-deepep-v1"}
# The current low-latency rows run with NVLink to same-node peers; the published
# bandwidth of the normal kernels becomes a time through the simulated bytes.
assert rows[2]["ran"].startswith("deepep-ll-nvlink on h800-cluster"), rows[2]["ran"]
assert rows[1]["dispatch"]["published"] == "rdma_GBps" and rows[2]["dispatch"]["published"] == "time"
assert rows[6]["why"] == "kernel not modelled"
PY
refused "--load zipf:0: the Zipf exponent must be a number above 0" "${base[@]}" --topk 4 --kernel deepep-normal \
  --load zipf:0
refused "--load tests/data/expert-histogram-8.txt: 8 counts, expected one per expert (--experts 32)" "${base[@]}" \
  --topk 4 --kernel deepep-normal --load tests/data/expert-histogram-8.txt

# Dropless routing with skew: a histogram of 8 experts routes by its counts;
# Zipf 1.2 is slower than uniform, and says how uneven it was.
skew() {
  "$bin" moe-dispatch -t topologies/dgx-h100.yaml --ranks 8 --tokens 1024 --hidden 1024 --experts 8 --topk 2 \
    --kernel deepep-normal --json "$@"
}
skew > "$tmp/u.json" && skew --load zipf:1.2 > "$tmp/z.json" && skew --load tests/data/expert-histogram-8.txt \
  > "$tmp/h.json" && ok || bad "moe-dispatch --load"
/usr/bin/python3 - "$tmp/u.json" "$tmp/z.json" "$tmp/h.json" <<'PY' && ok || bad "moe-dispatch --load JSON"
import json, sys
u, z, h = (json.load(open(p)) for p in sys.argv[1:])
assert z["dispatch_us"] > u["dispatch_us"] and z["rank_max_over_mean"] > u["rank_max_over_mean"]
# 8 x 1024 tokens x 2 selections over 8 experts: a mean of 2048 per expert and rank.
assert u["mean_expert_tokens"] == 2048 and u["mean_rank_tokens"] == 2048
# The histogram's hottest expert holds 400 of 1000 counts; top-2 draws without
# replacement give it a share between 0.4 and 2 x 0.4 of the selections.
assert 1.6 < h["expert_max_over_mean"] < 6.4, h["expert_max_over_mean"]
PY

echo "moe_dispatch: $passes passed, $fails failed"
[ "$fails" = 0 ]
