// GPU tests of the device barrier (iris/device/barrier.cuh, iris/device_barrier.hpp): as a stream
// operation captured in a CUDA graph and replayed 1,000 times, with data written to every peer before
// each barrier checked after it; inside a kernel with one slot per block, blocks of one thread and of
// three-dimensional shape among them; epochs that count every crossing on every rank; crossings made on
// two streams, which run in the order made. 1 and 2 ranks (more with IRIS_TEST_MAX_RANKS), threads and
// processes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"
#include "iris/device.cuh"
#include "iris/device_barrier.hpp"
#include "support/error_text.hpp"
#include "support/ranks.hpp"
#include "test_device_util.cuh"

namespace iris {
namespace {

namespace dev = iris::device;
using test::RankSetup;

class DeviceBarrierTest : public ::testing::TestWithParam<RankSetup> {};

__host__ __device__ inline uint32_t round_word(int sender, uint64_t round, int i) {
  return static_cast<uint32_t>(test::mix64(sender, round, i, 0xBA5));
}

// Rank r writes round `*round`'s data into slot r of every rank's inbox ([W][n] words).
__global__ void write_round(DeviceContext ctx, uint32_t* inbox, const uint64_t* round, int n) {
  const uint64_t k = *round;
  for (int to = 0; to < ctx.world_size; ++to)
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
      dev::store(ctx, inbox + ctx.rank * n + i, round_word(ctx.rank, k, i), to);
}

// Every slot of this rank's inbox must hold round `*round`'s data from its writer.
__global__ void check_round(DeviceContext ctx, const uint32_t* inbox, const uint64_t* round, int n,
                            unsigned long long* wrong) {
  const uint64_t k = *round;
  unsigned long long bad = 0;
  for (int s = 0; s < ctx.world_size; ++s)
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
      bad += inbox[s * n + i] != round_word(s, k, i) ? 1 : 0;
  if (bad != 0) atomicAdd(wrong, bad);
}

__global__ void advance_round(uint64_t* round) { *round += 1; }

TEST_P(DeviceBarrierTest, GraphReplayedThousandTimesSeesEveryRoundsDataAfterTheBarrier) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size(), n = 16384, replays = 1000;
        auto* inbox = ctx.full<uint32_t>(static_cast<size_t>(world) * n, 0xDEADBEEFu);
        DeviceBarrier barrier(ctx);  // collective; also a host barrier, so every inbox is poisoned first
        test::DeviceBuffer<uint64_t> round(1);
        test::DeviceBuffer<unsigned long long> wrong(1);
        test::fill_bytes(ctx.stream(), round.get(), 0, 1);
        test::fill_bytes(ctx.stream(), wrong.get(), 0, 1);

        // One round: write to every peer -> barrier -> check own inbox -> next round -> barrier (so no peer
        // overwrites an inbox that is still being checked). The round number lives in device memory.
        cudaStream_t stream = ctx.stream();
        const DeviceContext dctx = ctx.device_context();
        cudaGraph_t graph = nullptr;
        IRIS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        write_round<<<8, 256, 0, stream>>>(dctx, inbox, round.get(), n);
        barrier.arrive_and_wait(stream);
        check_round<<<8, 256, 0, stream>>>(dctx, inbox, round.get(), n, wrong.get());
        advance_round<<<1, 1, 0, stream>>>(round.get());
        // A null stream is ctx.stream() (not CUDA's legacy default stream): this crossing is captured too. Run
        // anywhere else it would cross once, outside the graph, and the epochs below would be off.
        barrier.arrive_and_wait(nullptr);
        IRIS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        cudaGraphExec_t exec = nullptr;
        IRIS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int r = 0; r < replays; ++r) IRIS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        ctx.synchronize();  // TimeoutError if a rank was left waiting
        IRIS_CUDA_CHECK(cudaGraphExecDestroy(exec));
        IRIS_CUDA_CHECK(cudaGraphDestroy(graph));

        EXPECT_EQ(test::copy_to_host(stream, wrong.get(), 1)[0], 0u) << "rank " << ctx.rank() << ": words wrong";
        EXPECT_EQ(test::copy_to_host(stream, round.get(), 1)[0], static_cast<uint64_t>(replays));
        ctx.barrier();  // every rank's last arrival has landed
        // Each rank crossed slot 0 twice per replay; the epochs were advanced only by the kernels.
        for (uint64_t e : test::copy_to_host(stream, barrier.handle().epochs, world))
          EXPECT_EQ(e, 2u * replays) << "rank " << ctx.rank();
        // The last round's data is intact.
        auto last = test::copy_to_host(stream, inbox, static_cast<size_t>(world) * n);
        size_t bad = 0;
        for (int s = 0; s < world; ++s)
          for (int i = 0; i < n; ++i) bad += last[s * n + i] != round_word(s, replays - 1, i) ? 1 : 0;
        EXPECT_EQ(bad, 0u);
        ctx.barrier();
        ctx.free(inbox);
      },
      test::device_test_options());
}

