// GPU tests of the symmetric heap: every rank writes into every peer's heap through translated
// pointers, allocation symmetry, alloc/free cycles, repeated contexts. 1 and 2 ranks (more with
// IRIS_TEST_MAX_RANKS), threads and processes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/device_barrier.hpp"
#include "runtime/heap_guard.hpp"
#include "runtime/symmetric_heap.hpp"
#include "support/error_text.hpp"
#include "support/ranks.hpp"
#include "support/reach.hpp"
#include "support/scoped_env.hpp"
#include "test_device_util.cuh"

namespace iris {
namespace {

using test::RankSetup;

constexpr size_t kTestHeap = size_t{256} << 20;

ContextOptions small_heap() {
  ContextOptions o;
  o.heap_size = kTestHeap;
  return o;
}

__host__ __device__ uint32_t pattern(int writer, int reader, size_t i, uint32_t salt) {
  return (static_cast<uint32_t>(writer) * 0x9E3779B1u) ^ (static_cast<uint32_t>(reader) * 0x85EBCA77u) ^
         (static_cast<uint32_t>(i) * 0xC2B2AE3Du) ^ salt;
}

// Rank `me` writes its block into slot `me` of every rank's buffer (including its own), using only
// the device handle: remote = ptr + (to - rank) * heap_size.
__global__ void scatter_pattern(DeviceContext ctx, uint32_t* buf, size_t n, uint32_t salt) {
  for (int to = 0; to < ctx.world_size; ++to) {
    uint32_t* remote = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(buf + static_cast<size_t>(ctx.rank) * n) +
                                                   static_cast<int64_t>(to - ctx.rank) * static_cast<int64_t>(ctx.heap_size));
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
      remote[i] = pattern(ctx.rank, to, i, salt);
  }
}

class HeapGpu : public ::testing::TestWithParam<RankSetup> {};

TEST_P(HeapGpu, EveryRankWritesEveryPeersHeapThroughTranslatedPointers) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    const int world = ctx.world_size(), me = ctx.rank();
    for (size_t n : {size_t{1}, size_t{1000003}, size_t{4} << 20}) {  // one word, odd size, 16 MiB per rank
      uint32_t salt = static_cast<uint32_t>(n * 2654435761u);
      auto* buf = ctx.full<uint32_t>(n * world, 0xDEADBEEFu);  // poisoned
      ctx.barrier();  // every rank has poisoned before anyone writes
      scatter_pattern<<<132, 512, 0, ctx.stream()>>>(ctx.device_context(), buf, n, salt);
      IRIS_CUDA_CHECK_LAUNCH();
      ctx.barrier();  // every rank's writes are complete
      std::vector<uint32_t> host(n * world);
      IRIS_CUDA_CHECK(cudaMemcpy(host.data(), buf, host.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
      size_t wrong = 0, first_bad = SIZE_MAX;
      for (int from = 0; from < world; ++from)
        for (size_t i = 0; i < n; ++i)
          if (host[from * n + i] != pattern(from, me, i, salt)) {
            if (first_bad == SIZE_MAX) first_bad = from * n + i;
            ++wrong;
          }
      EXPECT_EQ(wrong, 0u) << "rank " << me << ", n=" << n << ": first wrong word at " << first_bad;
      ctx.barrier();  // no peer still writes before the buffer is freed
      ctx.free(buf);
    }
    ctx.barrier();
  }, small_heap());
}

TEST_P(HeapGpu, OffsetsAreIdenticalAcrossRanksAndTranslationMatchesHeapBases) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    std::vector<void*> ptrs;
    std::string offsets;
    for (size_t bytes : {1, 255, 256, 4097, 1 << 20, 3 << 20}) {
      ptrs.push_back(ctx.alloc(bytes, bytes >= (1 << 20) ? 1 << 16 : 256));
      size_t off = ctx.offset_of(ptrs.back());
      offsets.append(reinterpret_cast<const char*>(&off), sizeof(off));
    }
    const size_t hole = ctx.offset_of(ptrs[1]);
    ctx.free(ptrs[1]);
    ptrs[1] = ctx.alloc(100);  // reuses the hole on every rank
    size_t off = ctx.offset_of(ptrs[1]);
    EXPECT_EQ(off, hole) << "the freed hole is reused";
    offsets.append(reinterpret_cast<const char*>(&off), sizeof(off));
    auto all = ctx.bootstrap().allgather(offsets);
    for (int r = 0; r < ctx.world_size(); ++r) EXPECT_EQ(all[r], offsets) << "rank " << r << " differs";
    for (int r = 0; r < ctx.world_size(); ++r) {
      EXPECT_EQ(ctx.translate(static_cast<char*>(ptrs[2]), r), ctx.heap_base(r) + ctx.offset_of(ptrs[2]));
      EXPECT_EQ(ctx.heap_base(r), ctx.device_context().heap_base + r * ctx.heap_size());
    }
    EXPECT_TRUE(ctx.is_symmetric(ptrs[0]));
    EXPECT_FALSE(ctx.is_symmetric(&offsets));
    EXPECT_EQ(ctx.heap_size() % (2 << 20), 0u);
    ctx.barrier();
    for (void* p : ptrs) ctx.free(p);
    EXPECT_EQ(ctx.heap_bytes_in_use(), 0u);
    ctx.barrier();
  }, small_heap());
}

