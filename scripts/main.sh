#!/usr/bin/env bash
# The main job: install what is missing, build, check the symmetric heap across all local GPUs
# (heap_exchange), then run a short iris-bench suite: every collective against NCCL, and every fused
# GEMM + communication op against cuBLAS + NCCL, side by side.
# Without a GPU, heap_exchange says so and the script exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
iris_configure_and_build -DIRIS_BUILD_TESTS=OFF
"$IRIS_BUILD_DIR/examples/heap_exchange"
exec "$IRIS_BUILD_DIR/bench/iris-bench" --quick --fused "$@"
