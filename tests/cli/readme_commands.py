#!/usr/bin/env python3
"""Runs every command README.md and the user docs show and checks what they say it writes.

usage: readme_commands.py BUILD/parmsim REPO_ROOT

Each command of a ```sh block (and each `$ command` with its output shown) of
README.md, then of each file of DOCS in turn, is run from the repository root
with `build/` read as the binary's build folder and `out/` as a folder that does
not exist yet (a fresh clone has no out/: the commands make it). It must exit 0
and its output must have the file names, columns and keys the docs name for it
(CHECKS below); a command shown with its output must print exactly that. A
command with no entry in CHECKS fails the test, so a new command gets checked.
GPU commands are skipped where no GPU is usable, and so are commands needing
what the build left out: mpirun without MPI, build/parmsim_bench without the
benchmarks (ctest sets PARMSIM_TEST_MPI and PARMSIM_TEST_BENCH to 0 or 1; unset
means 1). Not run here: scripts/run-main.sh (the main job, ~5 min;
scripts/readme_blocks.py --check compares its README figures with what it
wrote) and scripts/test.sh (it runs this test).
"""
import csv
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

BIN, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
BUILD = os.path.dirname(BIN)
TMP = tempfile.mkdtemp(prefix="readme.")
OUT = os.path.join(TMP, "out")  # made by the first command that writes to it
# The docs whose commands run after the README's, in this order (each in the order it shows them).
DOCS = ["docs/guide.md", "docs/models.md", "docs/results.md", "docs/refusals.md", "docs/moe-dispatch.md"]
HAVE_GPU = subprocess.run("nvidia-smi -L", shell=True, capture_output=True).returncode == 0
# (pattern of the commands that need it, whether this build has it)
BUILT = [(r"\bmpirun\b", os.environ.get("PARMSIM_TEST_MPI", "1") == "1"),
         (r"build/parmsim_bench\b", os.environ.get("PARMSIM_TEST_BENCH", "1") == "1")]

COLL_HEADER = r"#\s+size\(B\)\s+time\(us\)\s+algbw\(GB/s\)\s+busbw\(GB/s\)\s+algorithm/protocol/channels"
LAYER_HEADER = r"schedule\s+forward_us\s+backward_us\s+total_us\s+speedup\s+model_us\s+intra/GPU\s+inter/GPU\s+exposed_us"
PHASE_HEADER = r"^schedule\s+gate\s+order\s+experts\s+iorder\s.*comm_us$"
TRACE_COLS = "task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops"
SWEEP_COLS = ("config,topology,gpus,B,L,M,H,E,k,f,mp,dtype,ds_moe,dispatch,saa,host_op,network,schedule,forward_us,backward_us,total_us,model_us,"
              "speedup_vs_baseline,model_speedup_vs_baseline,chosen_by_model,compute_us,exposed_comm_us,"
              "intra_node_bytes,inter_node_bytes,peak_memory_bytes,fits")


def out(p):
    return os.path.join(OUT, p)


def header(path):
    with open(path) as f:
        return f.readline().rstrip("\n")


def has(*patterns):
    def check(stdout):
        for p in patterns:
            assert re.search(p, stdout, re.M), f"output lacks /{p}/"
    return check


def coll_json(stdout):
    rows = json.loads(stdout)
    assert rows and all(set(r) == {"bytes", "time_us", "algbw_GBps", "busbw_GBps", "algorithm"} for r in rows), rows[:1]


def layer_json(stdout):
    j = json.loads(stdout)
    assert set(j["schedules"]) == {"baseline", "s1", "s2"}, j.keys()
    for s in j["schedules"].values():
        for k in ("forward_us", "backward_us", "total_us", "model_us", "intra_node_bytes", "inter_node_bytes",
                  "compute_us", "phases"):
            assert k in s, k
        assert abs(sum(s["phases"].values()) - s["total_us"]) <= 1e-9 * s["total_us"], s["phases"]
    assert j["auto"] in ("s1", "s2") and j["search"]["tried"] == 30


def moe_dispatch_json(stdout):
    j = json.loads(stdout)
    for k in ("dispatch_us", "combine_us", "dispatch_rdma_GBps", "combine_rdma_GBps"):
        assert j[k] > 0, k
    assert j["dispatch_nvl_GBps"] is None and j["combine_nvl_GBps"] is None  # low-latency: no NVL figure


def files(*names, head=None):
    def check(stdout):
        for n in names:
            assert os.path.isfile(out(n)) and os.path.getsize(out(n)) > 0, f"out/{n} not written"
            if head is not None and n.endswith(".csv"):
                assert header(out(n)) == head, f"out/{n}: header {header(out(n))!r}"
    return check


