#!/usr/bin/env bash
# The main job: install what is missing, build, check the symmetric heap across all local GPUs
# (heap_exchange), run a tensor-parallel MLP block on the fused ops (tp_mlp), then a short iris-bench suite: every collective against NCCL, and every fused
# GEMM + communication op against cuBLAS + NCCL, side by side.
# Without a GPU, heap_exchange says so and the script exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
iris_configure_and_build -DIRIS_BUILD_TESTS=OFF
"$IRIS_BUILD_DIR/examples/heap_exchange"
"$IRIS_BUILD_DIR/examples/tp_mlp"
exec "$IRIS_BUILD_DIR/bench/iris-bench" --quick --fused "$@"
