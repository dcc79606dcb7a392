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
