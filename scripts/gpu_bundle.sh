#!/usr/bin/env bash
# Prepares gpu_bundle/bundle.tar.xz (git-ignored), the one file benchmarks/gpu/run.sh needs on
# the GPU machine, which has the CUDA toolkit (perhaps with cuBLAS and NCCL only inside
# PyTorch's wheels), PyTorch and an Ubuntu glibc (>= 2.36) but none of our Debian packages: a
# Release build for Hopper (sm_90) with portable CPU code (x86-64-v3), the subdp binary, the
# GPU tests and the GEMM benchmark, and every shared library they load that is neither the C runtime nor CUDA's
# (OpenBLAS, libgomp, Open MPI, fmt, zlib, ...). CUDA's libraries (cudart, cuBLAS, cuBLASLt,
# NCCL: over 600 MB) are not carried: run.sh's preflight finds them on the machine, in the
# toolkit or in PyTorch's wheels, and names any it cannot find. Carry only the tarball
# (device tool: carry ["gpu_bundle/bundle.tar.xz"]); with the repository it must stay under
# the 64 MiB the GPU machine takes in, which this script checks.
# --emulated: the same bundle from the emulated CUDA build (SUBDP_CUDA=EMULATE, build-emu) as
#   gpu_bundle/bundle-emulated.tar.xz, for a rehearsal of run.sh on a machine without a GPU:
#   SUBDP_GPU_REHEARSAL=1 SUBDP_GPU_BUNDLE=gpu_bundle/bundle-emulated.tar.xz benchmarks/gpu/run.sh OUT.
# --check: proves the bundle complete: runs its binary's CPU path in a minimal Debian chroot
#   (debootstrap --variant=minbase) that has none of our packages, with only the CUDA runtime
#   libraries added.
# Usage: scripts/gpu_bundle.sh [--emulated] [--check]   (set-up: scripts/setup.sh; --check: root)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/gpu_bundle
stage=$out/stage
emulated=0 check=0
for arg in "$@"; do
  case $arg in
    --emulated) emulated=1 ;;
    --check) check=1 ;;
    *) echo "gpu_bundle: unknown option $arg (expected --emulated, --check)" >&2; exit 2 ;;
  esac
done

if ((emulated)); then
  build=${SUBDP_GPU_BUILD_DIR:-$root/build-emu}
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSUBDP_CUDA=EMULATE >/dev/null
else
  build=${SUBDP_GPU_BUILD_DIR:-$root/build-gpu}
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSUBDP_CUDA=ON -DSUBDP_MARCH=x86-64-v3 \
    -DSUBDP_CUDA_ARCHITECTURES=90-real >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target subdp subdp_gpu_tests subdp_gpu_gemm_bench

rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib"
cp "$build/subdp" "$build/tests/gpu/subdp_gpu_tests" "$build/subdp_gpu_gemm_bench" "$stage/bin/"
# Libraries to carry: what ldd resolves, less the C runtime (the machine's own glibc and
# libstdc++ are newer) and CUDA's (the machine's toolkit).
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.'
cuda='^(libcudart|libcublas|libcublasLt|libnccl|libcudnn)'
for bin in "$stage"/bin/*; do
  if ldd "$bin" | grep -q "not found"; then
    echo "gpu_bundle: $bin needs libraries this machine lacks:" >&2
    ldd "$bin" | grep "not found" >&2
    exit 1
  fi
  ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $system || $name =~ $cuda ]] && continue
    cp -L "$path" "$stage/lib/$name"
  done
done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
tarball=$out/bundle.tar.xz
((emulated)) && tarball=$out/bundle-emulated.tar.xz  # never mistaken for the GPU's
tar -C "$stage" -cJf "$tarball" bin lib
packed=$(du -b "$tarball" | cut -f1)
echo "gpu_bundle: $tarball: $packed bytes packed ($(du -sb "$stage" | cut -f1) unpacked):" \
  "$(ls "$stage/lib" | tr '\n' ' ')"
# What the device tool carries: the repository's tracked files and the tarball.
repo=$(git -C "$root" ls-files -z | (cd "$root" && du -cb --files0-from=- 2>/dev/null) | tail -1 | cut -f1)
limit=$((64 << 20))
echo "gpu_bundle: with the repository ($repo bytes) $((packed + repo)) bytes of the $limit the GPU machine takes"
((packed + repo < limit)) || { echo "gpu_bundle: too large to carry" >&2; exit 1; }

((check)) || exit 0
# The completeness check: a minimal Debian with nothing of ours, the bundle, CUDA's runtime.
# The chroot lives in the git-ignored bundle folder (not a guessable /tmp path) and is reused
# only when its debootstrap finished (the marker file).
chroot_dir=${SUBDP_CHECK_CHROOT:-$out/chroot}
if [[ ! -f $chroot_dir/.subdp-debootstrap-done ]]; then
  command -v debootstrap >/dev/null ||
    { echo "gpu_bundle --check: needs debootstrap (apt-get install debootstrap) and root" >&2; exit 1; }
  rm -rf "$chroot_dir"
  debootstrap --variant=minbase bookworm "$chroot_dir" http://deb.debian.org/debian >/dev/null
  touch "$chroot_dir/.subdp-debootstrap-done"
fi
rm -rf "$chroot_dir/opt/subdp" && mkdir -p "$chroot_dir/opt/subdp/cuda" "$chroot_dir/opt/subdp/data"
tar -C "$chroot_dir/opt/subdp" -xJf "$tarball"
# The CUDA runtime libraries the binaries load (the GPU machine's toolkit has them), found by
# ldd rather than by soname, so any CUDA major version works.
for bin in "$stage"/bin/*; do
  ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if [[ $name =~ $cuda ]]; then cp -L "$path" "$chroot_dir/opt/subdp/cuda/$name"; fi
  done
done
cp "$root/tests/parity/gpt_text.txt" "$chroot_dir/opt/subdp/data/"
cat > "$chroot_dir/opt/subdp/gpt.toml" <<TOML
[model]
name = "gpt"
context = 32
width = 32
heads = 4
depth = 2
[data]
name = "text"
path = "/opt/subdp/data/gpt_text.txt"
[train]
steps = 3
batch_size = 2
threads = 1
eval_batches = 1
[optim]
name = "adamw"
lr = 0.001
TOML
env="LD_LIBRARY_PATH=/opt/subdp/lib:/opt/subdp/cuda"
chroot "$chroot_dir" /usr/bin/env $env /opt/subdp/bin/subdp version
chroot "$chroot_dir" /usr/bin/env $env /opt/subdp/bin/subdp train /opt/subdp/gpt.toml | tail -1
chroot "$chroot_dir" /usr/bin/env $env /opt/subdp/bin/subdp_gpu_tests --gtest_brief=1 | tail -2 || true
cuda_msg=$(chroot "$chroot_dir" /usr/bin/env $env /opt/subdp/bin/subdp train /opt/subdp/gpt.toml \
  --set device.type=cuda 2>&1 || true)
if grep -q "no CUDA device was found" <<<"$cuda_msg"; then
  echo "gpu_bundle --check: ok (the bundle runs in a chroot without our packages; cuda: no device here)"
else
  echo "gpu_bundle --check: FAIL: device.type=cuda did not report the missing device" && exit 1
fi
