// message_exchange: producer/consumer messages between GPUs with the iris device API.
//
// Every GPU is a rank (one thread each, iris::run_threads). Rank r sends kMessages messages of 8 KiB
// to rank r+1 (mod the number of GPUs) and receives as many from rank r-1, in one kernel: block 0
// produces, block 1 consumes. The messages go through a ring of kSlots slots in the receiver's heap:
//
//   producer (rank r)                                consumer (rank r+1)
//   wait until consumed >= k - kSlots + 1  <-------  consumed = k + 1          (release, system scope)
//   payload[k % kSlots] = message k  ------------->  wait until ready[k % kSlots] >= k + 1 (acquire)
//   ready[k % kSlots] = k + 1    (release)           read and check message k
//
// Flags hold generations (k + 1) that only grow, so nothing is ever reset, and every wait is bounded:
// if a peer never answers, the kernel ends and ctx.synchronize() throws iris::TimeoutError.
//
// Build: part of the iris CMake project (examples/). Run: ./build/examples/message_exchange
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/device.cuh"

namespace {

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

constexpr int kSlots = 4;
constexpr int kWords = 1024;  // 8 KiB per message
constexpr int kMessages = 1000;
constexpr int kThreads = 256;

struct Mailbox {
  uint64_t* payload;   // heap [kSlots][kWords], written by the left neighbour
  uint64_t* ready;     // heap [kSlots], generation of each slot, released by the left neighbour
  uint64_t* consumed;  // heap [1], messages the right neighbour has read, released by it
};

__host__ __device__ uint64_t message_word(int sender, int k, int i) {
  return (static_cast<uint64_t>(sender + 1) << 48) ^ (static_cast<uint64_t>(k) << 16) ^ static_cast<uint64_t>(i);
}

// results[0]: wrong words seen, results[1]: messages received.
__global__ void exchange_kernel(iris::DeviceContext ctx, Mailbox box, uint64_t* staging, unsigned long long* results) {
  const int world = ctx.world_size, me = ctx.rank;
  const int right = (me + 1) % world, left = (me + world - 1) % world;
  if (blockIdx.x == 0) {  // producer
    for (int k = 0; k < kMessages; ++k) {
      const int slot = k % kSlots;
      if (k >= kSlots) {  // the slot is free once the consumer has read message k - kSlots
        bool ok = true;
        if (threadIdx.x == 0)
          ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, box.consumed, Cmp::kReached,
                                                             static_cast<uint64_t>(k - kSlots + 1), "exchange_send");
        if (!__syncthreads_and(ok)) return;
      }
      uint64_t* message = staging + slot * kWords;
      for (int i = threadIdx.x; i < kWords; i += blockDim.x) message[i] = message_word(me, k, i);
      __syncthreads();
      // Copies the message into the right neighbour's slot, then releases its ready flag.
      dev::put_block_signal_release<Scope::kSys>(ctx, box.payload + slot * kWords, message, kWords, box.ready + slot,
                                                 static_cast<uint64_t>(k + 1), right);
    }
  } else {  // consumer
    for (int k = 0; k < kMessages; ++k) {
      const int slot = k % kSlots;
      bool ok = true;
      if (threadIdx.x == 0)
        ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, box.ready + slot, Cmp::kReached,
                                                           static_cast<uint64_t>(k + 1), "exchange_receive");
      if (!__syncthreads_and(ok)) return;
      unsigned long long wrong = 0;
      for (int i = threadIdx.x; i < kWords; i += blockDim.x)
        wrong += box.payload[slot * kWords + i] != message_word(left, k, i) ? 1 : 0;
      if (wrong != 0) atomicAdd(&results[0], wrong);
      __syncthreads();  // all reads of the slot are done before handing it back
      if (threadIdx.x == 0) {
        dev::signal<Order::kRelease, Scope::kSys>(ctx, box.consumed, static_cast<uint64_t>(k + 1), left);
        atomicAdd(&results[1], 1ull);
      }
    }
  }
}

std::string run_rank(iris::Context& ctx) {
  const int world = ctx.world_size(), me = ctx.rank();
  Mailbox box;
  box.payload = ctx.zeros<uint64_t>(kSlots * kWords);
  box.ready = ctx.zeros<uint64_t>(kSlots);
  box.consumed = ctx.zeros<uint64_t>(1);
  uint64_t* staging = nullptr;
  unsigned long long* results = nullptr;
  IRIS_CUDA_CHECK(cudaMalloc(&staging, kSlots * kWords * sizeof(uint64_t)));
  IRIS_CUDA_CHECK(cudaMalloc(&results, 2 * sizeof(unsigned long long)));
  IRIS_CUDA_CHECK(cudaMemsetAsync(results, 0, 2 * sizeof(unsigned long long), ctx.stream()));
  ctx.barrier();  // every mailbox is zeroed before anyone sends

  exchange_kernel<<<2, kThreads, 0, ctx.stream()>>>(ctx.device_context(), box, staging, results);
  IRIS_CUDA_CHECK_LAUNCH();
  ctx.synchronize();  // throws iris::TimeoutError if a message never arrived

  unsigned long long host[2];
  IRIS_CUDA_CHECK(cudaMemcpy(host, results, sizeof(host), cudaMemcpyDeviceToHost));
  ctx.barrier();  // the neighbours are done with our heap before it is freed
  IRIS_CUDA_CHECK(cudaFree(results));
  IRIS_CUDA_CHECK(cudaFree(staging));
  ctx.free(box.consumed);
  ctx.free(box.ready);
  ctx.free(box.payload);

  const int left = (me + world - 1) % world;
  if (host[1] != kMessages || host[0] != 0)
    throw std::runtime_error("rank " + std::to_string(me) + " received " + std::to_string(host[1]) + " of " +
                             std::to_string(kMessages) + " messages from rank " + std::to_string(left) + " with " +
                             std::to_string(host[0]) + " wrong words");
  return "rank " + std::to_string(me) + ": received " + std::to_string(kMessages) + " messages of " +
         std::to_string(kWords * sizeof(uint64_t) / 1024) + " KiB from rank " + std::to_string(left) +
         ", every word verified";
}

}  // namespace

int main() {
  const int gpus = iris::local_device_count();
  if (gpus == 0) {
    std::fprintf(stderr, "message_exchange: no CUDA GPU found; this example needs at least one.\n");
    return 1;
  }
  std::vector<std::string> lines(gpus);
  iris::ContextOptions options;
  options.heap_size = size_t{64} << 20;
  try {
    iris::run_threads(
        gpus, [&](iris::Context& ctx) { lines[ctx.rank()] = run_rank(ctx); }, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "message_exchange failed: %s\n", e.what());
    return 1;
  }
  std::printf("message_exchange: %d rank(s), one per GPU, ring of %d slots\n", gpus, kSlots);
  for (const auto& line : lines) std::printf("  %s\n", line.c_str());
  return 0;
}
