#!/usr/bin/env bash
# Installs the Debian packages parmsim needs. Fast (no apt call) when all are present.
#   scripts/setup.sh --fuzz   also clang and libFuzzer (libclang_rt.fuzzer), for scripts/fuzz.sh
set -euo pipefail
pkgs=(cmake g++ make libboost-graph-dev libyaml-cpp-dev catch2 libcli11-dev
      nlohmann-json3-dev libfmt-dev libopenmpi-dev openmpi-bin python3-matplotlib
      libbenchmark-dev)
[ "${1:-}" = "--fuzz" ] && pkgs+=(clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