def sweep(name, mpi=False):
    def check(stdout):
        files(name, head=SWEEP_COLS)(stdout)
        assert os.path.isfile(out(name + ".run.json")), f"out/{name}.run.json not written"
        with open(out(name)) as f:
            n = sum(1 for _ in csv.DictReader(f))
        assert n == 1296 * 3 if "paper-grid" in name else n == 10368 * 3, n
        if mpi:  # the same file as without mpirun
            assert open(out(name)).read() == open(out("paper-grid.csv")).read(), "mpirun's CSV differs"
    return check


def trace_file(name):
    """`layer --trace out/NAME`: one file, every schedule's passes in it, its path printed."""
    def check(stdout):
        assert os.path.isfile(out(name)) and os.path.getsize(out(name)) > 0, f"out/{name} not written"
        assert glob.glob(out(os.path.splitext(name)[0]) + "*") == [out(name)], "more than one trace file"
        assert re.search(rf"^trace: .*/{re.escape(name)} \(baseline, s1, s2; forward and backward\)$", stdout, re.M), \
            "the trace's path is not printed"
        names = {e["args"]["name"] for e in json.load(open(out(name)))["traceEvents"] if e.get("name") == "process_name"}
        assert names == {f"{s} {p}" for s in ("baseline", "s1", "s2") for p in ("forward", "backward")}, names
    return check


def report(folder):
    def check(stdout):
        assert re.search(r"^# Sweep paper-grid$", stdout, re.M) and re.search(r"^\| cluster-32gpu \| s1 \| 648 \|", stdout, re.M), \
            stdout[:300]
        for f in ("summary.md", "speedup_cdf.png", "s1_vs_s2_wins.png", "time_breakdown.png"):
            assert os.path.isfile(out(f"{folder}/{f}")), f"out/{folder}/{f} not written"
    return check


def verify(n, search=False):
    def check(stdout):
        ok = [l for l in stdout.splitlines() if l.rstrip().endswith(" ok")]
        assert len(ok) == n, stdout
        if search:  # the baseline, then each variant's full name, down to its last option
            assert all(re.search(r"chunks=[124],a2a_algo=\w+ ", l) for l in ok[1:]), ok
    return check


def both(*checks):
    def check(stdout):
        for c in checks:
            c(stdout)
    return check


# (pattern matched against the README command, check of its stdout, or a string: why it is skipped)
MODEL_RANGE_COLS = ("model,topology,p2p,moe_every,batch,moe_layers,shipped,baseline_iteration_us,iteration_speedup_s1,"
                    "iteration_speedup_s2,moe_speedup_s1,moe_speedup_s2")
