#!/usr/bin/env bash
# Installs what iris needs to build and test, and only what is missing, so it also works on an
# offline GPU host that already has the tools. Idempotent. Needs the CUDA toolkit (12.4 or newer,
# 13.0 tested) in /usr/local/cuda or on PATH; everything else comes from Debian/Ubuntu packages.
set -euo pipefail

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
command -v g++ >/dev/null 2>&1 || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: missing ${need[*]} and no apt-get to install them" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: the CUDA toolkit (nvcc) is not installed; install CUDA 12.4 or newer into /usr/local/cuda" >&2
  exit 1
fi
echo "setup: build tools present"

# CUTLASS/CuTe headers for the GEMM core (src/ops/gemm_sm90.cu), from the pinned PyPI wheel, which
# ships them under cutlass_library/source/include. Header-only: nothing is built or linked. Without
# them iris still builds; iris::ops::gemm then throws and says to run this script.
CUTLASS_VERSION=4.2.0.0
cutlass_dir=.deps/cutlass/include
cd "$(dirname "$0")/.."
if [ -f "$cutlass_dir/cutlass/cutlass.h" ]; then
  echo "setup: CUTLASS headers present ($cutlass_dir)"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    echo "setup: no python3 -m pip; CUTLASS headers not installed, building without the GEMM core" >&2
  elif ! python3 -m pip download -q --no-deps --retries 2 --timeout 20 "nvidia-cutlass==$CUTLASS_VERSION" -d "$tmp" >"$tmp/pip.log" 2>&1; then
    echo "setup: could not download nvidia-cutlass==$CUTLASS_VERSION (offline?); building without the GEMM core:" >&2
    tail -n 3 "$tmp/pip.log" >&2
  else
    whl=$(ls "$tmp"/nvidia_cutlass-*.whl | head -n 1)
    # Unpack into a scratch folder first so an interrupted run never leaves a half-filled include dir.
    python3 - "$whl" "$tmp/unpacked" <<'PY'
import sys, zipfile
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            z.extract(name, sys.argv[2])
PY
    mkdir -p "$(dirname "$cutlass_dir")"
    rm -rf "$cutlass_dir"
    mv "$tmp/unpacked/cutlass_library/source/include" "$cutlass_dir"
    echo "setup: CUTLASS $CUTLASS_VERSION headers installed in $cutlass_dir"
  fi
fi
