#!/usr/bin/env bash
# Installs every dependency of subdp from Debian on a fresh machine (run as root).
# Safe to run twice: apt-get install skips what is present.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(
  build-essential cmake pkg-config git
  libopenblas-openmp-dev libopenblas0-openmp libopenblas0-pthread
  openmpi-bin libopenmpi-dev
  libfmt-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev googletest
  dataset-fashion-mnist
  python3 python3-torch python3-numpy python3-matplotlib
  clang libclang-rt-14-dev clang-format
  libomp-dev  # OpenMP for clang, which builds the emulated CUDA device
  libboost-context-dev  # fibers of the emulated CUDA device (kernels/emu)
)
# npm (for the Brown corpus) often comes with Node.js outside Debian; add Debian's only when absent.
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all dependencies present"
