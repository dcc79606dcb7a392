// GPU tests of IRIS_DEVICE_CHECKS (iris/device/memory.cuh), the checked translation of this file's kernels:
// correct uses at the edges of the heap pass and move the right data; each wrong one (a rank past the world, a
// negative rank, a pointer translated twice, a pointer outside the heap, a bulk range past the heap's end) stops
// its kernel with a trap before the access, and ctx.synchronize() (ctx.barrier() for one of them) raises the
// recorded reason, naming the rank, the block, the pointer and the bytes. A trap ends the process's CUDA context,
// so each wrong use is a test of its own in processes mode (a child process per rank, ended after the check);
// never as threads, whose context is the test binary's.
#define IRIS_DEVICE_CHECKS 1

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/device.cuh"
#include "support/error_text.hpp"
#include "support/ranks.hpp"
#include "test_device_util.cuh"

namespace iris {
namespace {

namespace dev = iris::device;
using dev::Order;
using dev::Scope;
using test::RankSetup;

static_assert(IRIS_DEVICE_CHECKS == 1);

// The first byte past this rank's heap, as this process maps it.
__device__ char* heap_end(const DeviceContext& ctx) {
  return ctx.heap_base + static_cast<uint64_t>(ctx.rank + 1) * ctx.heap_size;
}

// ---- correct uses pass --------------------------------------------------------------------------

// Every rank puts its 16 words into `inbox` of every rank (slot = its rank), with put_block, a store and an
// atomic add with a rank; reads the last 16 bytes of every rank's heap with get_thread (a range that ends
// exactly at the heap's end); and makes the empty put at the heap's end, and a translation of its end address.
// Poisoned outputs; the counters start at 0.
__global__ void correct_uses_kernel(DeviceContext ctx, uint32_t* inbox, const uint32_t* mine, uint32_t* counters,
                                    unsigned char* tails) {
  const int world = ctx.world_size;
  for (int to = 0; to < world; ++to) {
    dev::put_block(ctx, inbox + 16 * ctx.rank, mine, 16, to);
    if (threadIdx.x == 0) {
      dev::store(ctx, counters + 1 + ctx.rank, 1u + ctx.rank, to);
      dev::atomic_add<Order::kRelaxed, Scope::kSys>(ctx, counters, 1u, to);
      dev::get_thread(ctx, tails + 16 * to, reinterpret_cast<unsigned char*>(heap_end(ctx)) - 16, 16, to);
      dev::put_thread(ctx, reinterpret_cast<unsigned char*>(heap_end(ctx)), tails, 0, to);
      (void)dev::translate(ctx, static_cast<void*>(heap_end(ctx)), to);
    }
  }
}

class DeviceChecksTest : public ::testing::TestWithParam<RankSetup> {};

TEST_P(DeviceChecksTest, CorrectUsesAtTheHeapsEdgesPassAndMoveTheirData) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size();
        auto* inbox = ctx.empty<uint32_t>(16 * static_cast<size_t>(world));
        auto* counters = ctx.zeros<uint32_t>(1 + static_cast<size_t>(world));
        test::DeviceBuffer<uint32_t> mine(16);
        test::DeviceBuffer<unsigned char> tails(16 * static_cast<size_t>(world));
        std::vector<uint32_t> words(16);
        for (int i = 0; i < 16; ++i) words[i] = 0x5000u * (ctx.rank() + 1) + static_cast<uint32_t>(i) * 7919u;
        test::copy_to_device(ctx.stream(), mine.get(), words);
        test::fill_bytes(ctx.stream(), inbox, 0xee, 16 * static_cast<size_t>(world));
        test::fill_bytes(ctx.stream(), tails.get(), 0xee, tails.size());
        // What each rank's heap holds in its last 16 bytes (not written here: whatever lies there), read by the host.
        const DeviceContext dc = ctx.device_context();
        const auto* end =
            reinterpret_cast<const unsigned char*>(dc.heap_base) + static_cast<uint64_t>(ctx.rank() + 1) * dc.heap_size;
        const auto tails_at_home = test::allgather_vector(ctx, test::copy_to_host(ctx.stream(), end - 16, 16));
        ctx.barrier();  // every rank's inbox poisoned before any rank's kernel
        correct_uses_kernel<<<1, 64, 0, ctx.stream()>>>(ctx.device_context(), inbox, mine.get(), counters, tails.get());
        IRIS_CUDA_CHECK_LAUNCH();
        ctx.synchronize();
        ctx.barrier();  // every rank's kernel done
        const auto got = test::copy_to_host(ctx.stream(), inbox, 16 * static_cast<size_t>(world));
        for (int r = 0; r < world; ++r)
          for (int i = 0; i < 16; ++i)
            ASSERT_EQ(got[16 * r + i], 0x5000u * (r + 1) + static_cast<uint32_t>(i) * 7919u) << "from rank " << r;
        const auto count = test::copy_to_host(ctx.stream(), counters, 1 + static_cast<size_t>(world));
        EXPECT_EQ(count[0], static_cast<uint32_t>(world));
        for (int r = 0; r < world; ++r) EXPECT_EQ(count[1 + r], 1u + r);
        const auto tail = test::copy_to_host(ctx.stream(), tails.get(), tails.size());
        for (int r = 0; r < world; ++r)
          for (int i = 0; i < 16; ++i) EXPECT_EQ(tail[16 * r + i], tails_at_home[r][i]) << "rank " << r << "'s tail";
      },
      test::device_test_options());
}

