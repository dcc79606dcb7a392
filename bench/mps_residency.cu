// mps_residency: does a process under MPS get a grid of one block per SM resident while other processes
// hold theirs? iris's communication kernels assume it of each rank (ccl_host.hpp, comm_block_limit: the
// blocks of a launch wait for the peers' blocks, so all of them must run at once). On a GPU of its own a rank
// has every SM; ranks that share a GPU under MPS (scripts/gpu_prebuilt.sh, IRIS_MPS) each see the SM count
// of their share, but this measures whether the shares are SMs of their own.
//
//   mps_residency TAG START_MS
//
// sizes its grid to the SMs the process sees (cudaDevAttrMultiProcessorCount, which MPS reduces to the
// client's share), with 160 KiB of dynamic shared memory per block so that one block fits on an SM, waits
// until the wall clock reaches START_MS (Unix time in ms, so that processes started together launch
// together), then launches it: each block counts itself in, waits up to 4 s for the rest of its grid, and
// holds its SM until 2 s after it started. A grid that was resident at once waits 0 s; blocks that had to
// wait for another process's blocks to end wait about 2 s. Prints one line; not a test. Run several at once:
//
//   export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d) CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
//   nvidia-cuda-mps-control -d; sleep 2
//   at=$(( $(date +%s%3N) + 4000 ))
//   for i in 0 1 2; do CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 build/bench/mps_residency "proc$i" $at & done; wait
//   echo quit | nvidia-cuda-mps-control
//
// What it showed on 2026-12-07 (one H100 80GB): bench/results/2026-12-07-h100-mps-residency.txt.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "iris/device.cuh"

namespace {

constexpr int kThreads = 512;
constexpr int kSharedBytes = 160 * 1024;  // more than half an SM's shared memory: one block per SM
constexpr unsigned long long kWaitLimitNs = 4'000'000'000ull;
constexpr unsigned long long kHoldNs = 2'000'000'000ull;

using iris::device::global_timer_ns;

__global__ void __launch_bounds__(kThreads) hold(unsigned* arrived, unsigned long long* waited) {
  extern __shared__ char pad[];
  if (threadIdx.x != 0) return;
  pad[0] = 1;  // the shared memory is there to fill the SM, not to be used
  atomicAdd(arrived, 1u);
  const unsigned long long t0 = global_timer_ns();
  while (atomicAdd(arrived, 0u) < gridDim.x && global_timer_ns() - t0 < kWaitLimitNs) {
  }
  waited[blockIdx.x] = global_timer_ns() - t0;
  while (global_timer_ns() - t0 < kHoldNs) {
  }
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "mps_residency: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mps_residency TAG START_MS (Unix time in ms at which to launch)\n");
    return 2;
  }
  const char* tag = argv[1];
  const long long start_at = std::atoll(argv[2]);
  int sms = 0, per_sm = 0;
  unsigned* arrived = nullptr;
  unsigned long long* waited = nullptr;
  if (!check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "no usable GPU") ||
      !check(cudaFuncSetAttribute(hold, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes), "shared memory") ||
      !check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hold, kThreads, kSharedBytes), "occupancy") ||
      !check(cudaMalloc(&arrived, sizeof(unsigned)), "cudaMalloc") ||
      !check(cudaMalloc(&waited, sms * sizeof(unsigned long long)), "cudaMalloc") ||
      !check(cudaMemset(arrived, 0, sizeof(unsigned)), "cudaMemset") || !check(cudaDeviceSynchronize(), "setup"))
    return 1;
  using namespace std::chrono;
  while (duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() < start_at)
    std::this_thread::sleep_for(microseconds(200));
  hold<<<sms, kThreads, kSharedBytes>>>(arrived, waited);
  if (!check(cudaGetLastError(), "launch") || !check(cudaDeviceSynchronize(), "kernel")) return 1;
  std::vector<unsigned long long> w(sms);
  if (!check(cudaMemcpy(w.data(), waited, w.size() * sizeof(w[0]), cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
  unsigned long long longest = 0;
  int late = 0;
  for (unsigned long long v : w) {
    longest = v > longest ? v : longest;
    late += v > 500'000'000ull;
  }
  std::printf(
      "%s: grid %d (%d block(s) per SM fit), longest wait for its own grid %.3f s, blocks that waited > 0.5 s: %d\n",
      tag, sms, per_sm, longest * 1e-9, late);
  return 0;
}