__global__ void write_index(uint64_t* p, size_t n, uint64_t salt) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = i ^ salt;
}

TEST_P(HeapGpu, HundredAllocFreeCyclesReuseMemoryAndStayCorrect) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    size_t first_offset = SIZE_MAX;
    for (int cycle = 0; cycle < 100; ++cycle) {
      size_t n = 1000 + static_cast<size_t>(cycle) * 7919;  // a different, odd size each cycle
      auto* keep = ctx.zeros<uint64_t>(17);
      auto* p = ctx.empty<uint64_t>(n);
      write_index<<<64, 256, 0, ctx.stream()>>>(p, n, cycle);
      IRIS_CUDA_CHECK_LAUNCH();
      std::vector<uint64_t> host(n);
      IRIS_CUDA_CHECK(cudaMemcpyAsync(host.data(), p, n * 8, cudaMemcpyDeviceToHost, ctx.stream()));
      IRIS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
      for (size_t i = 0; i < n; i += 997) ASSERT_EQ(host[i], i ^ cycle) << "cycle " << cycle;
      ctx.free(p);
      ctx.free(keep);
      size_t off = ctx.offset_of(ctx.alloc(8));
      if (first_offset == SIZE_MAX) first_offset = off;
      EXPECT_EQ(off, first_offset) << "freed memory is not reused (cycle " << cycle << ")";
      ctx.free(ctx.heap_base(ctx.rank()) + off);
      if (cycle % 10 == 0) ctx.barrier();  // also compares the allocation hash across ranks
    }
    EXPECT_EQ(ctx.heap_bytes_in_use(), 0u);
    EXPECT_EQ(ctx.allocation_count(), 100u * 6);
    ctx.barrier();
  }, small_heap());
}

TEST_P(HeapGpu, TypedHelpersFillOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    const size_t n = 4099;
    auto* z = ctx.zeros<float>(n);
    auto* f = ctx.full<int32_t>(n, -7);
    auto* r = ctx.random<float>(n, 42, -2.0, 3.0);
    auto* r2 = ctx.random<float>(n, 42, -2.0, 3.0);
    auto* r3 = ctx.random<float>(n, 43, -2.0, 3.0);
    auto* ri = ctx.random<int32_t>(n, 9, 0, 10);
    std::vector<float> hz(n), hr(n), hr2(n), hr3(n);
    std::vector<int32_t> hf(n), hri(n);
    IRIS_CUDA_CHECK(cudaMemcpy(hr3.data(), r3, n * 4, cudaMemcpyDeviceToHost));
    IRIS_CUDA_CHECK(cudaMemcpy(hz.data(), z, n * 4, cudaMemcpyDeviceToHost));
    IRIS_CUDA_CHECK(cudaMemcpy(hf.data(), f, n * 4, cudaMemcpyDeviceToHost));
    IRIS_CUDA_CHECK(cudaMemcpy(hr.data(), r, n * 4, cudaMemcpyDeviceToHost));
    IRIS_CUDA_CHECK(cudaMemcpy(hr2.data(), r2, n * 4, cudaMemcpyDeviceToHost));
    IRIS_CUDA_CHECK(cudaMemcpy(hri.data(), ri, n * 4, cudaMemcpyDeviceToHost));
    double mean = 0;
    int hist[10] = {};
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(hz[i], 0.0f);
      ASSERT_EQ(hf[i], -7);
      ASSERT_GE(hr[i], -2.0f);
      ASSERT_LT(hr[i], 3.0f);
      ASSERT_EQ(hr[i], hr2[i]) << "same seed must give the same values";
      ASSERT_GE(hri[i], 0);
      ASSERT_LT(hri[i], 10);
      hist[hri[i]]++;
      mean += hr[i];
    }
    EXPECT_NEAR(mean / n, 0.5, 0.1);
    size_t same = 0;  // another seed gives other values (a test audit's finding: an ignored seed passed)
    for (size_t i = 0; i < n; ++i) same += hr3[i] == hr[i];
    EXPECT_LT(same, n / 100) << "seeds 42 and 43 gave the same values";
    // "On every rank": the values depend on (seed, index) only, so every rank holds the same ones.
    const auto all = ctx.bootstrap().allgather(std::string(reinterpret_cast<const char*>(hr.data()), n * 4));
    for (int rank = 0; rank < ctx.world_size(); ++rank)
      EXPECT_EQ(all[rank], all[ctx.rank()]) << "rank " << rank << "'s random values differ";
    for (int b = 0; b < 10; ++b) EXPECT_GT(hist[b], static_cast<int>(n / 20)) << "bucket " << b;
    for (void* p : {static_cast<void*>(z), static_cast<void*>(f), static_cast<void*>(r), static_cast<void*>(r2),
                    static_cast<void*>(r3), static_cast<void*>(ri)})
      ctx.free(p);
    ctx.barrier();
  }, small_heap());
}

