#!/usr/bin/env bash
# compute-sanitizer over process-mode GPU tests, with a sanitizer of its own on every rank process.
#   bash scripts/sanitize_ranks.sh TOOL WORLD BIN_DIR TEST [TEST ...]
# TOOL is memcheck, racecheck, synccheck or initcheck. Each TEST names a test of the rank-parameterized
# suites without its prefix and suffix (AllReduce.TwoShotMatchesFp64Reference runs
# Ranks/AllReduce.TwoShotMatchesFp64Reference/processes_WORLD, DeviceBarrierTest.X DeviceRanks/...). With fewer GPUs than ranks, set
# IRIS_TEST_RANKS_PER_GPU as for the tests.
#
# Why not `compute-sanitizer iris_tests`: a process-mode test starts its ranks with posix_spawn, and the
# sanitizer did not follow them (on the H200 machine, 2026-12-02: one ERROR SUMMARY, the parent's, and
# none for the ranks that ran every kernel). Here the ranks are started as the test starts them
# (torchrun's environment and IRIS_TEST_CHILD=1), each under compute-sanitizer.
#
# Logs go to $IRIS_LOG_DIR (default $OUT, else ./sanitize-logs), one per test and rank; a line per test
# is printed. Exit status 1 when a rank failed, was skipped, timed out ($IRIS_SANITIZE_TIMEOUT seconds
# per test, default 300) or the sanitizer reported anything.
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,7p' "$0" >&2
  exit 2
fi
TOOL="$1" WORLD="$2" BIN="$3"
shift 3
case "$TOOL" in memcheck | racecheck | synccheck | initcheck) ;; *)
  echo "sanitize_ranks.sh: TOOL must be memcheck, racecheck, synccheck or initcheck, got '$TOOL'" >&2
  exit 2
  ;;
esac
[[ "$WORLD" =~ ^[1-9][0-9]*$ ]] || { echo "sanitize_ranks.sh: WORLD must be a positive integer, got '$WORLD'" >&2; exit 2; }
[ -x "$BIN/iris_tests" ] || { echo "sanitize_ranks.sh: no iris_tests in '$BIN'" >&2; exit 2; }
command -v compute-sanitizer > /dev/null || { echo "sanitize_ranks.sh: compute-sanitizer is not on PATH" >&2; exit 2; }
LOG_DIR="${IRIS_LOG_DIR:-${OUT:-$PWD/sanitize-logs}}"
mkdir -p "$LOG_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The processes_WORLD instance exists only when the tests go up to WORLD ranks.
export IRIS_TEST_MAX_RANKS=$(( ${IRIS_TEST_MAX_RANKS:-2} > WORLD ? ${IRIS_TEST_MAX_RANKS:-2} : WORLD ))
limit="${IRIS_SANITIZE_TIMEOUT:-300}"
status=0
for t in "$@"; do
  name="*/$t/processes_$WORLD"  # any instantiation prefix: Ranks/ (ccl, heap, fused), DeviceRanks/ (device API)
  port=$((20000 + RANDOM % 20000))
  pids=()
  start=$(date +%s)
  for ((r = 0; r < WORLD; r++)); do
    IRIS_TEST_CHILD=1 RANK=$r LOCAL_RANK=$r WORLD_SIZE=$WORLD LOCAL_WORLD_SIZE=$WORLD MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port timeout "$limit" compute-sanitizer --tool "$TOOL" --print-limit 20 "$BIN/iris_tests" \
      --gtest_filter="$name" --gtest_brief=1 > "$LOG_DIR/$t.$TOOL.rank$r.log" 2>&1 &
    pids+=($!)
  done
  rcs=()
  for ((r = 0; r < WORLD; r++)); do
    wait "${pids[$r]}"
    rcs+=($?)
  done
  verdict="ok"
  for ((r = 0; r < WORLD; r++)); do
    rc=${rcs[$r]}
    log="$LOG_DIR/$t.$TOOL.rank$r.log"
    if [ "$rc" -eq 124 ]; then
      verdict="rank $r timed out after $limit s"
    elif grep -q '^\[  SKIPPED \]' "$log"; then
      verdict="rank $r skipped: $(grep -A1 'Skipped$' "$log" | tail -n1)"
    elif [ "$rc" -ne 0 ] || ! grep -q '^\[  PASSED  \] 1 test' "$log"; then
      verdict="rank $r did not pass (exit $rc)"  # a rank that passed and then crashed in teardown too
    elif ! grep -qE '(ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\))$' "$log"; then
      verdict="rank $r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n1)"
    fi
    [ "$verdict" = "ok" ] || break
  done
  [ "$verdict" = "ok" ] || status=1
  summary=$(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOG_DIR/$t.$TOOL".rank*.log | sed 's/^=* *//' | sort | uniq -c | tr -s ' ' |
    tr '\n' ';' | sed 's/^ //')
  echo "$TOOL $name: $verdict ($WORLD ranks: $summary $(($(date +%s) - start)) s)"
done
exit $status