// Block b (of a grid and blocks of any shape: b and the thread index are linearized as barrier_block
// does) crosses slot b: write to every peer's inbox[b][me] -> barrier -> check inbox[b][*] -> barrier,
// `iterations` times. inbox: heap [blocks][W][n].
__global__ void barrier_loop_kernel(DeviceContext ctx, DeviceBarrierHandle barrier, uint32_t* inbox, int n,
                                    int iterations, unsigned long long* wrong) {
  const int world = ctx.world_size, me = ctx.rank;
  const int b = static_cast<int>(dev::block_index_in_grid());
  const int tid = static_cast<int>(dev::thread_index_in_block()), threads = static_cast<int>(dev::block_size());
  uint32_t* mine = inbox + (static_cast<size_t>(b) * world + me) * n;
  for (int it = 0; it < iterations; ++it) {
    const uint64_t round = static_cast<uint64_t>(b) * 1000003u + it;
    for (int to = 0; to < world; ++to)
      for (int i = tid; i < n; i += threads) dev::store(ctx, mine + i, round_word(me, round, i), to);
    if (!dev::barrier_block(ctx, barrier, b)) return;
    unsigned long long bad = 0;
    for (int s = 0; s < world; ++s)
      for (int i = tid; i < n; i += threads)
        bad += inbox[(static_cast<size_t>(b) * world + s) * n + i] != round_word(s, round, i) ? 1 : 0;
    if (bad != 0) atomicAdd(wrong, bad);
    if (!dev::barrier_block(ctx, barrier, b)) return;
  }
}

TEST_P(DeviceBarrierTest, InKernelBarrierWithOneSlotPerBlockAndStreamBarrierShareEpochs) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size(), blocks = 4, n = 1024, iterations = 200, stream_crossings = 10;
        auto* inbox = ctx.full<uint32_t>(static_cast<size_t>(blocks) * world * n, 0xDEADBEEFu);
        DeviceBarrier barrier(ctx, blocks);
        EXPECT_EQ(barrier.num_slots(), blocks);
        test::DeviceBuffer<unsigned long long> wrong(1);
        test::fill_bytes(ctx.stream(), wrong.get(), 0, 1);
        barrier_loop_kernel<<<blocks, 256, 0, ctx.stream()>>>(ctx.device_context(), barrier.handle(), inbox, n,
                                                              iterations, wrong.get());
        IRIS_CUDA_CHECK_LAUNCH();
        for (int i = 0; i < stream_crossings; ++i) barrier.arrive_and_wait();  // slot 0, after the kernel's crossings
        ctx.synchronize();
        EXPECT_EQ(test::copy_to_host(ctx.stream(), wrong.get(), 1)[0], 0u) << "rank " << ctx.rank();
        ctx.barrier();  // every rank's last arrival has landed
        auto epochs = test::copy_to_host(ctx.stream(), barrier.handle().epochs, static_cast<size_t>(blocks) * world);
        for (int slot = 0; slot < blocks; ++slot)
          for (int r = 0; r < world; ++r)
            EXPECT_EQ(epochs[slot * world + r], 2u * iterations + (slot == 0 ? stream_crossings : 0))
                << "slot " << slot << ", rank " << r << "'s word on rank " << ctx.rank();
        ctx.barrier();
        ctx.free(inbox);
      },
      test::device_test_options());
}