// Context::ordering_event: one event per index, the same on every call (ops reuse them instead of
// creating events per call), distinct across indices, and usable to order side_stream() after stream().
TEST_P(HeapGpu, OrderingEventsAreOnePerIndexAndReused) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const cudaEvent_t e2 = ctx.ordering_event(2);  // creates 0, 1 and 2
        const cudaEvent_t e0 = ctx.ordering_event(0), e1 = ctx.ordering_event(1);
        EXPECT_EQ(ctx.ordering_event(2), e2);
        EXPECT_EQ(ctx.ordering_event(0), e0);
        EXPECT_NE(e0, e1);
        EXPECT_NE(e0, e2);
        EXPECT_NE(e1, e2);
        auto* x = ctx.zeros<uint32_t>(1024);
        for (int round = 0; round < 3; ++round) {  // recorded again each round, as every op call does
          IRIS_CUDA_CHECK(cudaMemsetAsync(x, round + 1, 1024 * sizeof(uint32_t), ctx.stream()));
          IRIS_CUDA_CHECK(cudaEventRecord(e0, ctx.stream()));
          IRIS_CUDA_CHECK(cudaStreamWaitEvent(ctx.side_stream(), e0, 0));
          uint32_t first = 0;
          IRIS_CUDA_CHECK(cudaMemcpyAsync(&first, x, sizeof(first), cudaMemcpyDeviceToHost, ctx.side_stream()));
          IRIS_CUDA_CHECK(cudaStreamSynchronize(ctx.side_stream()));
          EXPECT_EQ(first, 0x01010101u * static_cast<uint32_t>(round + 1)) << "round " << round;
        }
        ctx.free(x);
        ctx.barrier();
      },
      small_heap());
}

TEST_P(HeapGpu, RankAllocatingOutOfStepMakesEveryRankThrow) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(GetParam(), [](Context& ctx) {
    void* a = ctx.alloc(1024);
    void* extra = ctx.rank() == 1 ? ctx.alloc(512) : nullptr;  // rank 1 goes out of step
    try {
      ctx.barrier();
      ADD_FAILURE() << "rank " << ctx.rank() << ": barrier accepted an asymmetric allocation sequence";
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("Heap allocation sequence differs across ranks: rank 0 made 1 (hash "), std::string::npos)
          << what;
      EXPECT_NE(what.find("rank 1 made 2 (hash "), std::string::npos) << what;
      EXPECT_NE(what.find("Every rank must allocate and free the same sizes in the same order."), std::string::npos);
    }
    // The hash covers the history, so the ranks stay out of step (a programming error to fix, not
    // to recover from); each rank still frees what it allocated before the context goes.
    if (extra) ctx.free(extra);
    ctx.free(a);
    EXPECT_THROW(ctx.check_heap_symmetry(), std::invalid_argument);
  }, small_heap());
}

// A DeviceBarrier whose construction raises (its closing barrier found rank 1 out of step) leaves no words
// behind on any rank: before 2026-12-07 they stayed allocated for the context's life.
TEST_P(HeapGpu, ADeviceBarrierThatFailsToConstructFreesItsWords) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        void* extra = ctx.rank() == 1 ? ctx.alloc(512) : nullptr;  // rank 1 goes out of step
        const size_t free_before = ctx.heap_bytes_free();
        try {
          DeviceBarrier barrier(ctx);
          ADD_FAILURE() << "rank " << ctx.rank() << ": a DeviceBarrier was made over an asymmetric allocation sequence";
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("Heap allocation sequence differs across ranks"), std::string::npos)
              << e.what();
        }
        EXPECT_EQ(ctx.heap_bytes_free(), free_before) << "rank " << ctx.rank();
        if (extra) ctx.free(extra);
      },
      small_heap());
}

