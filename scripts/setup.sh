#!/usr/bin/env bash
# One-step set-up on a fresh Debian 12 machine (run as root, or with sudo).
#   scripts/setup.sh main   install packages, build, run a 4-rank all_reduce_perf
#   scripts/setup.sh test   install packages, build, run the test suite
#   scripts/setup.sh train  install packages, build, a short tide-train run (2 ranks)
# BUILD_DIR (default: build) picks the build folder; MESON_ARGS (word-split)
# adds options to a new build's `meson setup` (CI: -Dgpu_archs=90 -Dgpu_sass=false).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-main}
build=${BUILD_DIR:-build}

packages=(
  build-essential g++ meson ninja-build pkg-config python3
  libgtest-dev googletest libgmock-dev libbenchmark-dev
  libhwloc-dev hwloc libucx-dev libibverbs-dev rdma-core
  openmpi-bin libopenmpi-dev libpmix-dev iproute2 procps iperf3
  clang
  libopenblas-dev libcli11-dev nlohmann-json3-dev fortunes
)
# PyTorch (the torch suite, tide_torch: libtorch-dev's headers, pybind11) and plots.
optional=(python3-torch libtorch-dev pybind11-dev python3-dev python3-matplotlib)

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${packages[@]}" "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${packages[@]}"
  # Without them tide_torch is not built and the torch suite skips.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${optional[@]}" || echo "== optional packages not installed: ${optional[*]}"
fi

# CUDA (nvcc for the device kernels; nccl.h for the NCCL shim) lives outside
# the Debian packages, under /usr/local/cuda when the machine has it.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

echo "== configure and build ($build)"
# shellcheck disable=SC2086
if [ -d "$build" ]; then
  meson setup --reconfigure "$build" ${MESON_ARGS-} >/dev/null
else
  meson setup "$build" ${MESON_ARGS-}
fi
ninja -C "$build" -j"$(nproc)"

case "$mode" in
  main)
    echo "== 4-rank all_reduce_perf"
    "$build/tools/tiderun/tiderun" -n 4 "$build/perf/all_reduce_perf" -b 8 -e 64M -f 4
    ;;
  test)
    echo "== meson test (all suites but perf)"
    meson test -C "$build" --no-suite perf --print-errorlogs --num-processes 2
    ;;
  train)
    echo "== tide-train: 2 data-parallel ranks, 300 steps on Debian's fortunes (docs/trainer.md)"
    "$build/tools/tiderun/tiderun" -n 2 "$build/trainer/tide-train" --dp 2 --steps 300 \
      --eval-every 100 --eval-batches 10 --sample 300
    ;;
  *)
    echo "usage: $0 main|test|train" >&2
    exit 2
    ;;
esac