INSTANTIATE_TEST_SUITE_P(DeviceRanks, DeviceChecksTest, ::testing::ValuesIn(test::any_world_rank_setups()),
                         test::rank_setup_name);

// ---- wrong uses stop the kernel ------------------------------------------------------------------------

enum class Wrong { kRankPastTheWorld, kNegativeRank, kTranslatedTwice, kOutsideTheHeap, kRangePastTheHeapEnd };

// Block 1's lane 5 (or its first warp, for the bulk range) makes the wrong use; nothing else of the grid
// touches memory. `heap_ptr` is in this rank's heap, `outside` is cudaMalloc'd, `count` the put's length.
__global__ void wrong_use_kernel(DeviceContext ctx, Wrong wrong, uint32_t* heap_ptr, uint32_t* outside,
                                 const uint32_t* src, size_t count, uint32_t* reached) {
  if (blockIdx.x != 1) return;
  const int peer = (ctx.rank + 1) % ctx.world_size;
  if (wrong == Wrong::kRangePastTheHeapEnd) {
    if (threadIdx.x < 32) dev::put_warp(ctx, heap_ptr, src, count, peer);
  } else if (threadIdx.x == 5) {
    switch (wrong) {
      case Wrong::kRankPastTheWorld:
        dev::store(ctx, heap_ptr, 1u, ctx.world_size);
        break;
      case Wrong::kNegativeRank:
        dev::atomic_add<Order::kRelaxed, Scope::kSys>(ctx, heap_ptr, 1u, -1);
        break;
      case Wrong::kTranslatedTwice:
        dev::store<Order::kRelease, Scope::kSys>(ctx, dev::translate(ctx, heap_ptr, peer), 1u, peer);
        break;
      case Wrong::kOutsideTheHeap:
        (void)dev::load(ctx, static_cast<const uint32_t*>(outside), peer);
        break;
      default:
        break;
    }
  }
  if (threadIdx.x == 5) *reached = 1;  // past the wrong use: never, the trap came first
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return text;
}

// Where the host meets the kernel that stopped: each raises the recorded reason, not the CUDA error.
enum class Finish { kSynchronize, kBarrier };