// An alignment is honoured as an address on every rank's slot up to the heap's allocation granularity, and
// refused above it (before 2026-12-07 the offset was aligned and the address only to the granularity).
TEST_P(HeapGpu, AlignmentsUpToTheGranularityAreAddressesAndAboveAreRefused) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        // The device's (2 MiB on H100 and H200); the ranks' GPUs are alike here, so it is the heap's too.
        const size_t granularity = SymmetricHeap::allocation_granularity(ctx.device());
        void* small = ctx.alloc(100);
        void* p = ctx.alloc(100, granularity);
        for (int r = 0; r < ctx.world_size(); ++r)
          EXPECT_EQ(reinterpret_cast<uintptr_t>(ctx.translate(p, r)) % granularity, 0u) << "slot " << r;
        EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ctx.alloc(100, 2 * granularity); }),
                  "Heap alignment of " + std::to_string(2 * granularity) +
                      " bytes is above the heap's allocation granularity (" + std::to_string(granularity) +
                      " bytes), the most its addresses are aligned to: ask for at most that.");
        ctx.free(p);
        ctx.free(small);
        ctx.barrier();  // the refusal recorded nothing: the ranks are in step
      },
      small_heap());
}

TEST_P(HeapGpu, HeapSizeIsRoundedToGranularityAndMustAgree) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  ContextOptions odd = small_heap();
  odd.heap_size = (size_t{64} << 20) + 1;
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const size_t granularity = SymmetricHeap::allocation_granularity(ctx.device());  // 2 MiB on H100 and H200
        const size_t rounded = ((size_t{64} << 20) / granularity + 1) * granularity;
        EXPECT_EQ(ctx.heap_size(), rounded) << "64 MiB + 1 rounds up to the " << granularity << "-byte granularity";
        void* p = ctx.alloc(rounded - ctx.heap_guard_bytes());  // the whole rounded heap is usable
        EXPECT_THROW(ctx.alloc(1), std::invalid_argument);
        ctx.free(p);
        ctx.barrier();
      },
      odd);
}

// ---- heap guards (ContextOptions::heap_guards, IRIS_HEAP_GUARDS=1) ------------------------------------

ContextOptions guarded_heap() {
  ContextOptions o = small_heap();
  o.heap_guards = true;
  return o;
}

__global__ void write_byte(uint8_t* p, uint8_t v) { *p = v; }

// Rank `writer` writes `value` at `at` bytes from `obj` in rank `owner`'s heap (through translate).
void write_at(Context& ctx, int writer, int owner, void* obj, size_t at, uint8_t value) {
  if (ctx.rank() != writer) return;
  write_byte<<<1, 1, 0, ctx.stream()>>>(static_cast<uint8_t*>(ctx.translate(obj, owner)) + at, value);
  IRIS_CUDA_CHECK_LAUNCH();
}

std::string hex(unsigned v) {
  char b[8];
  std::snprintf(b, sizeof(b), "0x%02x", v & 0xffu);
  return b;
}

// What one damaged guard reads like: `changed` of `span` guard bytes after the object at `object`
// (`bytes` long, allocation #`serial`), the first at byte `past` past its end (0 is the byte right after
// it), where 0x00 was written.
std::string damaged(size_t changed, size_t span, size_t object, size_t bytes, int serial, size_t past,
                    bool freed = false) {
  return std::to_string(changed) + " of " + std::to_string(span) + " guard bytes after the heap object at offset " +
         std::to_string(object) + " (" + std::to_string(bytes) + " bytes, allocation #" + std::to_string(serial) +
         (freed ? ", freed since" : "") + ") changed, the first at byte " + std::to_string(past) +
         " past its end (0x00 instead of " + hex(detail::heap_guard_byte(object + bytes + past)) + ")";
}

const char* kGuardAdvice =
    ". A kernel wrote past the end of a heap object (or before the start of the next) since the last check (heap "
    "guards are checked at barrier() and free()); the guards are restored.";

