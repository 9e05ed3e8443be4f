#!/usr/bin/env bash
# GPU correctness (ctest label "gpu"): every schedule on the CUDA executor
# against the dense reference, in fp32 (1e-5) and bf16 (2e-2), for world size
# 1 and loopback 4 and 8, and under mpirun with one process per GPU when the
# machine has several and parmsim has MPI. Exits 77 (skipped) without a usable GPU.
set -u
bin=$(realpath "$1")
gpu_info="$(dirname "$bin")/backend/parmsim-gpu-info"
if [ ! -x "$gpu_info" ] || ! "$gpu_info"; then
  echo "no usable GPU: skipped"
  exit 77
fi
fails=0
run() {
  echo "+ $*"
  "$@" || fails=$((fails + 1))
}
for dtype in fp32 bf16; do
  run "$bin" verify --backend cuda --gpus 1 --set mp=1,E=4,dtype=$dtype --schedule all
  run "$bin" verify --backend cuda --gpus 4 --node-gpus 2 --set dtype=$dtype --schedule all
  run "$bin" verify --backend cuda --gpus 8 --node-gpus 4 --set dtype=$dtype --schedule all
  run "$bin" verify --backend cuda --gpus 8 --node-gpus 4 --set mp=4,E=16,dtype=$dtype --schedule all
done
# Every builder option once, fp32.
run "$bin" verify --backend cuda --gpus 8 --node-gpus 4 --schedule search
# One process per GPU over NCCL, when there are enough GPUs.
ngpu=$("$gpu_info" | grep -c '^gpu ')
if [ "$ngpu" -ge 2 ] && [ "${PARMSIM_TEST_MPI:-1}" = 1 ] && command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  np=$([ "$ngpu" -ge 4 ] && echo 4 || echo 2)
  run mpirun -np "$np" --oversubscribe "$bin" verify --backend cuda --gpus "$np" --node-gpus "$np" --set mp=2 \
    --schedule all
fi
echo "gpu: $fails failed"
[ "$fails" = 0 ]
