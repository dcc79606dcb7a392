# Sourced by the GPU scripts: run_example BIN_DIR LOG_DIR NAME [ARGS...] runs one example over every
# local GPU ($gpus), as threads and then as one process per GPU (torchrun-style environment), and
# appends a line per mode to the caller's `summary` array, setting the caller's `status` to 1 when a
# mode fails. Nothing when BIN_DIR has no such example.
run_example() {
  local bin="$1/$3" log="$2/$3" name=$3
  shift 3
  [ -x "$bin" ] || return 0
  timeout 180 "$bin" "$@" > "${log}_threads.log" 2>&1
  local trc=$?
  [ "$trc" -eq 0 ] || status=1
  summary+=("$name threads: rc $trc | $(tr '\n' ' ' < "${log}_threads.log" | tail -c 700)")
  local port=$((20000 + RANDOM % 20000)) pids=() r p prc=0
  for ((r = 0; r < gpus; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$gpus LOCAL_WORLD_SIZE=$gpus MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 180 "$bin" "$@" > "${log}_proc_$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || prc=$?; done
  [ "$prc" -eq 0 ] || status=1
  summary+=("$name processes: rc $prc | $(cat "${log}"_proc_*.log | tr '\n' ' ' | tail -c 700)")
}