// A write one byte past a heap object, from a peer or from the owner, in the padding or past a block of
// whole 256-byte units, into a live or a since-freed object: the next barrier raises HeapCorruption on
// every rank with the rank, the object and the bytes, and the guards are restored. Writes inside the
// objects raise nothing.
TEST_P(HeapGpu, GuardsCatchAWritePastAHeapObjectOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int last = ctx.world_size() - 1;
        ASSERT_EQ(ctx.heap_guard_bytes(), 256u);
        ASSERT_EQ(ctx.allocation_count(), 0u) << "a fresh context: a, b and c are allocations #1, #2 and #3";
        char* a = static_cast<char*>(ctx.alloc(1000));
        char* b = static_cast<char*>(ctx.alloc(4096));
        char* c = static_cast<char*>(ctx.alloc(64));
        const size_t oa = ctx.offset_of(a), ob = ctx.offset_of(b), oc = ctx.offset_of(c);
        const int sa = 1, sc = 3;
        EXPECT_EQ(ob, oa + 1024 + 256) << "1000 bytes take 1024 and the guard 256 more";
        EXPECT_EQ(oc, ob + 4096 + 256);
        auto barrier_error = [&] { return test::error_text<HeapCorruption>([&] { ctx.barrier(); }); };

        write_at(ctx, last, 0, a, 999, 1);  // the objects' own last bytes
        write_at(ctx, last, 0, b, 4095, 1);
        EXPECT_EQ(barrier_error(), "(no exception of the expected type thrown)");

        // The last rank writes one byte past a in rank 0's heap.
        write_at(ctx, last, 0, a, 1000, 0);
        EXPECT_EQ(barrier_error(), "Heap guard damaged on rank 0: " + damaged(1, 280, oa, 1000, sa, 0) + kGuardAdvice);
        EXPECT_EQ(barrier_error(), "(no exception of the expected type thrown)") << "restored after the report";

        // Past a block of whole units (no padding to hide in): the guard's last byte, and a's guard too.
        write_at(ctx, 0, 0, b, 4096 + 255, 0);
        write_at(ctx, 0, 0, a, 1000 + 279, 0);
        EXPECT_EQ(barrier_error(), "Heap guard damaged on rank 0: " + damaged(1, 280, oa, 1000, sa, 279) +
                                       "; and 1 more damaged guard(s)" + kGuardAdvice);

        // Every rank past c in its own heap, then c is freed before the check: reported at the next barrier.
        write_at(ctx, ctx.rank(), ctx.rank(), c, 64, 0);
        ctx.free(c);
        std::string all;
        for (int r = 0; r <= last; ++r)
          all += (r == 0 ? "on rank " : "; on rank ") + std::to_string(r) + ": " + damaged(1, 448, oc, 64, sc, 0, true);
        EXPECT_EQ(barrier_error(), "Heap guard damaged " + all + kGuardAdvice);
        EXPECT_EQ(barrier_error(), "(no exception of the expected type thrown)");
        ctx.free(b);
        ctx.free(a);
        ctx.barrier();
      },
      guarded_heap());
}

// Each rank creates its context with `on` true on rank 1 only (the environment variable unset, which would
// turn rank 0's on too); returns what each raised.
std::vector<std::string> create_with_switch_on_rank_1(const char* env_name, bool ContextOptions::*on) {
  test::ScopedEnv env(env_name, nullptr);
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(30));
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ContextOptions o = small_heap();
      o.device = r % test::gpu_count();
      o.*on = r == 1;
      errors[r] = test::error_text([&] { Context ctx(bootstraps[r], o); });
    });
  for (auto& t : threads) t.join();
  return errors;
}

// The guards change every offset, so ranks must agree on them: every rank raises. Both ranks may use
// one GPU here: the check runs before any heap exists.
TEST(HeapGpuThreads, HeapGuardsOnOneRankOnlyRaiseOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(1);
  const auto errors = create_with_switch_on_rank_1("IRIS_HEAP_GUARDS", &ContextOptions::heap_guards);
  EXPECT_EQ(errors[0],
            "Heap guards differ across ranks: rank 0 has them off but rank 1 has them on. Set the same "
            "IRIS_HEAP_GUARDS (or heap_guards) on every rank.");
  EXPECT_EQ(errors[1],
            "Heap guards differ across ranks: rank 1 has them on but rank 0 has them off. Set the same "
            "IRIS_HEAP_GUARDS (or heap_guards) on every rank.");
}

// A rank that checks its calls (IRIS_CHECK_CALLS) would wait in the bootstrap at every call for peers that
// do not: the ranks compare the switch when they create the context, and every rank raises.
TEST(HeapGpuThreads, CallChecksOnOneRankOnlyRaiseOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(1);
  const auto errors = create_with_switch_on_rank_1("IRIS_CHECK_CALLS", &ContextOptions::check_calls);
  EXPECT_EQ(errors[0],
            "Call checks differ across ranks: rank 0 has them off but rank 1 has them on. Set the same "
            "IRIS_CHECK_CALLS (or check_calls) on every rank.");
  EXPECT_EQ(errors[1],
            "Call checks differ across ranks: rank 1 has them on but rank 0 has them off. Set the same "
            "IRIS_CHECK_CALLS (or check_calls) on every rank.");
}