CHECKS = [
    (r"^bash scripts/run-main\.sh", "the main job (~5 min); its README blocks are checked by ctest readme_generated"),
    (r"^bash scripts/test\.sh", "runs this test"),
    (r"--backend cuda|gpu-check\.sh|parmsim-gpu", None),  # GPU: skipped without one, else exit 0
    (r"compare --measured examples/measured-h100\.csv -o out/compare-h100\.csv",
     both(files("compare-h100.csv", head="name,measured_us,predicted_us,kind,row"), has(r"^MAPE [0-9.]+% over 12 row"))),
    (r"calibrate --import-nccl-tests \S+ --ranks 16 --nodes 2 .*-o out/cal-p5\.yaml", files("cal-p5.yaml")),
    (r"layer .*--calibration out/cal-p5\.yaml", has(LAYER_HEADER, r"^calibration \S*out/cal-p5\.yaml: \d+ of the \d+ collective kinds",
                                                     r"unused entry \S*out/cal-p5\.yaml")),
    (r"calibrate --plan ", has(r"^nccl-tests runs that would measure them", r"alltoall_perf")),
    (r"collective .*-b 8B,64KiB,1MiB,16MiB,1GiB$", "shown"),  # compared with the output the README shows
    (r"collective .*--json", coll_json),
    (r"collective .*--calibration out/nccl-calibration\.yaml", has(COLL_HEADER, r"^\s+17179869184\s")),
    (r"collective ", has(COLL_HEADER)),
    (r"validate nccl", has(r"MAPE")),
    (r"validate gemm", has(r"MAPE")),
    (r"validate moe-dispatch tests/data/moe-dispatch-small\.csv",
     has(r"^MAPE over the 8 phases \(4 rows\) of modelled kernels: [0-9.]+%", r"^  deepseek-deepep-v1 ")),
    (r"^build/parmsim validate moe-dispatch$", "all 226 rows (~10 min); tests/cli/moe_dispatch.sh runs it on a few"),
    (r"^build/parmsim validate moe-dispatch --json", "all 226 rows (~10 min), as above"),
    (r"moe-dispatch .*--kernel deepep-ll --json", moe_dispatch_json),
    (r"moe-dispatch -t topologies/dgx-b200\.yaml .*--kernel deepep-normal --sms 16$",
     has(r"^moe-dispatch deepep-normal on dgx-b200", r"^dispatch\s+528\.1\s+-\s+310\.79$")),
    (r"moe-dispatch .*--kernel deepep-normal", has(r"^moe-dispatch deepep-normal on h800-cluster", r"^dispatch\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+$",
                                                r"^combine\s+[0-9.]+")),
    (r"validate moe", has(r"^MAPE over the \d+ rows of modelled systems", r"^  tutel-ut ")),
    (r"layer .*--estimate", has(r"^baseline\s+[0-9.e+]+ tasks", r"^all\s+[0-9.]+ GiB and about")),
    (r"layer .*--sensitivity", has(LAYER_HEADER, r"^sensitivity: auto's speedup", r"^nccl\.launch\s+0us\s+50us")),
    (r"simulate .*--trace out/demo\.json --csv out/demo\.csv", both(files("demo.json"), files("demo.csv", head=TRACE_COLS))),
    (r"topology .*--route 0 --to 5", has(r"gpu0", r"gpu5|n1")),
    (r"layer .*--search --json", layer_json),
    (r"layer .*--trace out/layer\.json", both(has(LAYER_HEADER, PHASE_HEADER), trace_file("layer.json"))),
    (r"layer .*--calibration out/nccl-calibration\.yaml", has(LAYER_HEADER, PHASE_HEADER)),
    (r"layer .*ds_moe=mcore", has(LAYER_HEADER, PHASE_HEADER, r"^baseline: Megatron-Core's MoELayer with index dispatch")),
    (r"layer ", has(LAYER_HEADER, PHASE_HEADER, r"^baseline: .*DeepSpeed-MoE .* dispatch", r"^auto \(alpha-beta model\) picks s[12]")),
    (r"^scripts/report\.py out/paper-grid\.csv -o out/paper-grid-report$", report("paper-grid-report")),
    (r"^mkdir -p out && cp topologies/dgx-h100\.yaml out/my-cluster\.yaml$", files("my-cluster.yaml")),
    (r"topology -t out/my-cluster\.yaml --topo-set nodes=4$", has(r"^topology dgx-h100: 32 GPUs \(h100\) in 4 nodes of 8")),
    (r"mpirun .*sweep experiments/paper-grid\.yaml -o out/paper-grid-mpi\.csv", sweep("paper-grid-mpi.csv", mpi=True)),
    (r"sweep experiments/paper-grid\.yaml -o out/paper-grid\.csv", sweep("paper-grid.csv")),
    (r"sweep experiments/ablation\.yaml -o out/ablation\.csv", sweep("ablation.csv")),
    (r"model experiments/bert-moe\.yaml", has(r"embedding_and_head", r"attention", r"dense_ffn", r"moe_layer",
                                              r"dp_grad_allreduce", r"hidden_us")),
    (r"model experiments/deepseek-v3\.yaml", has(r"schedule dualpipe, 120 micro-batch", r"^pipeline_bubble\s+1 ",
                                                  r"^moe_layer\s+480 ", r"^p2p\s+240 ", r"^  alltoall ", r"^iteration_us")),
    (r"scripts/model_range\.py --bin build/parmsim --out out/model-range\.csv",
     both(has(r"^model_range: 24 runs -> "), files("model-range.csv", head=MODEL_RANGE_COLS))),
    (r"scripts/paper_tables\.py --results out", both(files("paper-comparison.md"), has(r"^\| grid, cluster-32gpu", r"^\| bert-moe \| 2 \(6\) \| 8 \| \*\*"))),
    (r"plots/make_figures\.py --results out --out out/figures", lambda s: glob.glob(out("figures/*.png")) or
     (_ for _ in ()).throw(AssertionError("no out/figures/*.png"))),
    (r"^build/parmsim_bench$", has(r"BM_EventQueue", r"BM_FatTreeAlltoAll", r"BM_Switch1024", r"BM_LayerAllSchedules",
                                   r"BM_ModelLayerEval", r"BM_FatTreeAllReduce")),
    (r"verify .*--schedule search", verify(31, search=True)),
    (r"verify\b", verify(3)),
    (r"execute --backend cpu --schedule s2 --trace out/exec-s2\.csv", files("exec-s2.csv", head=TRACE_COLS)),
    (r"execute --backend cpu .*--trace out/cpu-exec\.csv", files("cpu-exec.csv", head=TRACE_COLS)),
    (r"calibrate --backend cpu -o out/cpu-calibration\.yaml", both(files("cpu-calibration.yaml"),
                                                                    lambda s: "kernels:" in open(out("cpu-calibration.yaml")).read() or
                                                                    (_ for _ in ()).throw(AssertionError("no kernels:")))),
    (r"calibrate --import-nccl-tests \S+ -t dgx-h100 -o out/nccl-calibration\.yaml", both(files("nccl-calibration.yaml"),
                                                                                         has(r"^allreduce\s+8\s+1\s+intra"))),
    (r"calibrate --import-nccl-tests .* -o out/nccl-calibration\.yaml", both(files("nccl-calibration.yaml"), has(r"16777216|16MiB"))),
    (r"calibrate --fit-machine .* -o out/h100-overlay\.yaml", both(files("h100-overlay.yaml"), has(r"MAPE|mape"))),
    (r"compare --measured out/cpu-exec\.csv .* -o out/compare-cpu\.csv", files("compare-cpu.csv")),
]


