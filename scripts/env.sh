# Sourced by the scripts: CUDA on PATH, build folder, NVLink multicast kept off.
export PATH="/usr/local/cuda/bin:$PATH"
export IRIS_BUILD_DIR="${IRIS_BUILD_DIR:-build}"
# Never use NVLink multicast on shared hosts (DESIGN.md): keep every library's switch off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
iris_configure_and_build() {
  local jobs
  jobs=$(nproc)
  cmake -S . -B "$IRIS_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  ninja -C "$IRIS_BUILD_DIR" -j"$jobs"
}
