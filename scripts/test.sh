#!/usr/bin/env bash
# Installs what is missing, builds, checks that an installed iris works with find_package, and runs
# every test. GPU tests skip with the reason printed when no GPU is present; ctest's summary is last.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
iris_configure_and_build

# An installed iris must be usable from another CMake project.
rm -rf "$IRIS_BUILD_DIR/install" "$IRIS_BUILD_DIR/consumer"
cmake --install "$IRIS_BUILD_DIR" --prefix "$IRIS_BUILD_DIR/install" >/dev/null
cmake -S tests/consumer -B "$IRIS_BUILD_DIR/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$IRIS_BUILD_DIR/install" >/dev/null
ninja -C "$IRIS_BUILD_DIR/consumer" >/dev/null
"$IRIS_BUILD_DIR/consumer/iris_consumer"

# GPU tests share the GPUs: run one test at a time. ctest counts a skipped test among its "passed"
# percentage, so the last line spells the counts out: skipped GPU tests never read as passes.
cd "$IRIS_BUILD_DIR"
set +e
ctest --output-on-failure --timeout 600 "$@" 2>&1 | tee ctest-output.log
rc=${PIPESTATUS[0]}
set -e
passed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* +Passed +' ctest-output.log || true)
failed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception|Not Run)|Subprocess aborted|SEGFAULT' ctest-output.log || true)
skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' ctest-output.log || true)
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"