// barrier_block takes blocks of any shape and any number of ranks per thread: blocks of one thread
// (every rank beyond the first is a second or later turn of its loops), of 3 threads (fewer than ranks
// from 4 ranks on), and 3-D blocks in a 2-D grid (slots and threads linearized).
TEST_P(DeviceBarrierTest, InKernelBarrierWithFewerThreadsThanRanksAndThreeDimensionalBlocks) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        struct Shape {
          dim3 grid, block;
        };
        const Shape shapes[] = {{dim3(3), dim3(1)}, {dim3(2), dim3(3)}, {dim3(2, 3), dim3(8, 4, 2)}};
        const int world = ctx.world_size(), n = 333, iterations = 50;
        std::vector<uint64_t> crossings(6, 0);  // per slot: each shape's block b crosses slot b
        DeviceBarrier barrier(ctx, 6);
        auto* inbox = ctx.full<uint32_t>(size_t{6} * world * n, 0xDEADBEEFu);
        test::DeviceBuffer<unsigned long long> wrong(1);
        for (const Shape& shape : shapes) {
          const int blocks = static_cast<int>(shape.grid.x * shape.grid.y * shape.grid.z);
          test::fill_bytes(ctx.stream(), wrong.get(), 0, 1);
          barrier_loop_kernel<<<shape.grid, shape.block, 0, ctx.stream()>>>(ctx.device_context(), barrier.handle(),
                                                                            inbox, n, iterations, wrong.get());
          IRIS_CUDA_CHECK_LAUNCH();
          ctx.synchronize();
          EXPECT_EQ(test::copy_to_host(ctx.stream(), wrong.get(), 1)[0], 0u)
              << "rank " << ctx.rank() << ", " << blocks << " blocks of " << shape.block.x << "x" << shape.block.y
              << "x" << shape.block.z << " threads";
          ctx.barrier();  // every rank's last arrival has landed
          for (int slot = 0; slot < blocks; ++slot) crossings[slot] += 2 * iterations;
          auto epochs = test::copy_to_host(ctx.stream(), barrier.handle().epochs, size_t{6} * world);
          for (int slot = 0; slot < 6; ++slot)
            for (int r = 0; r < world; ++r)
              EXPECT_EQ(epochs[slot * world + r], crossings[slot])
                  << "slot " << slot << ", rank " << r << "'s word on rank " << ctx.rank() << " after " << blocks
                  << " blocks of " << shape.block.x << "x" << shape.block.y << "x" << shape.block.z << " threads";
          // Every rank has read its words before any starts the next shape, whose first crossing writes into
          // its peers' words (without this, a rank still reading saw its peer one crossing ahead: found under
          // MPS, where the ranks run at once).
          ctx.barrier();
        }
        ctx.free(inbox);
      },
      test::device_test_options());
}

// The epochs are compared wrap-safe (kReached): a barrier whose words are 3 crossings short of 2^64 on every
// rank (as if it had been crossed that often) keeps working through the wrap, its data checked after every
// crossing, and ends at the wrapped count.
TEST_P(DeviceBarrierTest, EpochsThatWrapPastTwoToTheSixtyFourKeepWorking) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size(), blocks = 2, n = 1000, iterations = 10;
        const uint64_t start = ~uint64_t{0} - 2;
        DeviceBarrier barrier(ctx, blocks);
        auto* inbox = ctx.full<uint32_t>(static_cast<size_t>(blocks) * world * n, 0xDEADBEEFu);
        test::copy_to_device(ctx.stream(), barrier.handle().epochs,
                             std::vector<uint64_t>(static_cast<size_t>(blocks) * world, start));
        test::DeviceBuffer<unsigned long long> wrong(1);
        test::fill_bytes(ctx.stream(), wrong.get(), 0, 1);
        ctx.barrier();  // every rank's words hold the start before any rank crosses
        barrier_loop_kernel<<<blocks, 128, 0, ctx.stream()>>>(ctx.device_context(), barrier.handle(), inbox, n,
                                                              iterations, wrong.get());
        IRIS_CUDA_CHECK_LAUNCH();
        ctx.synchronize();  // a crossing that never saw its peers throws TimeoutError here
        EXPECT_EQ(test::copy_to_host(ctx.stream(), wrong.get(), 1)[0], 0u) << "rank " << ctx.rank();
        ctx.barrier();                                  // every rank's last arrival has landed
        const uint64_t want = start + 2u * iterations;  // wrapped: 17
        for (uint64_t e :
             test::copy_to_host(ctx.stream(), barrier.handle().epochs, static_cast<size_t>(blocks) * world))
          EXPECT_EQ(e, want) << "rank " << ctx.rank();
        ctx.barrier();
        ctx.free(inbox);
      },
      test::device_test_options(std::chrono::milliseconds(5000)));
}

TEST_P(DeviceBarrierTest, MovedBarrierKeepsWorkingAndZeroSlotsIsRejected) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        for (int slots : {0, -1})  // refused before anything is allocated, so every rank can go on
          EXPECT_EQ(test::error_text<InvalidArgument>([&] { DeviceBarrier refused(ctx, slots); }),
                    "DeviceBarrier needs at least one slot, got " + std::to_string(slots) + ".");
        DeviceBarrier first(ctx);
        first.arrive_and_wait();
        DeviceBarrier second(std::move(first));
        second.arrive_and_wait();
        ctx.synchronize();
        ctx.barrier();
        for (uint64_t e : test::copy_to_host(ctx.stream(), second.handle().epochs, ctx.world_size())) EXPECT_EQ(e, 2u);
      },
      test::device_test_options());
}

