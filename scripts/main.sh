#!/usr/bin/env bash
# The main job: install what is missing, build, and run the heap exchange over all local GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
iris_configure_and_build -DIRIS_BUILD_TESTS=OFF
exec "$IRIS_BUILD_DIR/examples/heap_exchange" "$@"