// Runs the wrong use on every rank and checks the error that ctx.synchronize(), or ctx.barrier(), raises.
void expect_stopped(const RankSetup& setup, Wrong wrong, Finish finish = Finish::kSynchronize) {
  test::run_ranks(
      setup,
      [wrong, finish](Context& ctx) {
        const int world = ctx.world_size(), rank = ctx.rank();
        const int peer = (rank + 1) % world;
        auto* heap_ptr = ctx.zeros<uint32_t>(1024);
        test::DeviceBuffer<uint32_t> outside(16);
        test::DeviceBuffer<uint32_t> src(16);  // never read: the range's check stops the put first
        // Pinned host memory: the host reads it after the trap, when device memory can no longer be copied.
        uint32_t* reached = nullptr;
        IRIS_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&reached), sizeof(uint32_t), cudaHostAllocMapped));
        *reached = 0;
        const DeviceContext dc = ctx.device_context();
        // From heap_ptr to one element past the end of this rank's heap.
        const char* end = dc.heap_base + static_cast<uint64_t>(rank + 1) * dc.heap_size;
        const size_t count = static_cast<size_t>(end - reinterpret_cast<const char*>(heap_ptr)) / 4 + 1;
        ctx.barrier();
        wrong_use_kernel<<<3, 64, 0, ctx.stream()>>>(dc, wrong, heap_ptr, outside.get(), src.get(), count, reached);
        IRIS_CUDA_CHECK_LAUNCH();
        const std::string head =
            "iris device error in translate on rank " + std::to_string(rank) + " (block 1, to rank ";
        std::string want;
        switch (wrong) {
          case Wrong::kRankPastTheWorld:
            want = head + std::to_string(world) + "): rank " + std::to_string(world) + " is not one of the " +
                   std::to_string(world) + " ranks [0, " + std::to_string(world) + ")";
            break;
          case Wrong::kNegativeRank:
            want = head + "-1): rank -1 is not one of the " + std::to_string(world) + " ranks [0, " +
                   std::to_string(world) + ")";
            break;
          case Wrong::kTranslatedTwice:
            want = head + std::to_string(peer) + "): the pointer " +
                   hex(reinterpret_cast<const char*>(heap_ptr) +
                       (static_cast<int64_t>(peer) - rank) * static_cast<int64_t>(dc.heap_size)) +
                   " is in rank " + std::to_string(peer) +
                   "'s heap, not this rank's: it was translated already (pass this rank's pointer with a rank, or a "
                   "translated one to a form without a rank)";
            break;
          case Wrong::kOutsideTheHeap:
            want = head + std::to_string(peer) + "): the pointer " + hex(outside.get()) +
                   " is outside the symmetric heap: a form that takes a rank takes a pointer into this rank's heap "
                   "(an allocation of its Context, or inside one), not cudaMalloc memory or a stack or __shared__ "
                   "address";
            break;
          case Wrong::kRangePastTheHeapEnd:
            want = head + std::to_string(peer) + "): the " + std::to_string(count * 4) + " bytes from " +
                   hex(heap_ptr) + " run past the end of this rank's heap";
            break;
        }
        want +=
            ". IRIS_DEVICE_CHECKS stopped the kernel there with a trap, before the access: this process's CUDA "
            "context is unusable now (every later CUDA call fails), so the process must end; its peers' waits "
            "for it time out.";
        // Through barrier(), every rank raises its own: each stopped alike.
        EXPECT_EQ(test::error_text<InvalidArgument>([&] {
                    if (finish == Finish::kBarrier)
                      ctx.barrier();
                    else
                      ctx.synchronize();
                  }),
                  want);
        EXPECT_EQ(*reached, 0u) << "the kernel went on past the wrong use";
        EXPECT_NE(cudaStreamQuery(ctx.stream()), cudaSuccess) << "the trap ends the context";
        (void)cudaFreeHost(reached);  // fails too, after the trap: the process ends soon
        test::context_ended_on_purpose();
      },
      test::device_test_options());
}

std::vector<RankSetup> process_setups() {
  std::vector<RankSetup> out;
  for (const RankSetup& s : test::any_world_rank_setups())
    if (s.mode == test::Mode::kProcesses) out.push_back(s);
  return out;
}

class DeviceChecksStopTest : public ::testing::TestWithParam<RankSetup> {};

TEST_P(DeviceChecksStopTest, ARankPastTheWorld) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  expect_stopped(GetParam(), Wrong::kRankPastTheWorld);
}
TEST_P(DeviceChecksStopTest, ANegativeRank) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  expect_stopped(GetParam(), Wrong::kNegativeRank, Finish::kBarrier);
}
TEST_P(DeviceChecksStopTest, APointerTranslatedTwice) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs a peer's heap (one rank's translation is the pointer itself)";
  expect_stopped(GetParam(), Wrong::kTranslatedTwice);
}
TEST_P(DeviceChecksStopTest, APointerOutsideTheHeap) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  expect_stopped(GetParam(), Wrong::kOutsideTheHeap);
}
TEST_P(DeviceChecksStopTest, ABulkRangePastTheHeapsEnd) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  expect_stopped(GetParam(), Wrong::kRangePastTheHeapEnd);
}

INSTANTIATE_TEST_SUITE_P(DeviceRanks, DeviceChecksStopTest, ::testing::ValuesIn(process_setups()),
                         test::rank_setup_name);

}  // namespace
}  // namespace iris