# What scripts/run-main.sh writes before a README command that reads its results
# (the README shows these commands after a main-job run).
PREPARE = {
    r"scripts/paper_tables\.py": ["build/parmsim model experiments/bert-moe.yaml --json > out/bert-moe.json",
                                  "build/parmsim model experiments/gpt2-moe.yaml --json > out/gpt2-moe.json",
                                  "scripts/model_range.py --bin build/parmsim --out out/model-range.csv"],
}


def commands(readme):
    """The README's commands in order: each line of a ```sh block (continuations joined) and `$ cmd` lines."""
    cmds, block = [], None
    lines = readme.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            block = "sh" if line.strip() == "```sh" and block is None else ("other" if block is None else None)
            i += 1
            continue
        if block is None or line.startswith("$ "):
            if block == "other" and line.startswith("$ "):
                shown = []
                j = i + 1
                while j < len(lines) and not lines[j].startswith("```"):
                    shown.append(lines[j])
                    j += 1
                cmds.append((line[2:], "\n".join(shown)))
            i += 1
            continue
        if block == "sh" and line.strip() and not line.lstrip().startswith("#"):
            cmd = line
            while cmd.rstrip().endswith("\\"):
                i += 1
                cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
            cmds.append((re.sub(r"\s+#\s.*$", "", cmd).strip(), None))
        i += 1
    return cmds


def main():
    os.chdir(ROOT)
    fails = passes = skips = 0
    only = os.environ.get("README_ONLY")  # a regex: run only the matching commands (when fixing one)
    shown_in = []
    for doc in ["README.md"] + DOCS:
        shown_in += [(doc, c, s) for c, s in commands(open(doc).read())]
    assert any(d == "README.md" for d, _, _ in shown_in) and all(any(d == x for d, _, _ in shown_in) for x in DOCS[:2])
    for doc, cmd, shown in shown_in:
        if only and not re.search(only, cmd):
            continue
        entry = next(((p, c) for p, c in CHECKS if re.search(p, cmd)), None)
        if entry is None:
            print(f"FAIL no check for the command of {doc}: {cmd}")
            fails += 1
            continue
        check = entry[1]
        if isinstance(check, str) and check != "shown":
            skips += 1
            continue
        if check is None and not HAVE_GPU or any(re.search(p, cmd) and not have for p, have in BUILT):
            skips += 1
            continue
        def local(c):
            c = re.sub(r"(?<![\w/.-])out(?=/|\s|$)", OUT, c)
            return re.sub(r"(?<![\w/])build/", BUILD + "/", c)

        for pat, pre in PREPARE.items():
            if re.search(pat, cmd):
                os.makedirs(OUT, exist_ok=True)  # for the shell's redirections
                for c in pre:
                    subprocess.run(local(c), shell=True, check=True)
        run = local(cmd)
        t0 = time.time()
        r = subprocess.run(run, shell=True, capture_output=True, text=True)
        took = time.time() - t0
        try:
            assert r.returncode == 0, f"exit {r.returncode}: {r.stderr.strip()[-400:]}"
            if shown is not None:  # `$ command` and its output: exactly that output
                assert r.stdout.rstrip("\n") == shown.rstrip("\n"), f"output differs from {doc}'s:\n{r.stdout}"
            if check is not None and check != "shown":
                check(r.stdout)
            passes += 1
            print(f"ok   {took:5.1f} s  {doc}: {cmd}")
        except (AssertionError, ValueError, KeyError, OSError) as e:
            fails += 1
            print(f"FAIL {doc}: {cmd}\n     {e}")
    print(f"readme: {passes} commands passed, {fails} failed, {skips} skipped")
    subprocess.run(["rm", "-rf", TMP])
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