// Rank r writes `value` into word r of every rank's inbox.
__global__ void write_word(DeviceContext ctx, uint32_t* inbox, uint32_t value) {
  for (int to = 0; to < ctx.world_size; ++to) dev::store(ctx, inbox + ctx.rank, value, to);
}

__global__ void copy_words(const uint32_t* from, uint32_t* to, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) to[i] = from[i];
}

// arrive_and_wait orders its crossings as they were made, on any streams (iris::CallOrder). Every rank
// writes its word into every inbox and crosses on its stream, then crosses again on a second stream and
// reads its inbox there; rank 0 holds its first stream before its write until that read is done (at most
// 500 ms). Without the order rank 0's second crossing would run first and pass on its peers' first
// arrivals (with one rank, on nothing), and its read would miss its own word. Eagerly and in one graph,
// after one crossing and load_kernels (a kernel's first launch would wait for the hold to end).
TEST_P(DeviceBarrierTest, CrossingsOnTwoStreamsRunInTheOrderMade) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size();
        auto* inbox = ctx.zeros<uint32_t>(static_cast<size_t>(world));
        DeviceBarrier barrier(ctx);
        cudaStream_t second = nullptr;
        IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking));
        test::DeviceBuffer<uint32_t> seen(static_cast<size_t>(world));
        test::load_kernels(write_word, copy_words);
        barrier.arrive_and_wait(ctx.stream());
        ctx.synchronize();
        for (const bool graph : {false, true}) {
          SCOPED_TRACE(graph ? "one graph" : "eager");
          test::fill_bytes(ctx.stream(), inbox, 0, static_cast<size_t>(world));
          test::fill_bytes(ctx.stream(), seen.get(), 0xAB, static_cast<size_t>(world));
          ctx.barrier();  // every inbox is zeroed before a peer writes into it, and the ranks start together
          test::calls_on_two_streams(
              ctx, second, graph, 500000,
              [&](cudaStream_t s) {
                write_word<<<1, 1, 0, s>>>(ctx.device_context(), inbox, 1u);
                barrier.arrive_and_wait(s);
              },
              [&](cudaStream_t s) {
                barrier.arrive_and_wait(s);
                copy_words<<<1, 32, 0, s>>>(inbox, seen.get(), world);
              });
          const std::vector<uint32_t> got = test::copy_to_host(ctx.stream(), seen.get(), static_cast<size_t>(world));
          for (int r = 0; r < world; ++r)
            EXPECT_EQ(got[r], 1u) << "rank " << ctx.rank() << " read rank " << r
                                  << "'s word on the second stream before that rank's first crossing";
        }
        IRIS_CUDA_CHECK(cudaStreamDestroy(second));
        ctx.barrier();
        ctx.free(inbox);
      },
      test::device_test_options());
}

// A Context loads iris's kernels when it is created (ContextOptions::load_kernels): a process's first
// crossing launches while another of its kernels runs. Loaded at that launch instead (CUDA's lazy loading,
// IRIS_LOAD_KERNELS=0), the launch waited until the other kernel ended, here after 3 s (H200, 2026-12-05).
// In a process of its own (processes_N) the barrier's kernel has surely not run before. Only the launch is
// checked: on an H100 the crossing then still ran after the other kernel ended (README, kernel loading).
// A process's first crossing, made while a kernel of the process spins on another stream until the crossing
// is done: without the Context's preparation its launch waited 3 s for the spinning kernel to end (the
// kernel loads at its first launch), and once loaded it still ran only after it (the first launch of a
// kernel naming printf sets up the printf buffer, which waits for the device to idle). Needs a process whose
// Context has made no iris call before: the first test of a process, or each in its own (processes_N, or
// --gtest_filter=*FirstCrossing*).
TEST_P(DeviceBarrierTest, FirstCrossingRunsBesideARunningKernel) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        DeviceBarrier barrier(ctx);
        const auto [launch, ran] =
            test::run_beside_a_spinning_kernel(ctx, [&](cudaStream_t s) { barrier.arrive_and_wait(s); });
        auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
        EXPECT_LT(launch, std::chrono::seconds(1))
            << "rank " << ctx.rank() << ": the first crossing's launch took " << ms(launch)
            << " ms, waiting for the kernel running on another stream: its kernel was not loaded ahead";
        EXPECT_LT(ran, std::chrono::seconds(1))
            << "rank " << ctx.rank() << ": the first crossing ran only after " << ms(ran)
            << " ms, when the kernel spinning on another stream had given up: its first launch waited for the "
               "device to idle";
      },
      test::device_test_options());
}

INSTANTIATE_TEST_SUITE_P(DeviceRanks, DeviceBarrierTest, ::testing::ValuesIn(test::any_world_rank_setups()),
                         test::rank_setup_name);

}  // namespace
}  // namespace iris
