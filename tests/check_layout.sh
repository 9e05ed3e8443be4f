#!/usr/bin/env bash
# The layout rules (docs/architecture.md, "How the code is laid out"):
#  1. nothing under sim/ includes backend/ or cli/;
#  2. the simulator library (parmsim_sim) links none of CUDA, cuBLAS, NCCL or
#     MPI (its link libraries, written by CMake at configure time);
#  3. the parmsim program needs none of the CUDA libraries at start-up (they
#     come with the CUDA module, opened only for --backend cuda);
#  4. without the module beside the program, --backend cuda fails in one line
#     naming why; with it, the module opens (whatever the GPUs say).
# usage: check_layout.sh SOURCE_DIR SIM_LINKS_FILE PARMSIM
set -u
src=$1 links=$2 bin=$(realpath "$3")
fails=0
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}

hits=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(backend|cli)/' "$src/sim" || true)
[ -z "$hits" ] || fail "sim/ includes backend/ or cli/:
$hits"

# The floors of sim/, lowest first (docs/architecture.md): a folder includes
# only folders below it, so no arrow runs up and no two folders form a circle.
# A new folder must be placed here.
floors=(core io graph calib compute topo net coll engine moe validation fit mpi sweep)
for dir in "$src"/sim/*/; do
  d=$(basename "$dir")
  [[ " ${floors[*]} " == *" $d "* ]] || fail "sim/$d is on no floor: add it to the floors in tests/check_layout.sh"
done
for i in "${!floors[@]}"; do
  d=${floors[$i]}
  [ -d "$src/sim/$d" ] || continue
  below=" ${floors[*]:0:$i} $d "
  while IFS=: read -r file line inc; do
    [ -n "$file" ] || continue
    to=$(sed -E 's|.*"sim/([a-z_]+)/.*|\1|' <<< "$inc")
    [[ $below == *" $to "* ]] || fail "$file:$line: sim/$d includes sim/$to, a floor above it"
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"sim/[a-z_]+/' "$src/sim/$d" || true)
done

[ -s "$links" ] || fail "no link libraries of parmsim_sim in $links"
# The floors' own names (parmsim::mpi is the shim, not MPI) are not libraries from outside.
if sed -E 's/(parmsim_|parmsim::)[a-z_]+//g' "$links" | grep -qiE 'cuda|cublas|nccl|mpi'; then
  fail "a library of sim/ links CUDA, cuBLAS, NCCL or MPI: $(tr '\n' ' ' < "$links")"
fi

if ! deps=$(ldd "$bin" 2>&1); then
  fail "ldd $bin: $deps"
elif grep -qiE 'libcuda|libcublas|libnccl' <<< "$deps"; then
  fail "parmsim loads CUDA libraries at start-up:
$(grep -iE 'libcuda|libcublas|libnccl' <<< "$deps")"
fi

module=$(dirname "$bin")/libparmsim_cuda.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$bin" "$tmp/parmsim"
out=$("$tmp/parmsim" verify --backend cuda 2>&1)
rc=$?
if [ -e "$module" ]; then
  want="parmsim: error: verify --backend cuda: the CUDA backend is not available: $tmp/libparmsim_cuda.so: "
else
  want="parmsim: error: verify --backend cuda: this parmsim was built without CUDA"
fi
if [ $rc != 1 ] || [ "$(printf '%s\n' "$out" | wc -l)" != 1 ] || [[ $out != "$want"* ]]; then
  fail "--backend cuda without its module: exit $rc: $out"
fi
if [ -e "$module" ]; then
  # GPU 1023 exists nowhere: the executor refuses it after the module opened
  # (or the module says there is no usable GPU), and nothing runs.
  out=$("$bin" verify --backend cuda --device 1023 2>&1)
  rc=$?
  if [ $rc != 1 ] || [[ $out == *"not available"* ]] ||
    { [[ $out != *"no usable GPU"* ]] && [[ $out != *"no GPU 1023"* ]]; }; then
    fail "--backend cuda with its module: exit $rc: $out"
  fi
fi
# A Catch2 test whose name starts with '-' is run by ctest as an option, not a test.
if grep -n 'TEST_CASE("-' "$src"/tests/*.cpp; then fail "a TEST_CASE name starts with '-' (ctest passes it as an option)"; fi
echo "layout: $fails failed"
[ "$fails" = 0 ]
