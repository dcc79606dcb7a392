#!/usr/bin/env bash
# Installs what is missing, builds, checks that an installed iris works with find_package, and runs
# every test. GPU tests skip with the reason printed when no GPU is present; ctest's summary is last.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
# Tests on: the build folder may hold main.sh's configuration, which leaves them out.
iris_configure_and_build -DIRIS_BUILD_TESTS=ON

# An installed iris must be usable from another CMake project.
rm -rf "$IRIS_BUILD_DIR/install" "$IRIS_BUILD_DIR/consumer"
cmake --install "$IRIS_BUILD_DIR" --prefix "$IRIS_BUILD_DIR/install" >/dev/null
cmake -S tests/consumer -B "$IRIS_BUILD_DIR/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$(cd "$IRIS_BUILD_DIR" && pwd)/install" >/dev/null
ninja -C "$IRIS_BUILD_DIR/consumer" >/dev/null
"$IRIS_BUILD_DIR/consumer/iris_consumer"

# GPU tests share the GPUs: run one test at a time. ctest counts a skipped test among its "passed"
# percentage, so the last line spells the counts out: skipped GPU tests never read as passes.
cd "$IRIS_BUILD_DIR"
# What decides which GPU test instances exist and how ranks share GPUs, said before the run: with the
# default 2, no 3-, 4- or 8-rank instance exists, so none is counted among the skipped either.
echo "test: IRIS_TEST_MAX_RANKS=${IRIS_TEST_MAX_RANKS:-2 (default)} IRIS_TEST_RANKS_PER_GPU=${IRIS_TEST_RANKS_PER_GPU:-1 (default)} IRIS_MPS=${IRIS_MPS:-unset}"
set +e
# --no-tests=error: a build without tests fails here instead of passing with none.
ctest --output-on-failure --no-tests=error --timeout 600 "$@" 2>&1 | tee ctest-output.log
rc=${PIPESTATUS[0]}
set -e
# One line per test ("  3/685 Test   #3: Name ....   Passed    0.01 sec"); the list ctest repeats at the
# end is not counted.
result=' *[0-9]+/[0-9]+ Test +#[0-9]+: '
passed=$(grep -cE "^$result.* +Passed +" ctest-output.log || true)
failed=$(grep -cE "^$result.*(\*\*\*(Failed|Timeout|Exception|Not Run)|Subprocess aborted|SEGFAULT|Child aborted)" ctest-output.log || true)
skipped=$(grep -cE "^$result.*\*\*\*Skipped" ctest-output.log || true)
echo "$passed passed, $failed failed, $skipped skipped"
if [ "$skipped" -gt 0 ]; then
  # ctest prints no output of a skipped test: its reasons, once each, from the log of this run.
  # gtest prints a skip as "<file>:<line>: Skipped" followed by the reason.
  echo "skip reasons (tests, reason):"
  grep -A1 -E ': Skipped$' Testing/Temporary/LastTest.log 2>/dev/null | grep -vE ': Skipped$|^--$' |
    sort | uniq -c | sort -rn | head -n 10 || true
fi
exit "$rc"