// Threads only: both ranks must be steered to different heap sizes inside one test process. Both may use one
// GPU, as above: the check runs before any heap exists (before 2026-12-06 it asked for two GPUs, and no run on
// one GPU checked the message).
TEST(HeapGpuThreads, DifferentHeapSizesOnRanksRaiseOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(1);
  test::ScopedEnv env("IRIS_HEAP_SIZE", nullptr);
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(30));
  std::atomic<int> raised{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ContextOptions o;
      o.device = r % test::gpu_count();
      o.heap_size = r == 0 ? size_t{64} << 20 : size_t{128} << 20;
      try {
        Context ctx(bootstraps[r], o);
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("Heap sizes differ across ranks"), std::string::npos) << e.what();
        raised++;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(raised.load(), 2);
}

TEST(HeapGpuThreads, ContextsCreatedOneAfterAnotherLeakNothing) {
  IRIS_TEST_REQUIRE_GPUS(1);
  const int world = std::min(test::gpu_count(), 2);
  // Free memory summed over every device the ranks use (rank r on device r): a leak of a peer's heap, or of
  // its import of this rank's, shows on its own device (before 2026-12-06 only device 0 was measured).
  auto device_free = [world] {
    size_t sum = 0;
    for (int d = 0; d < world; ++d) {
      size_t free_bytes = 0, total = 0;
      IRIS_CUDA_CHECK(cudaSetDevice(d));
      IRIS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
      sum += free_bytes;
    }
    IRIS_CUDA_CHECK(cudaSetDevice(0));
    return sum;
  };
  run_threads(world, [](Context& ctx) { ctx.barrier(); }, small_heap());  // warm: CUDA contexts exist
  const size_t before = device_free();
  for (int i = 0; i < 10; ++i)
    run_threads(world, [i](Context& ctx) {
      auto* p = ctx.full<int32_t>(1000, i);
      int32_t v = 0;
      IRIS_CUDA_CHECK(cudaMemcpy(&v, p + 999, 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(v, i);
      ctx.barrier();
    }, small_heap());
  const size_t after = device_free();
  EXPECT_LE(before > after ? before - after : 0, size_t{4} << 20) << "device memory leaked across 10 contexts";
}

// What each of two thread ranks raises creating its Context with `options_of(rank)`, "" if it did not.
template <typename OptionsOf>
std::vector<std::string> create_on_two_threads(OptionsOf&& options_of) {
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(30));
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        Context ctx(bootstraps[r], options_of(r));
      } catch (const RemoteError& e) {
        errors[r] = std::string("RemoteError: ") + e.what();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// A Context that fails to set up on one rank fails on every rank, at once: the rank its own error, its peer
// RemoteError naming it and the step (Context's agreed steps), instead of going on to the heap and waiting
// in its first exchange until the bootstrap timeout. Both ranks may use one GPU: nothing runs on it.
TEST(HeapGpuThreads, AContextThatFailsOnOneRankRaisesOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(1);
  const int gpus = test::gpu_count();
  const auto start = std::chrono::steady_clock::now();
  const auto errors = create_on_two_threads([](int r) {
    ContextOptions o = small_heap();
    o.device = r == 1 ? 999 : 0;
    return o;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "a rank waited for a timeout";
  const std::string own = "rank 1 was assigned device 999 but only " + std::to_string(gpus) +
                          " CUDA device(s) are visible to it (ContextOptions::device, which create_from_env sets to "
                          "the local rank and run_threads to the rank). Make every GPU of the host visible to every "
                          "rank (a launcher that binds one GPU per task, such as srun --gpus-per-task=1 or a "
                          "CUDA_VISIBLE_DEVICES per rank, leaves each rank device 0 only), or pass a device it sees.";
  EXPECT_EQ(errors[1], own);
  EXPECT_EQ(errors[0], "RemoteError: rank 1 failed to set up its device: " + own);
}

// A heap no GPU holds (1 TiB per rank) is refused on every rank with what to change, and the failed
// constructions leave nothing behind: the device's free memory is what it was, and a Context of a
// sensible size then works on the same device. Two thread ranks on device 0 (one window, no kernel).
TEST(HeapGpuThreads, AHeapTheGpuCannotHoldIsRefusedOnEveryRankAndLeaksNothing) {
  IRIS_TEST_REQUIRE_GPUS(1);
  auto device_free = [] {
    size_t free_bytes = 0, total = 0;
    IRIS_CUDA_CHECK(cudaSetDevice(0));
    IRIS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
  };
  run_threads(
      1, [](Context& ctx) { ctx.barrier(); }, small_heap());  // warm: the CUDA context exists
  const size_t before = device_free();
  const size_t huge = size_t{1} << 40;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto errors = create_on_two_threads([&](int) {
      ContextOptions o;
      o.device = 0;
      o.heap_size = huge;
      return o;
    });
    const std::string head = "rank 0 could not create its " + std::to_string(huge) +
                             "-byte symmetric heap: its GPU (device 0) cannot hold it; set a smaller IRIS_HEAP_SIZE "
                             "(or ContextOptions::heap_size) on every rank, or free memory on that GPU. CUDA driver "
                             "error CUDA_ERROR_OUT_OF_MEMORY";
    for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r].rfind(head, 0), 0u) << "rank " << r << ": " << errors[r];
  }
  const size_t after = device_free();
  EXPECT_LE(before > after ? before - after : 0, size_t{4} << 20) << "device memory leaked by failed contexts";
  run_threads(
      1,
      [](Context& ctx) {
        auto* p = ctx.full<int32_t>(1000, 7);
        int32_t v = 0;
        IRIS_CUDA_CHECK(cudaMemcpy(&v, p + 999, 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(v, 7);
        ctx.barrier();
      },
      small_heap());
}

TEST(HeapGpuThreads, ExceptionOnOneRankReleasesTheOthers) {
  IRIS_TEST_REQUIRE_GPUS(2);
  auto start = std::chrono::steady_clock::now();
  try {
    run_threads(2, [](Context& ctx) {
      if (ctx.rank() == 1) throw std::runtime_error("rank 1 gives up");
      ctx.barrier();  // would wait forever for rank 1
    }, small_heap());
    ADD_FAILURE() << "run_threads swallowed the exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "rank 1 gives up") << "the root cause, not the RemoteError it caused, reaches the caller";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

__global__ void hold_then_write(int* p, int us, int value) {
  const uint64_t end = test::global_timer_ns() + static_cast<uint64_t>(us) * 1000u;
  while (test::global_timer_ns() < end) __nanosleep(1000);
  *p = value;
}

// A context destroyed while a kernel on a stream of the caller's still writes its heap waits for it before
// unmapping the heap (before 2026-12-06 it waited for its own stream only: the kernel wrote to unmapped memory
// and faulted, or, had a new context mapped its heap there, into that one's objects).
TEST(HeapGpuThreads, ADestroyedContextWaitsForTheKernelsOfEveryStreamOfItsDevice) {
  IRIS_TEST_REQUIRE_GPUS(1);
  IRIS_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t user = nullptr;
  IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  test::load_kernels(hold_then_write);
  constexpr int kHoldUs = 300000;
  std::chrono::steady_clock::time_point launched;
  run_threads(
      1,
      [&](Context& ctx) {
        int* p = ctx.zeros<int>(1);
        launched = std::chrono::steady_clock::now();
        hold_then_write<<<1, 1, 0, user>>>(p, kHoldUs, 42);
        IRIS_CUDA_CHECK_LAUNCH();
      },
      small_heap());
  const auto took = std::chrono::steady_clock::now() - launched;  // the launch to the context's end
  const cudaError_t err = cudaStreamSynchronize(user);
  EXPECT_EQ(err, cudaSuccess) << "the kernel on the caller's stream: " << cudaGetErrorName(err);
  EXPECT_GE(took, std::chrono::microseconds(kHoldUs)) << "the context was gone before the kernel ended";
  if (err == cudaSuccess) IRIS_CUDA_CHECK(cudaStreamDestroy(user));
}

// Memory a kernel on the context's device cannot reach is named before any launch (Context::reach_problem),
// instead of faulting in the kernel (a sticky error for the whole process, and peers waiting out their
// device timeouts); what it can reach passes. Another device's memory needs a second GPU.
TEST(HeapGpuThreads, ReachProblemNamesMemoryTheDeviceCannotReach) {
  IRIS_TEST_REQUIRE_GPUS(1);
  run_threads(
      1,
      [](Context& ctx) {
        constexpr size_t kBytes = 4096;
        void* heap = ctx.alloc(kBytes);
        EXPECT_EQ(ctx.reach_problem(heap), "") << "the heap";
        void* device = nullptr;
        void* managed = nullptr;
        void* pinned = nullptr;
        IRIS_CUDA_CHECK(cudaMalloc(&device, kBytes));
        IRIS_CUDA_CHECK(cudaMallocManaged(&managed, kBytes));
        IRIS_CUDA_CHECK(cudaHostAlloc(&pinned, kBytes, cudaHostAllocDefault));  // mapped: UVA
        EXPECT_EQ(ctx.reach_problem(device), "") << "device memory of the context's device";
        EXPECT_EQ(ctx.reach_problem(static_cast<char*>(device) + 100), "") << "inside it";
        EXPECT_EQ(ctx.reach_problem(managed), "") << "managed memory";
        EXPECT_EQ(ctx.reach_problem(pinned), "") << "pinned host memory";
        std::vector<char> pageable(kBytes);
        const bool pageable_access = test::pageable_access(ctx.device());
        const std::string dev = std::to_string(ctx.device());
        EXPECT_EQ(ctx.reach_problem(pageable.data()), pageable_access ? "" : test::pageable_memory_problem(ctx))
            << "pageable access: " << pageable_access;
        if (test::gpu_count() >= 2) {
          const int other = (ctx.device() + 1) % test::gpu_count();
          void* elsewhere = nullptr;
          IRIS_CUDA_CHECK(cudaSetDevice(other));
          IRIS_CUDA_CHECK(cudaMalloc(&elsewhere, kBytes));
          IRIS_CUDA_CHECK(cudaSetDevice(ctx.device()));
          EXPECT_EQ(ctx.reach_problem(elsewhere),
                    "is memory of device " + std::to_string(other) + ", but rank 0's context runs on device " + dev +
                        "; pass memory of device " + dev + " (or an allocation of the symmetric heap).");
          IRIS_CUDA_CHECK(cudaFree(elsewhere));
        } else {
          std::printf("[ iris     ] another device's memory not checked: one GPU visible\n");
        }
        IRIS_CUDA_CHECK(cudaFree(device));
        IRIS_CUDA_CHECK(cudaFree(managed));
        IRIS_CUDA_CHECK(cudaFreeHost(pinned));
        ctx.free(heap);
      },
      small_heap());
}

// An op's stream (Context::op_stream): none means the context's stream, CUDA's special handles and the
// device's own streams pass as they are, and a stream of another device is refused, naming the op, before
// anything is queued. The refusal needs a second GPU.
TEST(HeapGpuThreads, OpStreamIsTheContextsForNoneAndRefusesAnotherDevicesStream) {
  IRIS_TEST_REQUIRE_GPUS(1);
  run_threads(
      1,
      [](Context& ctx) {
        EXPECT_EQ(ctx.op_stream("op", nullptr), ctx.stream());
        EXPECT_EQ(ctx.op_stream("op", cudaStreamLegacy), cudaStreamLegacy);
        EXPECT_EQ(ctx.op_stream("op", cudaStreamPerThread), cudaStreamPerThread);
        cudaStream_t own = nullptr;
        IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
        EXPECT_EQ(ctx.op_stream("op", own), own);
        // While a graph is captured in global mode (the strictest: unsafe calls refused, and the capture
        // invalidated), both queries are made without harm: the capture ends with a graph.
        void* device = nullptr;
        cudaStream_t plain = nullptr;  // not captured: its device is asked (cudaStreamGetDevice)
        IRIS_CUDA_CHECK(cudaMalloc(&device, 256));
        IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&plain, cudaStreamNonBlocking));
        IRIS_CUDA_CHECK(cudaStreamBeginCapture(own, cudaStreamCaptureModeGlobal));
        const cudaStream_t during = ctx.op_stream("op", own);
        const cudaStream_t beside = ctx.op_stream("op", plain);
        const std::string reach = ctx.reach_problem(device);
        cudaGraph_t graph = nullptr;
        EXPECT_EQ(cudaStreamEndCapture(own, &graph), cudaSuccess);
        EXPECT_EQ(during, own);
        EXPECT_EQ(beside, plain);
        EXPECT_EQ(reach, "");
        IRIS_CUDA_CHECK(cudaStreamDestroy(plain));
        if (graph != nullptr) IRIS_CUDA_CHECK(cudaGraphDestroy(graph));
        (void)cudaGetLastError();
        IRIS_CUDA_CHECK(cudaFree(device));
        IRIS_CUDA_CHECK(cudaStreamDestroy(own));
        if (!test::other_device_stream_checkable()) {
          std::printf("[ iris     ] another device's stream not checked: %s\n",
                      test::gpu_count() < 2 ? "one GPU visible" : "toolkit or driver before CUDA 12.8");
          return;
        }
        const test::OtherDeviceStream elsewhere(ctx.device());
        EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ctx.op_stream("all_gather", elsewhere.get()); }),
                  test::other_device_stream_error("all_gather", ctx, elsewhere.device()));
      },
      small_heap());
}

INSTANTIATE_TEST_SUITE_P(Ranks, HeapGpu, ::testing::ValuesIn(test::any_world_rank_setups()), test::rank_setup_name);

}  // namespace
}  // namespace iris
