#!/usr/bin/env bash
# Installs what iris needs to build and test, and only what is missing, so it also works on an
# offline GPU host that already has the tools. Idempotent. Needs the CUDA toolkit (12.4 or newer,
# 13.0 tested) in /usr/local/cuda or on PATH; everything else comes from Debian/Ubuntu packages.
set -euo pipefail

# Every package this script may install is pinned to the version Debian 12 (bookworm, CI's distribution)
# ships, where the archive offers it; a distribution without that version (an Ubuntu GPU host) gets its
# own, and says so. GoogleTest since 2026-12-05 (morning), the build tools since the evening.
declare -A PINNED=([cmake]=3.25.1-1 [ninja-build]=1.11.1-2~deb12u1 [g++]=4:12.2.0-3 [libgtest-dev]=1.12.1-0.2
  [python3-pip]=23.0.1+dfsg-1)
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
command -v g++ >/dev/null 2>&1 || need+=(g++)
# GoogleTest from the distribution, or one installed by hand under /usr/local (CMake's find_package finds
# either).
[ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ] || need+=(libgtest-dev)
# pip fetches the CUTLASS headers below, when they are not here yet.
if [ ! -f "$(dirname "$0")/../.deps/cutlass/include/cutlass/cutlass.h" ] &&
  ! { command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; }; then
  need+=(python3-pip)
fi
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: missing ${need[*]} and no apt-get to install them" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "setup: installing packages needs root, and there is no sudo; as root run: apt-get install ${need[*]}" >&2
      exit 1
    fi
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  for i in "${!need[@]}"; do
    pkg=${need[$i]}
    pin=${PINNED[$pkg]:-}
    [ -n "$pin" ] || continue
    if apt-cache madison "$pkg" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "$pin"; then
      need[$i]="$pkg=$pin"
    else
      echo "setup: $pkg $pin (the pinned version, Debian 12's) is not offered here; installing this distribution's: $(apt-cache policy "$pkg" | awk '/Candidate/ {print $2}')" >&2
    fi
  done
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: the CUDA toolkit (nvcc) is not installed; install CUDA 12.4 or newer into /usr/local/cuda" >&2
  exit 1
fi
# CMakeLists.txt asks for CMake 3.25: say so here rather than in a configure error.
cmake_version=$(cmake --version | head -n 1 | grep -oE '[0-9]+\.[0-9]+' | head -n 1)
if ! printf '3.25\n%s\n' "$cmake_version" | sort -V -C; then
  echo "setup: cmake $cmake_version is older than 3.25, which iris needs; install a newer cmake (e.g. python3 -m pip install 'cmake>=3.25')" >&2
  exit 1
fi
echo "setup: build tools present"

# CUTLASS/CuTe headers for the GEMM core (src/ops/gemm_sm90.cu), from the pinned PyPI wheel, which
# ships them under cutlass_library/source/include. Header-only: nothing is built or linked. Without
# them iris builds no GEMM core (iris::ops::gemm then throws and says to run this script), so a failed
# download stops here unless IRIS_ALLOW_NO_CUTLASS=1 asks for such a build: CI never goes green without
# compiling the GEMM kernels, and a GPU host without network says to carry .deps/ instead.
# Pinned by version and by the wheel's sha256; .deps/cutlass/VERSION, written last, says which headers
# are there, so headers of another version (or a half-finished unpack) are fetched again.
CUTLASS_VERSION=4.2.0.0
CUTLASS_SHA256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
cutlass_dir=.deps/cutlass/include
cutlass_stamp=.deps/cutlass/VERSION
cd "$(dirname "$0")/.."
if [ -f "$cutlass_dir/cutlass/cutlass.h" ] && [ "$(cat "$cutlass_stamp" 2>/dev/null)" = "$CUTLASS_VERSION" ]; then
  echo "setup: CUTLASS $CUTLASS_VERSION headers present ($cutlass_dir)"
else
  [ -e "$cutlass_dir" ] &&
    echo "setup: $cutlass_dir is not CUTLASS $CUTLASS_VERSION ($cutlass_stamp: $(cat "$cutlass_stamp" 2>/dev/null || echo none)); fetching it"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  no_cutlass() {
    echo "setup: $1" >&2
    if [ "${IRIS_ALLOW_NO_CUTLASS:-0}" = 1 ]; then
      echo "setup: IRIS_ALLOW_NO_CUTLASS=1: building without the GEMM core" >&2
    else
      echo "setup: the GEMM core needs the CUTLASS $CUTLASS_VERSION headers in $cutlass_dir: copy .deps/ from a machine that ran this script, or set IRIS_ALLOW_NO_CUTLASS=1 to build without the GEMM core" >&2
      exit 1
    fi
  }
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    no_cutlass "no python3 -m pip to download nvidia-cutlass==$CUTLASS_VERSION"
  elif ! python3 -m pip download -q --no-deps --retries 2 --timeout 20 "nvidia-cutlass==$CUTLASS_VERSION" -d "$tmp" >"$tmp/pip.log" 2>&1; then
    tail -n 3 "$tmp/pip.log" >&2
    no_cutlass "could not download nvidia-cutlass==$CUTLASS_VERSION (offline?)"
  else
    whl=$(ls "$tmp"/nvidia_cutlass-*.whl | head -n 1)
    got=$(python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$whl")
    if [ "$got" != "$CUTLASS_SHA256" ]; then
      echo "setup: $(basename "$whl") has sha256 $got, not the pinned $CUTLASS_SHA256; not using it" >&2
      exit 1
    fi
    # Unpacked next to its place (same file system: the move is a rename), and stamped last, so an
    # interrupted run leaves headers without the stamp, which the next run fetches again.
    mkdir -p "$(dirname "$cutlass_dir")"
    unpack="$(dirname "$cutlass_dir")/.unpack.$$"
    rm -rf "$unpack" "$cutlass_stamp"
    python3 - "$whl" "$unpack" <<'PY'
import sys, zipfile
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            z.extract(name, sys.argv[2])
PY
    rm -rf "$cutlass_dir"
    mv "$unpack/cutlass_library/source/include" "$cutlass_dir"
    rm -rf "$unpack"
    echo "$CUTLASS_VERSION" > "$cutlass_stamp"
    echo "setup: CUTLASS $CUTLASS_VERSION headers installed in $cutlass_dir (wheel sha256 checked)"
  fi
fi
