// GPU tests of all_reduce: every variant and dtype over Iris's shapes and awkward ones, against an
// fp64 host reference; in place; strided; CUDA-graph replays with changing inputs; the founding
// workspace regressions. 1 and 2 ranks (more with IRIS_TEST_MAX_RANKS), threads and processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ccl_test_util.cuh"
#include "iris/ccl/collectives.hpp"
#include "support/error_text.hpp"
#include "support/ranks.hpp"
#include "support/scoped_capture.hpp"
#include "support/stopped_error.hpp"

namespace iris {
namespace {

using ccl::AllReduceVariant;
using ccl::Config;
using ccl::OneShotProtocol;
using ccl::ReduceOp;
using ccl::Workspace;
using test::RankSetup;
using test::TestTensor;

struct Shape {
  int64_t m, n;
  int bm, bn;
};

// Iris's shapes, then the ones that break tiling. Fewer rows than block_size_m widen the tile variants'
// tiles (all_reduce.cc, tile_of): 1 x 70001 is 35 tiles of 1 x 2048, the last partial; 3 x 100003 is 157
// of 3 x 640.
const Shape kIrisShapes[] = {{128, 64, 32, 64}, {128, 128, 32, 32}, {256, 128, 32, 16}, {1024, 256, 32, 64}};
const Shape kAwkward[] = {{1, 1, 32, 64}, {1, 7, 32, 64}, {1, 70001, 32, 64}, {1000, 333, 32, 64}, {3, 100003, 32, 64}};
const Shape kLarge = {8192, 8192, 32, 64};
// Every type that reduces, in every variant.
const DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32,      DType::kInt64,
                         DType::kFloat64, DType::kInt8,    DType::kUInt8,    DType::kFloat8E4M3, DType::kFloat8E5M2};

ContextOptions big_heap(int world) {
  ContextOptions o;
  // 8192 x 8192 fp32 in + out, plus staging that grows with the ranks (one_shot: a slot per rank and parity).
  o.heap_size = (size_t{1} << 30) + static_cast<size_t>(world) * (size_t{512} << 20);
  o.device_timeout = std::chrono::milliseconds(20000);
  // Heap guards: a kernel that writes past the end of an output or a workspace array (into the rounding up
  // to 256 bytes, where the checks of the outputs do not look, or into the next heap object) makes the next
  // barrier() raise HeapCorruption (a test audit's finding: nothing here saw such a write before 2026-12-06).
  o.heap_guards = true;
  return o;
}

// A default config of variant v (and one_shot protocol).
Config variant_config(AllReduceVariant v, OneShotProtocol protocol = OneShotProtocol::kAuto) {
  Config cfg;
  cfg.all_reduce_variant = v;
  cfg.all_reduce_one_shot_protocol = protocol;
  return cfg;
}

// Reserves `ws` for each of `calls`, all_reduces of a shape in a config (ccl::reserve_workspace), so that
// each call's own preamble then fits whatever their order: a workspace sizes each array by the first
// preamble that needs it and refuses a later one that needs more.
void prepare_for_every(Context& ctx, Workspace& ws, const std::vector<std::pair<Tensor, Config>>& calls) {
  ccl::WorkspaceNeeds most;
  for (const auto& [t, cfg] : calls) most.include(ccl::all_reduce_needs(t, t, cfg, ctx.world_size()));
  ccl::reserve_workspace(ctx, ws, most);
}
// The same for one shape in each of `configs`.
void prepare_for_every(Context& ctx, Workspace& ws, const Tensor& t, const std::vector<Config>& configs) {
  std::vector<std::pair<Tensor, Config>> calls;
  for (const Config& cfg : configs) calls.emplace_back(t, cfg);
  prepare_for_every(ctx, ws, calls);
}

// One all_reduce of rows x cols (row stride `stride`) on every rank; checks every element against
// the fp64 reference and that every rank holds bitwise-identical results.
void check_once(Context& ctx, const Config& cfg, Workspace& ws, DType dt, ReduceOp op, int64_t rows, int64_t cols,
                int64_t stride, bool in_place, bool on_heap, uint64_t seed, const std::string& what) {
  SCOPED_TRACE(what);
  const int world = ctx.world_size();
  auto in = TestTensor::make(ctx, dt, rows, cols, stride, on_heap);
  TestTensor out = in_place ? in : TestTensor::make(ctx, dt, rows, cols, stride, on_heap);
  const size_t esz = dtype_size(dt);
  // The call into an output poisoned with `poison` (out of place), checked; returns the output. An integer
  // poison (0xFF bytes: -1, or 255 for uint8) is a value a reduction can give: where some element's expected
  // value is that, the call runs again into 0x00 bytes, so that an element left unwritten shows either way
  // (the same decision on every rank: all_reduce's expected values are every rank's).
  bool poison_is_a_result = false;
  auto run = [&](unsigned char poison) {
    in.upload(ctx.stream(), test::make_input(dt, rows, cols, stride, seed, ctx.rank()));
    if (!in_place) out.poison(ctx.stream(), poison);
    ccl::all_reduce_preamble(ctx, out.view, in.view, cfg, ws, op);
    ccl::all_reduce(ctx, out.view, in.view, cfg, ws, ctx.stream(), op);
    ctx.synchronize();
    auto host = out.download(ctx.stream());
    const std::vector<char> poison_bytes(esz, static_cast<char>(poison));
    int64_t wrong = 0, first = -1;
    double first_got = 0, first_want = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        const char* bytes = host.data() + (r * stride + c) * esz;
        bool ok;
        double want, got;
        if (test::is_integer(dt)) {
          const int64_t g = test::decode_int(dt, bytes), w = test::reduce_int_ref(dt, op, seed, world, i);
          ok = g == w;
          poison_is_a_result = poison_is_a_result || w == test::decode_int(dt, poison_bytes.data());
          got = static_cast<double>(g), want = static_cast<double>(w);
        } else {
          got = decode_element(dt, bytes);
          ok = test::float_reduction_ok(dt, op, seed, world, i, got, &want);
        }
        if (!ok) {
          if (first < 0) first = i, first_got = got, first_want = want;
          ++wrong;
        }
      }
    EXPECT_EQ(wrong, 0) << "rank " << ctx.rank() << ": " << wrong << " of " << rows * cols
                        << " wrong (output poisoned with 0x" << std::hex << int{poison} << std::dec
                        << " bytes); first at element " << first << ": got " << first_got << ", want " << first_want;
    // Padding between rows is never written (in place it is the input's, 0xFF bytes as the poison).
    if (stride > cols) {
      int64_t written = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = cols; c < stride; ++c)
          for (size_t b = 0; b < esz; ++b)  // every byte of the element
            written += static_cast<unsigned char>(host[(r * stride + c) * esz + b]) != poison;
      EXPECT_EQ(written, 0) << "row padding written";
    }
    return host;
  };
  std::vector<char> host = run(0xFF);
  if (!in_place && poison_is_a_result) host = run(0x00);
  const uint64_t h = test::hash_elements(host, dt, rows, cols, stride);
  auto all = ctx.bootstrap().allgather(std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
  for (int r = 0; r < world; ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << "'s result differs bitwise from rank 0";
  ctx.barrier();
  if (!in_place) out.release();
  in.release();
}

class AllReduce : public ::testing::TestWithParam<RankSetup> {};

void run_variant(const RankSetup& setup, AllReduceVariant variant, OneShotProtocol protocol = OneShotProtocol::kAuto) {
  test::run_ranks(
      setup,
      [variant, protocol](Context& ctx) {
        uint64_t seed = 1;
        const bool adds_only = variant == AllReduceVariant::kAtomic;  // sum and avg only
        Config base;
        base.all_reduce_variant = variant;
        base.all_reduce_one_shot_protocol = protocol;
        for (DType dt : kDtypes) {
          for (const Shape& s : kIrisShapes) {
            Config cfg = base;
            cfg.block_size_m = s.bm;
            cfg.block_size_n = s.bn;
            Workspace ws;
            std::string what = std::string(test::short_name(dt)) + " " + std::to_string(s.m) + "x" +
                               std::to_string(s.n) + " blocks " + std::to_string(s.bm) + "x" + std::to_string(s.bn);
            check_once(ctx, cfg, ws, dt, ReduceOp::kSum, s.m, s.n, s.n, false, true, seed++, what + " sum heap");
            check_once(ctx, cfg, ws, dt, ReduceOp::kSum, s.m, s.n, s.n, false, false, seed++, what + " sum cudaMalloc");
            ccl::ContextWorkspaceHost host(ctx);
            ws.release(host);
          }
          for (const Shape& s : kAwkward) {
            const Config cfg = base;
            Workspace ws;
            std::string what =
                std::string(test::short_name(dt)) + " " + std::to_string(s.m) + "x" + std::to_string(s.n);
            check_once(ctx, cfg, ws, dt, ReduceOp::kSum, s.m, s.n, s.n, false, true, seed++, what + " sum");
            check_once(ctx, cfg, ws, dt, ReduceOp::kAvg, s.m, s.n, s.n, false, true, seed++, what + " avg");
            if (!adds_only) {
              check_once(ctx, cfg, ws, dt, ReduceOp::kMax, s.m, s.n, s.n, false, true, seed++, what + " max");
              check_once(ctx, cfg, ws, dt, ReduceOp::kMin, s.m, s.n, s.n, false, false, seed++, what + " min");
              check_once(ctx, cfg, ws, dt, ReduceOp::kProd, s.m, s.n, s.n, false, true, seed++, what + " prod");
            }
            // Row stride larger than the row, and in place.
            check_once(ctx, cfg, ws, dt, ReduceOp::kSum, s.m, s.n, s.n + 5, false, false, seed++, what + " strided");
            check_once(ctx, cfg, ws, dt, ReduceOp::kSum, s.m, s.n, s.n, true, true, seed++, what + " in place");
            check_once(ctx, cfg, ws, dt, ReduceOp::kSum, s.m, s.n, s.n + 5, true, false, seed++,
                       what + " in place strided");
            ccl::ContextWorkspaceHost host(ctx);
            ws.release(host);
          }
        }
        // Many tiles: 8192 x 8192 (bf16 only, to keep the host reference affordable).
        Config cfg = base;
        cfg.block_size_m = kLarge.bm;
        cfg.block_size_n = kLarge.bn;
        Workspace ws;
        check_once(ctx, cfg, ws, DType::kBFloat16, ReduceOp::kSum, kLarge.m, kLarge.n, kLarge.n, false, true, seed++,
                   "bf16 8192x8192");
        ccl::ContextWorkspaceHost host(ctx);
        ws.release(host);
      },
      big_heap(setup.world));
}

TEST_P(AllReduce, AutoMatchesFp64Reference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  run_variant(GetParam(), AllReduceVariant::kAuto);
}
// one_shot in both protocols over every shape (`auto` alone would pick LL for all but the 8192 x 8192 one).
TEST_P(AllReduce, OneShotLLMatchesFp64Reference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  run_variant(GetParam(), AllReduceVariant::kOneShot, OneShotProtocol::kLL);
}
TEST_P(AllReduce, OneShotSimpleMatchesFp64Reference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  run_variant(GetParam(), AllReduceVariant::kOneShot, OneShotProtocol::kSimple);
}
TEST_P(AllReduce, TwoShotMatchesFp64Reference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  run_variant(GetParam(), AllReduceVariant::kTwoShot);
}
TEST_P(AllReduce, RingMatchesFp64Reference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  run_variant(GetParam(), AllReduceVariant::kRing);
}
// The ring with column slices and several rings: a tile's slices travel one after another, and an
// all-gather slice shares its slot with reduce-scatter partials of later slices still in flight (for
// 16-bit types the partials are float, so the two layouts differ; for int64 they are the same). Slices of 16, 32 and 64
// columns, partial tiles on both edges (1000 x 333, and 4000 x 333 once, in batches of tiles) and whole 16-byte packs
// (256 x 512), sum and max, each shape three times on one workspace.
TEST_P(AllReduce, RingSlicesAndRingsMatchFp64Reference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        struct Layout {
          int bm, bn, slice_n, rings;
        };
        uint64_t seed = 500;
        for (const Layout& l : {Layout{32, 64, 16, 2}, Layout{64, 128, 32, 3}, Layout{16, 128, 64, 1}}) {
          for (DType dt : kDtypes) {
            Config cfg;
            cfg.all_reduce_variant = AllReduceVariant::kRing;
            cfg.block_size_m = l.bm;
            cfg.block_size_n = l.bn;
            cfg.all_reduce_ring_slice_n = l.slice_n;
            cfg.all_reduce_num_rings = l.rings;
            Workspace ws;
            // 4000 x 333 (first call only, and first: the workspace takes its size): walks long enough for
            // batches of several tiles (ring_batch) at every world size, whose tiles of the last tile column
            // have fewer slices than the others.
            for (int rep = 0; rep < 3; ++rep)
              for (const auto& [m, n] :
                   rep == 0 ? std::vector<std::pair<int64_t, int64_t>>{{4000, 333}, {1000, 333}, {256, 512}}
                            : std::vector<std::pair<int64_t, int64_t>>{{1000, 333}, {256, 512}}) {
                const std::string what = std::string(test::short_name(dt)) + " " + std::to_string(m) + "x" +
                                         std::to_string(n) + " blocks " + std::to_string(l.bm) + "x" +
                                         std::to_string(l.bn) + " slice " + std::to_string(l.slice_n) + " rings " +
                                         std::to_string(l.rings) + " call " + std::to_string(rep);
                check_once(ctx, cfg, ws, dt, ReduceOp::kSum, m, n, n, false, true, seed++, what + " sum");
                check_once(ctx, cfg, ws, dt, ReduceOp::kMax, m, n, n, false, true, seed++, what + " max");
              }
            ccl::ContextWorkspaceHost host(ctx);
            ws.release(host);
          }
        }
      },
      big_heap(GetParam().world));
}
TEST_P(AllReduce, AtomicMatchesFp64Reference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  run_variant(GetParam(), AllReduceVariant::kAtomic);
}
TEST_P(AllReduce, SpinlockMatchesFp64Reference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  run_variant(GetParam(), AllReduceVariant::kSpinlock);
}

// Element i of rank r in replay k: test::small_value, an integer in [-5, 5] hashed from all three, so the
// inputs and their sums over up to 8 ranks are exact in bf16. Until 2026-12-05 it was (i % 5 - 2) *
// (k % 3 + 1) * (r % 2 + 1): a replay reading staging left three replays before, an output shifted by a
// multiple of 5 elements, or ranks r and r + 2 mixed up all passed (a reviewer's finding).
__host__ __device__ int replay_value(int64_t i, int k, int rank) { return test::small_value(rank, k, i); }
__global__ void fill_replay_input(__nv_bfloat16* p, int64_t n, int rank, const int* k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = __float2bfloat16_rn(static_cast<float>(replay_value(i, *k, rank)));
}

std::string call_name(const Config& c) {
  return std::string(ccl::variant_name(c.all_reduce_variant)) +
         (c.all_reduce_one_shot_protocol == OneShotProtocol::kAuto
              ? ""
              : std::string(" ") + ccl::protocol_name(c.all_reduce_one_shot_protocol));
}

// Captures one graph of an input refresh (fill_replay_input) and an all_reduce of n bf16 elements in each
// of `cfgs`, in that order on one workspace (prepare_for_every), and replays it `replays` times: the
// input changes with every replay and every output is poisoned before it. Every output of every replay
// is checked against the exact sum: every element up to 4096, past it every `stride`-th from an offset that
// moves with the replay (so `stride` replays cover them all), and the last 64 + stride (the partial last
// pack and the last block's tail).
void replay_graph_and_check(Context& ctx, int64_t n, const std::vector<Config>& cfgs, int replays, int64_t stride) {
  const int world = ctx.world_size();
  const int calls = static_cast<int>(cfgs.size());
  auto* in = ctx.empty<__nv_bfloat16>(n);
  int* k = ctx.zeros<int>(1);
  const Tensor tin = Tensor::vector(in, DType::kBFloat16, n);
  std::vector<__nv_bfloat16*> outs;
  for (int i = 0; i < calls; ++i) outs.push_back(ctx.empty<__nv_bfloat16>(n));
  auto out_of = [&](int i) { return Tensor::vector(outs[i], DType::kBFloat16, n); };
  Workspace ws;
  prepare_for_every(ctx, ws, tin, cfgs);
  for (int i = 0; i < calls; ++i) ccl::all_reduce_preamble(ctx, out_of(i), tin, cfgs[i], ws);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  // Captured in global mode, PyTorch's default, which forbids the calls a graph cannot hold (an allocation, a
  // synchronization) to this thread and, with ranks as threads, to every thread: the calls must make none. The
  // host barriers keep every rank's setup and checks outside the other ranks' captures.
  ctx.bootstrap().barrier();
  {
    test::ScopedCapture capture(ctx.stream(), cudaStreamCaptureModeGlobal);
    fill_replay_input<<<64, 256, 0, ctx.stream()>>>(in, n, ctx.rank(), k);
    for (int i = 0; i < calls; ++i) ccl::all_reduce(ctx, out_of(i), tin, cfgs[i], ws);
    graph = capture.end();
  }
  ctx.bootstrap().barrier();
  IRIS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<__nv_bfloat16> host(n);
  int bad = 0;
  for (int rep = 0; rep < replays; ++rep) {
    IRIS_CUDA_CHECK(cudaMemcpyAsync(k, &rep, sizeof(int), cudaMemcpyHostToDevice, ctx.stream()));
    for (__nv_bfloat16* o : outs) IRIS_CUDA_CHECK(cudaMemsetAsync(o, 0xFF, n * 2, ctx.stream()));
    IRIS_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream()));
    for (int i = 0; i < calls; ++i) {
      IRIS_CUDA_CHECK(cudaMemcpyAsync(host.data(), outs[i], n * 2, cudaMemcpyDeviceToHost, ctx.stream()));
      ctx.synchronize();
      int64_t wrong = 0;
      auto check = [&](int64_t e) {
        int want = 0;
        for (int r = 0; r < world; ++r) want += replay_value(e, rep, r);
        wrong += __bfloat162float(host[e]) != static_cast<float>(want);
      };
      // Every element of the first 4096 and the last 64 + stride; between them one in `stride`, from an offset
      // that moves with the replay, so that every `stride` replays read every element (before 2026-12-06 each
      // replay read the same ones).
      const int64_t tail = std::max<int64_t>(4096, n - 64 - stride);
      for (int64_t e = 0; e < std::min<int64_t>(n, 4096); ++e) check(e);
      for (int64_t e = 4096 + rep % stride; e < tail; e += stride) check(e);
      for (int64_t e = tail; e < n; ++e) check(e);
      if (wrong && bad++ < 3)
        ADD_FAILURE() << "replay " << rep << ", call " << i << " (" << call_name(cfgs[i]) << "): " << wrong
                      << " wrong elements";
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(ws.calls(), static_cast<uint64_t>(calls)) << "captured once";
  IRIS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  IRIS_CUDA_CHECK(cudaGraphDestroy(graph));
  ctx.barrier();
  ccl::ContextWorkspaceHost host_ws(ctx);
  ws.release(host_ws);
  for (__nv_bfloat16* o : outs) ctx.free(o);
  ctx.free(k);
  ctx.free(in);
}

// 1,000 replays of a graph holding one input refresh and one all_reduce, for every variant and auto at a
// small and a large size; every replay checked. (Before 2026-12-05 ring, atomic and spinlock ran 200 and
// auto none.)
TEST_P(AllReduce, GraphReplaysWithChangingInputsStayCorrect) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        struct Case {
          AllReduceVariant v;
          OneShotProtocol protocol;
          int64_t n;
          int replays;
        };
        // one_shot simple over 300001 elements: 37 segments, so several per block and both parities.
        for (const Case& c : {Case{AllReduceVariant::kOneShot, OneShotProtocol::kLL, 4096, 1000},
                              Case{AllReduceVariant::kOneShot, OneShotProtocol::kSimple, 300001, 1000},
                              Case{AllReduceVariant::kTwoShot, OneShotProtocol::kAuto, 300001, 1000},
                              Case{AllReduceVariant::kRing, OneShotProtocol::kAuto, 4096, 1000},
                              Case{AllReduceVariant::kAtomic, OneShotProtocol::kAuto, 4096, 1000},
                              Case{AllReduceVariant::kSpinlock, OneShotProtocol::kAuto, 4096, 1000},
                              Case{AllReduceVariant::kAuto, OneShotProtocol::kAuto, 4096, 1000},
                              Case{AllReduceVariant::kAuto, OneShotProtocol::kAuto, 300001, 1000}}) {
          SCOPED_TRACE(call_name(variant_config(c.v, c.protocol)));
          replay_graph_and_check(ctx, c.n, {variant_config(c.v, c.protocol)}, c.replays, /*stride=*/13);
        }
      },
      big_heap(GetParam().world));
}

// One graph holding an input refresh and an all_reduce of every variant, all on one workspace, replayed
// 1,000 times (200 before 2026-12-05): every replay changes layout six times, so each call fences and atomic zeroes its
// accumulators (which hold what the other variants left in the staging) inside the graph, with nothing
// on the host between the calls. Every element of every output of every replay is checked.
TEST_P(AllReduce, GraphOfEveryVariantOnOneWorkspaceReplaysCorrectly) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        replay_graph_and_check(ctx, 3 * 4096 + 5,
                               {variant_config(AllReduceVariant::kOneShot, OneShotProtocol::kLL),
                                variant_config(AllReduceVariant::kAtomic), variant_config(AllReduceVariant::kRing),
                                variant_config(AllReduceVariant::kTwoShot), variant_config(AllReduceVariant::kSpinlock),
                                variant_config(AllReduceVariant::kOneShot, OneShotProtocol::kSimple)},
                               1000, /*stride=*/1);
      },
      big_heap(GetParam().world));
}

// LL lines of calls P = 2^31 epochs apart carry the same tag (ll_tag is a bijection of the epoch's low 31
// bits), so a line no call rewrote in between would pass as the later call's data to a reader that comes
// before its writer. ll_exchange.cu cleans a parity's staging every 2^30 epochs; this test sets the
// workspace's epoch (block state word 0, on every rank) to just below a wrap instead of making 2^31 calls,
// and holds rank 1 back 20 ms before each large call, so that rank 0 reads its staging first:
//   (a) after a preamble: small calls across P - 3 .. P - 1, then a large one at P, past the small calls'
//       lines, where the preamble left zeros;
//   (b) a large call at X = P + 2, the epoch set to X + P - 4, small calls, then a large call at X + P,
//       whose tag is that of X's lines past the small calls';
//   (c) the staging zeroed on every rank, as the zero partial sums a two_shot call of zero (padded) inputs
//       leaves there, then a large call at 2^33 (0 modulo 2^32; later than (b)'s calls).
// Without the clean, rank 0 took X's data as rank 1's (a wrong result, no error); with the tag before 2026-12-06
// (all 32 bits mixed, period 2^32) it took the zeros of (a) at 2^32 and those of (c) the same way. Every
// element of every call is checked on every rank.
TEST_P(AllReduce, LLLinesOfCallsATagPeriodApartOrStaleZerosNeverPassForLines) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "one rank copies: no staging";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const Config cfg = variant_config(AllReduceVariant::kOneShot, OneShotProtocol::kLL);
        const int64_t big = 4096, small = 64;  // float32 elements: 16 KiB and 256 B
        auto in_big = TestTensor::make(ctx, DType::kFloat32, 1, big, big, true);
        auto out_big = TestTensor::make(ctx, DType::kFloat32, 1, big, big, true);
        auto in_small = TestTensor::make(ctx, DType::kFloat32, 1, small, small, true);
        auto out_small = TestTensor::make(ctx, DType::kFloat32, 1, small, small, true);
        Workspace ws;
        ccl::all_reduce_preamble(ctx, out_big.view, in_big.view, cfg, ws);
        uint64_t seed = 3000;
        auto call = [&](TestTensor& in, TestTensor& out, int64_t n, const std::string& what) {
          SCOPED_TRACE(what);
          in.upload(ctx.stream(), test::make_input(DType::kFloat32, 1, n, n, seed, ctx.rank()));
          out.poison(ctx.stream());
          ctx.barrier();
          if (n == big && ctx.rank() == 1) test::hold_stream_us<<<1, 1, 0, ctx.stream()>>>(20000);
          ccl::all_reduce(ctx, out.view, in.view, cfg, ws);
          const auto host = out.download(ctx.stream());
          int64_t wrong = 0, first = -1;
          for (int64_t i = 0; i < n; ++i) {
            double want;
            if (!test::float_reduction_ok(DType::kFloat32, ReduceOp::kSum, seed, ctx.world_size(), i,
                                          decode_element(DType::kFloat32, host.data() + i * 4), &want) &&
                wrong++ == 0)
              first = i;
          }
          EXPECT_EQ(wrong, 0) << "rank " << ctx.rank() << ": " << wrong << " of " << n << " wrong, first at " << first;
          ++seed;
        };
        auto set_epoch = [&](uint64_t e) {  // on every rank, with no call running anywhere
          ctx.synchronize();
          ctx.barrier();
          IRIS_CUDA_CHECK(cudaMemcpy(ws.block_state(), &e, sizeof e, cudaMemcpyHostToDevice));
          ctx.barrier();
        };
        const uint64_t wrap = uint64_t{1} << 31;
        set_epoch(wrap - 4);  // (a)
        for (uint64_t e = wrap - 3; e < wrap; ++e)
          call(in_small, out_small, small, "small call at P - " + std::to_string(wrap - e));
        call(in_big, out_big, big, "large call at P (over the preamble's zeros)");
        call(in_big, out_big, big, "large call at P + 1");
        call(in_big, out_big, big, "large call at X = P + 2");  // (b)
        const uint64_t x = wrap + 2;
        set_epoch(x + wrap - 4);
        for (uint64_t e = x + wrap - 3; e < x + wrap; ++e)
          call(in_small, out_small, small, "small call at X + P - " + std::to_string(x + wrap - e));
        call(in_big, out_big, big, "large call at X + P (X's lines' tag)");
        set_epoch((uint64_t{1} << 33) - 1);  // (c)
        IRIS_CUDA_CHECK(cudaMemsetAsync(ws.staging(), 0, ws.staging_capacity(), ctx.stream()));
        ctx.synchronize();  // before call()'s barrier, after which the peers push
        call(in_big, out_big, big, "large call at 2^33 over a zeroed staging");
        ctx.barrier();
        ccl::ContextWorkspaceHost host(ctx);
        ws.release(host);
        for (TestTensor* t : {&out_small, &in_small, &out_big, &in_big}) t->release();
      },
      big_heap(GetParam().world));
}

// 100 calls with one workspace: the arrays are not reallocated and every result is right (the output
// poisoned before each call and every element checked, since 2026-12-05).
TEST_P(AllReduce, HundredCallsReuseTheWorkspace) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const AllReduceVariant variants[] = {AllReduceVariant::kOneShot, AllReduceVariant::kOneShot,
                                             AllReduceVariant::kTwoShot, AllReduceVariant::kSpinlock,
                                             AllReduceVariant::kAtomic,  AllReduceVariant::kRing};
        for (int k = 0; k < 6; ++k) {
          const AllReduceVariant v = variants[k];
          const Config cfg = variant_config(v, k == 1 ? OneShotProtocol::kSimple : OneShotProtocol::kAuto);
          Workspace ws;
          auto in = TestTensor::make(ctx, DType::kFloat32, 64, 1000, 1000, true);
          auto out = TestTensor::make(ctx, DType::kFloat32, 64, 1000, 1000, true);
          ccl::all_reduce_preamble(ctx, out.view, in.view, cfg, ws);
          const void* staging = ws.staging();
          const uint64_t heap_ops = ctx.allocation_count();
          for (int call = 0; call < 100; ++call) {
            in.upload(ctx.stream(), test::make_input(DType::kFloat32, 64, 1000, 1000, 1000 + call, ctx.rank()));
            out.poison(ctx.stream());
            ccl::all_reduce(ctx, out.view, in.view, cfg, ws);
            auto host = out.download(ctx.stream());
            int64_t wrong = 0;
            for (int64_t i = 0; i < 64000; ++i) {
              double want;
              wrong += !test::float_reduction_ok(DType::kFloat32, ReduceOp::kSum, 1000 + call, ctx.world_size(), i,
                                                 decode_element(DType::kFloat32, host.data() + i * 4), &want);
            }
            ASSERT_EQ(wrong, 0) << ccl::variant_name(v) << (k == 1 ? " simple" : "") << " call " << call;
          }
          ctx.synchronize();
          EXPECT_EQ(ws.staging(), staging);
          EXPECT_EQ(ctx.allocation_count(), heap_ops) << "all_reduce allocated on the heap";
          ctx.barrier();
          ccl::ContextWorkspaceHost host_ws(ctx);
          ws.release(host_ws);
          out.release();
          in.release();
        }
      },
      big_heap(GetParam().world));
}

// One workspace serving every variant (one_shot LL and simple, two_shot, ring, atomic, spinlock) over
// several shapes and tiles, enqueued back to back with no host synchronization in between: the layouts
// overlap in the staging, so a rank running ahead into a call of another layout would overwrite what a
// peer still reads unless the call fences first (layout_fence), and every flag must hold only epochs, or
// a wait would pass on what another layout left (before 2026-12-03 atomic and spinlock counted arrivals
// and the ring marked 2e + 1 and 2e + 2: an atomic call after another layout timed out, a two_shot after a
// ring read slots nobody had written). atomic after another layout zeroes its accumulators first; the
// same variant and shape twice in a row checks the reuse without a fence. Every output is checked
// afterwards.
TEST_P(AllReduce, VariantsAndShapesMixedBackToBackOnOneWorkspace) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    struct Call {
      AllReduceVariant variant;
      int64_t rows, cols;
      OneShotProtocol protocol = OneShotProtocol::kAuto;
      int block_m = 32, block_n = 64;
    };
    const Call calls[] = {{AllReduceVariant::kOneShot, 32, 1000},
                          {AllReduceVariant::kAtomic, 64, 1000},
                          {AllReduceVariant::kAtomic, 64, 1000},
                          {AllReduceVariant::kOneShot, 1024, 1000, OneShotProtocol::kSimple},
                          {AllReduceVariant::kRing, 100, 333},
                          {AllReduceVariant::kRing, 100, 333},
                          {AllReduceVariant::kTwoShot, 1024, 1000},
                          {AllReduceVariant::kSpinlock, 64, 1000},
                          {AllReduceVariant::kSpinlock, 64, 1000},
                          {AllReduceVariant::kOneShot, 1, 777},
                          {AllReduceVariant::kAtomic, 100, 333, OneShotProtocol::kAuto, 16, 128},
                          {AllReduceVariant::kRing, 64, 1000, OneShotProtocol::kAuto, 16, 128},
                          {AllReduceVariant::kOneShot, 1000, 333, OneShotProtocol::kSimple},
                          {AllReduceVariant::kSpinlock, 1, 777},
                          {AllReduceVariant::kTwoShot, 17, 1000}};
    constexpr int kRounds = 8;
    const DType dt = DType::kFloat32;
    Workspace ws;
    // Room for every call first (prepare_for_every), then every call's own preamble.
    auto config_of = [](const Call& c) {
      Config cfg;
      cfg.all_reduce_variant = c.variant;
      cfg.all_reduce_one_shot_protocol = c.protocol;
      cfg.block_size_m = c.block_m;
      cfg.block_size_n = c.block_n;
      return cfg;
    };
    std::vector<std::pair<Tensor, Config>> every;
    for (const Call& c : calls) every.emplace_back(Tensor::matrix(nullptr, dt, c.rows, c.cols), config_of(c));
    prepare_for_every(ctx, ws, every);
    std::vector<TestTensor> ins, outs;
    std::vector<uint64_t> seeds;
    for (int round = 0; round < kRounds; ++round)
      for (const Call& c : calls) {
        const uint64_t seed = 5000 + seeds.size();
        ins.push_back(TestTensor::make(ctx, dt, c.rows, c.cols, c.cols, true));
        outs.push_back(TestTensor::make(ctx, dt, c.rows, c.cols, c.cols, true));
        ins.back().upload(ctx.stream(), test::make_input(dt, c.rows, c.cols, c.cols, seed, ctx.rank()));
        outs.back().poison(ctx.stream());
        seeds.push_back(seed);
        const Config cfg = config_of(c);
        if (round == 0) ccl::all_reduce_preamble(ctx, outs.back().view, ins.back().view, cfg, ws);
      }
    ctx.barrier();  // every rank's inputs are in place; from here on nothing waits on the host
    size_t k = 0;
    for (int round = 0; round < kRounds; ++round)
      for (const Call& c : calls) {
        ccl::all_reduce(ctx, outs[k].view, ins[k].view, config_of(c), ws);
        ++k;
      }
    ctx.synchronize();
    k = 0;
    for (int round = 0; round < kRounds; ++round)
      for (const Call& c : calls) {
        auto host = outs[k].download(ctx.stream());
        int64_t wrong = 0, first = -1;
        for (int64_t i = 0; i < c.rows * c.cols; ++i) {
          double want;
          if (!test::float_reduction_ok(dt, ReduceOp::kSum, seeds[k], ctx.world_size(), i,
                                        decode_element(dt, host.data() + i * 4), &want))
            if (wrong++ == 0) first = i;
        }
        EXPECT_EQ(wrong, 0) << "round " << round << ", " << ccl::variant_name(c.variant) << " "
                            << ccl::protocol_name(c.protocol) << " " << c.rows << "x" << c.cols
                            << ": first wrong element " << first;
        ++k;
      }
    ctx.barrier();
    for (auto* v : {&ins, &outs})
      for (TestTensor& t : *v) t.release();
    ccl::ContextWorkspaceHost host_ws(ctx);
    ws.release(host_ws);
  }, big_heap(GetParam().world));
}

// One all_gather of this rank's float32 `in` (m x n, contiguous) into `out` (W m x n) on a prepared
// workspace: fresh inputs, poisoned output, every element checked.
void check_all_gather_once(Context& ctx, const Config& cfg, Workspace& ws, TestTensor& in, TestTensor& out,
                           uint64_t seed, const std::string& what) {
  const DType dt = DType::kFloat32;
  const int64_t m = in.view.rows, n = in.view.cols;
  in.upload(ctx.stream(), test::make_input(dt, m, n, n, seed, ctx.rank()));
  out.poison(ctx.stream());
  ccl::all_gather(ctx, out.view, in.view, cfg, ws);
  ctx.synchronize();
  const auto host = out.download(ctx.stream());
  int64_t wrong = 0;
  for (int r = 0; r < ctx.world_size(); ++r)
    for (int64_t i = 0; i < m * n; ++i)
      wrong += decode_element(dt, host.data() + (r * m * n + i) * 4) != test::input_value(dt, seed, r, i);
  EXPECT_EQ(wrong, 0) << what;
}

// A workspace prepared again for another op starts that op's flags from zero (Workspace::prepare): a ring
// all_reduce leaves 2e + 2 in its flags, which an all_gather's waits for the epochs that follow took for
// their own (and read slots nobody had written yet). Back on all_reduce, two_shot (epoch-valued flags)
// works, and so do atomic and spinlock (before 2026-12-03 they counted arrivals from the workspace's first
// call, and all_reduce refused them here).
TEST_P(AllReduce, AWorkspacePreparedForAnotherOpStartsItsFlagsFromZero) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int w = ctx.world_size();
        const DType dt = DType::kFloat32;
        const int64_t m = 64, n = 1000;
        Config ring, atomic, gather;
        ring.all_reduce_variant = AllReduceVariant::kRing;
        atomic.all_reduce_variant = AllReduceVariant::kAtomic;
        const Tensor shape = Tensor::matrix(nullptr, dt, m, n), gathered_shape = Tensor::matrix(nullptr, dt, w * m, n);
        // one_shot LL's preamble allocates the staging, atomic's and all_gather's the flags: the larger of
        // the two first, so that the other fits (atomic's at 2 ranks; all_gather's at 8, 448 against 320).
        const size_t atomic_flags = ccl::all_reduce_needs(shape, shape, atomic, w).flags;
        const size_t gather_flags = ccl::all_gather_needs(gathered_shape, shape, gather, w).flags;
        ASSERT_GE(std::max(atomic_flags, gather_flags), ccl::all_reduce_needs(shape, shape, ring, w).flags);
        Workspace ws;
        {
          Config ll;
          ll.all_reduce_variant = AllReduceVariant::kOneShot;
          ll.all_reduce_one_shot_protocol = OneShotProtocol::kLL;
          auto big = TestTensor::make(ctx, dt, 1024, 1000, 1000, true);
          ccl::all_reduce_preamble(ctx, big.view, big.view, ll, ws);
          auto small = TestTensor::make(ctx, dt, m, n, n, true);
          auto gather_in = TestTensor::make(ctx, dt, m, n, n, true);
          auto gather_out = TestTensor::make(ctx, dt, w * m, n, n, true);
          auto prepare_atomic = [&] { ccl::all_reduce_preamble(ctx, small.view, small.view, atomic, ws); };
          auto prepare_gather = [&] { ccl::all_gather_preamble(ctx, gather_out.view, gather_in.view, gather, ws); };
          if (atomic_flags >= gather_flags) {
            prepare_atomic();
            prepare_gather();
          } else {
            prepare_gather();
            prepare_atomic();
          }
          gather_out.release();
          gather_in.release();
          small.release();
          big.release();
        }
        uint64_t seed = 7000;
        for (int call = 0; call < 3; ++call)
          check_once(ctx, ring, ws, dt, ReduceOp::kSum, m, n, n, false, true, seed++,
                     "ring call " + std::to_string(call));
        auto in = TestTensor::make(ctx, dt, m, n, n, true);
        auto out = TestTensor::make(ctx, dt, w * m, n, n, true);
        ccl::all_gather_preamble(ctx, out.view, in.view, gather, ws);
        for (int call = 0; call < 3; ++call)
          check_all_gather_once(ctx, gather, ws, in, out, seed++, "all_gather call " + std::to_string(call));
        ctx.barrier();
        out.release();
        in.release();
        Config two_shot;
        two_shot.all_reduce_variant = AllReduceVariant::kTwoShot;
        for (int call = 0; call < 3; ++call)
          check_once(ctx, two_shot, ws, dt, ReduceOp::kSum, m, n, n, false, true, seed++,
                     "two_shot call " + std::to_string(call));
        Config spinlock;
        spinlock.all_reduce_variant = AllReduceVariant::kSpinlock;
        for (int call = 0; call < 2; ++call)
          check_once(ctx, atomic, ws, dt, ReduceOp::kSum, m, n, n, false, true, seed++,
                     "atomic call " + std::to_string(call));
        check_once(ctx, spinlock, ws, dt, ReduceOp::kMax, m, n, n, false, true, seed++, "spinlock max");
        check_once(ctx, two_shot, ws, dt, ReduceOp::kSum, m, n, n, false, true, seed++, "two_shot after them");
        ctx.barrier();
        ccl::ContextWorkspaceHost host_ws(ctx);
        ws.release(host_ws);
      },
      big_heap(GetParam().world));
}

// A workspace prepared first for all_gather serves all_reduce next: every op sizes the block state by
// the world size alone (3 + W words). Before 2026-12-03 all_gather's 2 words were refused by all_reduce's
// preamble ("Block state array too small"). one_shot LL fits all_gather's staging and needs no flags.
TEST_P(AllReduce, AWorkspaceFirstPreparedForAllGatherServesAllReduce) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int w = ctx.world_size();
        const DType dt = DType::kFloat32;
        const int64_t m = 64, n = 1000;
        const Config gather;
        auto in = TestTensor::make(ctx, dt, m, n, n, true);
        auto out = TestTensor::make(ctx, dt, w * m, n, n, true);
        Workspace ws;
        ccl::all_gather_preamble(ctx, out.view, in.view, gather, ws);
        uint64_t seed = 9000;
        check_all_gather_once(ctx, gather, ws, in, out, seed++, "all_gather first");
        const Config ll = variant_config(AllReduceVariant::kOneShot, OneShotProtocol::kLL);
        for (int call = 0; call < 3; ++call)
          check_once(ctx, ll, ws, dt, ReduceOp::kSum, 4, 100, 100, false, true, seed++,
                     "one_shot call " + std::to_string(call) + " after all_gather");
        ccl::all_gather_preamble(ctx, out.view, in.view, gather, ws);
        check_all_gather_once(ctx, gather, ws, in, out, seed++, "all_gather after all_reduce");
        ctx.barrier();
        out.release();
        in.release();
        ccl::ContextWorkspaceHost host_ws(ctx);
        ws.release(host_ws);
      },
      big_heap(GetParam().world));
}

// The tile variants on a workspace that served other layouts, and other layouts after them, one call at a
// time (the back-to-back test above runs such a mix without host synchronization). Before 2026-12-03
// atomic and spinlock counted arrivals from the workspace's first call and the ring marked its flags
// 2e + 1 and 2e + 2: atomic after one_shot timed out waiting for arrivals that never came, and a two_shot
// after a ring took the ring's marks for its own flags; all_reduce then refused these mixes. Now every
// flag holds an epoch, and atomic zeroes its accumulators, which hold what other layouts left in the
// staging, at a change of layout: every call here must be right. Ops other than sum where the variant
// has them, in place and not, so that a first-writer mark or a zeroing that went wrong shows.
TEST_P(AllReduce, TileVariantsShareAWorkspaceWithEveryOtherLayout) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const DType dt = DType::kFloat32;
        auto cfg = [](AllReduceVariant v, int bm = 32, int bn = 64) {
          Config c;
          c.all_reduce_variant = v;
          c.block_size_m = bm;
          c.block_size_n = bn;
          return c;
        };
        const Config one_shot = cfg(AllReduceVariant::kOneShot), two_shot = cfg(AllReduceVariant::kTwoShot),
                     atomic = cfg(AllReduceVariant::kAtomic), spinlock = cfg(AllReduceVariant::kSpinlock),
                     ring = cfg(AllReduceVariant::kRing), atomic_wide = cfg(AllReduceVariant::kAtomic, 16, 128),
                     ring_wide = cfg(AllReduceVariant::kRing, 16, 128);
        Workspace ws;
        {  // the largest staging and flags first, so that every later preamble fits
          Config ll = one_shot;
          ll.all_reduce_one_shot_protocol = OneShotProtocol::kLL;
          auto big = TestTensor::make(ctx, dt, 1024, 1000, 1000, true);
          ccl::all_reduce_preamble(ctx, big.view, big.view, ll, ws);
          ccl::all_reduce_preamble(ctx, big.view, big.view, spinlock, ws);
          big.release();
        }
        uint64_t seed = 31;
        auto call = [&](const Config& c, ReduceOp op, int64_t m, int64_t n, bool in_place, const std::string& what) {
          check_once(ctx, c, ws, dt, op, m, n, n, in_place, true, seed++, what);
        };
        call(one_shot, ReduceOp::kSum, 64, 1000, false, "one_shot first");
        call(atomic, ReduceOp::kSum, 64, 1000, false, "atomic after one_shot");
        call(atomic, ReduceOp::kAvg, 64, 1000, true, "atomic again, avg, in place");
        call(one_shot, ReduceOp::kMax, 32, 1000, false, "one_shot after atomic");
        call(ring, ReduceOp::kSum, 64, 1000, false, "ring");
        call(ring, ReduceOp::kMax, 64, 1000, true, "ring again, max, in place");
        call(two_shot, ReduceOp::kSum, 32, 1000, false, "two_shot after the ring");
        call(spinlock, ReduceOp::kMin, 100, 333, false, "spinlock min after two_shot");
        call(spinlock, ReduceOp::kSum, 100, 333, false, "spinlock again, sum");
        call(atomic_wide, ReduceOp::kSum, 100, 333, false, "atomic, other tiles, after spinlock");
        call(ring_wide, ReduceOp::kSum, 17, 1000, false, "ring, other tiles, after atomic");
        call(atomic, ReduceOp::kSum, 64, 1000, false, "atomic after the ring");
        call(one_shot, ReduceOp::kSum, 1, 777, false, "one_shot after atomic");
        ctx.barrier();
        ccl::ContextWorkspaceHost host_ws(ctx);
        ws.release(host_ws);
      },
      big_heap(GetParam().world));
}

// ---- the founding regressions (names as in Iris) ----------------------------------------------------

void expect_too_small_after_large_blocks(Context& ctx, AllReduceVariant v, const char* message) {
  Config big;
  big.all_reduce_variant = v;
  big.block_size_m = 128;
  big.block_size_n = 128;
  Config small = big;
  small.block_size_m = 64;
  small.block_size_n = 64;
  auto in = TestTensor::make(ctx, DType::kFloat32, 512, 512, 512, true);
  auto out = TestTensor::make(ctx, DType::kFloat32, 512, 512, 512, true);
  Workspace ws;
  ccl::all_reduce_preamble(ctx, out.view, in.view, big, ws);
  const uint64_t before = ctx.allocation_count();
  try {
    ccl::all_reduce(ctx, out.view, in.view, small, ws);
    ADD_FAILURE() << "all_reduce ran with a workspace sized for 16 tiles on 64 tiles";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), message);
  }
  try {
    ccl::all_reduce_preamble(ctx, out.view, in.view, small, ws);
    ADD_FAILURE() << "the preamble accepted a workspace sized for 16 tiles for 64 tiles";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), message);
  }
  EXPECT_EQ(ctx.allocation_count(), before);
  ctx.barrier();  // every rank raised; allocation sequences still agree
  ccl::ContextWorkspaceHost host(ctx);
  ws.release(host);
  out.release();
  in.release();
}

TEST_P(AllReduce, test_all_reduce_spinlock_lock_too_small) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    expect_too_small_after_large_blocks(ctx, AllReduceVariant::kSpinlock,
                                        "Lock array too small: have 16 but need 64. Pre-allocate workspace with the "
                                        "smallest block sizes you intend to use.");
  }, big_heap(GetParam().world));
}

TEST_P(AllReduce, test_all_reduce_ring_flags_too_small) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    // ring: 2 flags per tile per column slice (slice = block_size_n): 32 for 16 tiles, 128 for 64.
    expect_too_small_after_large_blocks(ctx, AllReduceVariant::kRing,
                                        "Flags array too small: have 32 but need 128. Pre-allocate workspace with the "
                                        "smallest block sizes you intend to use.");
  }, big_heap(GetParam().world));
}

// A workspace prepared for a 512 x 512 call with 64x64 blocks serves a call with 128x128 blocks: more locks
// and flags than it needs. The second call is 512 x 384: at 3 ranks 512 x 512 in 128x128 blocks would need
// more staging (6 owned tiles of 128 x 128 against 22 of 64 x 64), which
// ReservedWorkspaceServesEveryBlockSizeOfOneTensor reserves.
TEST_P(AllReduce, LargerWorkspaceIsReusedForLargerBlocksAndMatchesIsFalse) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    for (AllReduceVariant v : {AllReduceVariant::kSpinlock, AllReduceVariant::kRing, AllReduceVariant::kAtomic}) {
      Config small;
      small.all_reduce_variant = v;
      small.block_size_m = 64;
      small.block_size_n = 64;
      Config big = small;
      big.block_size_m = 128;
      big.block_size_n = 128;
      Workspace ws;
      auto in = TestTensor::make(ctx, DType::kFloat32, 512, 512, 512, true);
      auto out = TestTensor::make(ctx, DType::kFloat32, 512, 512, 512, true);
      ccl::all_reduce_preamble(ctx, out.view, in.view, small, ws);
      ccl::OpSignature sig = ws.signature();
      sig.block_size_m = 128;
      sig.block_size_n = 128;
      EXPECT_FALSE(ws.matches(sig)) << "block sizes alone differ";
      const uint64_t before = ctx.allocation_count();
      check_once(ctx, big, ws, DType::kFloat32, ReduceOp::kSum, 512, 384, 384, false, true, 77,
                 std::string(ccl::variant_name(v)) + " 128x128 on a 64x64 workspace");
      EXPECT_EQ(ctx.allocation_count(), before + 4) << "only check_once's own buffers are allocated and freed";
      ctx.barrier();
      ccl::ContextWorkspaceHost host(ctx);
      ws.release(host);
      out.release();
      in.release();
    }
  }, big_heap(GetParam().world));
}

// One workspace reserved for one tensor in both block sizes (ccl::reserve_workspace) serves both calls,
// in either order, and their preambles allocate nothing; every tile variant, and two_shot too.
TEST_P(AllReduce, ReservedWorkspaceServesEveryBlockSizeOfOneTensor) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        uint64_t seed = 300;
        for (AllReduceVariant v : {AllReduceVariant::kSpinlock, AllReduceVariant::kRing, AllReduceVariant::kAtomic,
                                   AllReduceVariant::kTwoShot})
          for (bool big_first : {false, true}) {
            Config small;
            small.all_reduce_variant = v;
            small.block_size_m = small.block_size_n = 64;
            Config big = small;
            big.block_size_m = big.block_size_n = 128;
            const std::vector<Config> order =
                big_first ? std::vector<Config>{big, small} : std::vector<Config>{small, big};
            Workspace ws;
            prepare_for_every(ctx, ws, Tensor::matrix(nullptr, DType::kFloat32, 512, 512), order);
            EXPECT_FALSE(ws.prepared());
            const uint64_t before = ctx.allocation_count();
            for (const Config& cfg : order)
              check_once(ctx, cfg, ws, DType::kFloat32, ReduceOp::kSum, 512, 512, 512, false, true, seed++,
                         std::string(ccl::variant_name(v)) + " " + std::to_string(cfg.block_size_m) + "x" +
                             std::to_string(cfg.block_size_n) + " on the reserved workspace");
            EXPECT_EQ(ctx.allocation_count(), before + 4 * order.size())
                << "only check_once's own buffers are allocated and freed";
            ctx.barrier();
            ccl::ContextWorkspaceHost host(ctx);
            ws.release(host);
          }
      },
      big_heap(GetParam().world));
}

TEST_P(AllReduce, UnpreparedWorkspaceIsRejected) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    auto in = TestTensor::make(ctx, DType::kFloat32, 4, 4, 4, true);
    Workspace ws;
    try {
      ccl::all_reduce(ctx, in.view, in.view, Config{}, ws);
      ADD_FAILURE() << "ran without a preamble";
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(),
                   "all_reduce: the workspace was never prepared; call all_reduce_preamble with the same arguments and "
                   "this workspace first (on every rank).");
    }
    Tensor wrong = in.view;
    wrong.cols = 5;
    EXPECT_THROW(ccl::all_reduce_preamble(ctx, wrong, in.view, Config{}, ws), std::invalid_argument);
    in.release();
  }, big_heap(GetParam().world));
}

TEST_P(AllReduce, ShapeThatDiffersOnOneRankMakesEveryRankRaise) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(GetParam(), [](Context& ctx) {
    const int64_t cols = ctx.rank() == 1 ? 96 : 128;  // rank 1 passes another shape
    auto in = TestTensor::make(ctx, DType::kFloat32, 16, 128, 128, true);
    Tensor view = Tensor::matrix(in.raw, DType::kFloat32, 16, cols, 128);
    Workspace ws;
    try {
      ccl::all_reduce_preamble(ctx, view, view, Config{}, ws);
      ADD_FAILURE() << "rank " << ctx.rank() << " accepted mismatched shapes";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("Collective parameters differ across ranks"), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(ws.prepared());
    ctx.barrier();
    in.release();
  }, big_heap(GetParam().world));
}

// A config that differs on one rank where the ranks' kernels would read each other's flags and staging in
// another layout: tile t's rectangle (swizzle_size), two_shot's chunk owners (all_reduce_distribution), the
// ring's directions, slices and grid. Every rank raises from the preamble (before 2026-12-04 the signature
// held none of them: in a tensor of more tile rows than the smaller swizzle, tile t would have named other
// rectangles on the culprit, whose data the owner summed without a word), names the field, and prepares
// nothing.
TEST_P(AllReduce, ConfigThatDiffersOnOneRankMakesEveryRankRaise) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        auto in = TestTensor::make(ctx, DType::kFloat32, 64, 1000, 1000, true);
        const bool culprit = ctx.rank() == ctx.world_size() - 1;
        struct Case {
          AllReduceVariant variant;
          const char* culprits;  // what the message says of the culprit's call
          void (*differ)(Config&);
        };
        const Case cases[] = {
            {AllReduceVariant::kSpinlock, "swizzle_size 2", [](Config& c) { c.swizzle_size = 2; }},
            {AllReduceVariant::kAtomic, "swizzle_size 8", [](Config& c) { c.swizzle_size = 8; }},
            {AllReduceVariant::kTwoShot, "all_reduce_distribution 1", [](Config& c) { c.all_reduce_distribution = 1; }},
            {AllReduceVariant::kRing, "all_reduce_num_rings 2", [](Config& c) { c.all_reduce_num_rings = 2; }},
            {AllReduceVariant::kRing, "ring slices of 32 columns", [](Config& c) { c.all_reduce_ring_slice_n = 32; }},
            {AllReduceVariant::kRing, "grid 2 blocks", [](Config& c) { c.comm_sms = 2; }},
        };
        for (const Case& c : cases) {
          Config cfg;
          cfg.all_reduce_variant = c.variant;
          if (culprit) c.differ(cfg);
          Workspace ws;
          const std::string what = test::error_text<std::invalid_argument>(
              [&] { ccl::all_reduce_preamble(ctx, in.view, in.view, cfg, ws); });
          EXPECT_EQ(what.rfind("Collective parameters differ across ranks", 0), 0u) << c.culprits << ": " << what;
          EXPECT_NE(what.find(c.culprits), std::string::npos) << what;
          EXPECT_FALSE(ws.prepared());
          ctx.barrier();
        }
        in.release();
      },
      big_heap(GetParam().world));
}

// IRIS_CHECK_CALLS (ContextOptions::check_calls): a call compares itself across ranks before it launches.
// Without it, a rank that passes fewer rows than its peers, on a workspace that holds both calls, launches
// kernels that read its peers' staging in another layout (or wait for words that never come). With it,
// every variant: calls that agree give the reference; a call whose shape differs on one rank raises on
// every rank, naming both calls, and launches nothing; a call one rank refuses (its output is not the
// input's shape) raises its own error there and names the refusal on its peers; and the ranks are still
// in step afterwards (the next call is right, and no device error was raised).
TEST_P(AllReduce, WithCheckCallsACallThatDiffersOnOneRankRaisesEverywhereAndLaunchesNothing) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  ContextOptions options = big_heap(GetParam().world);
  options.check_calls = true;
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        ASSERT_TRUE(ctx.check_calls());
        const int culprit = ctx.world_size() - 1;
        const bool is_culprit = ctx.rank() == culprit;
        uint64_t seed = 11;
        for (AllReduceVariant v : {AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot, AllReduceVariant::kRing,
                                   AllReduceVariant::kSpinlock, AllReduceVariant::kAtomic}) {
          const std::string name = ccl::variant_name(v);
          SCOPED_TRACE(name);
          const Config cfg = variant_config(v);
          Workspace ws;
          check_once(ctx, cfg, ws, DType::kFloat32, ReduceOp::kSum, 64, 1000, 1000, false, true, seed++,
                     "checked calls that agree: " + name);
          auto x = TestTensor::make(ctx, DType::kFloat32, 64, 1000, 1000, true);
          const Tensor view = Tensor::matrix(x.raw, DType::kFloat32, is_culprit ? 32 : 64, 1000, 1000);
          const uint64_t calls = ws.calls();
          const std::string differ =
              test::error_text<std::invalid_argument>([&] { ccl::all_reduce(ctx, view, view, cfg, ws); });
          EXPECT_EQ(differ.rfind(detail::str_cat("Calls differ across ranks (IRIS_CHECK_CALLS): rank ", ctx.rank(),
                                                 " calls all_reduce ", is_culprit ? "32" : "64", "x1000 float32 world ",
                                                 ctx.world_size(), " variant ", name),
                                 0),
                    0u)
              << differ;
          EXPECT_NE(differ.find(detail::str_cat(" but rank ", is_culprit ? 0 : culprit, " calls all_reduce ",
                                                is_culprit ? "64" : "32", "x1000")),
                    std::string::npos)
              << differ;
          EXPECT_NE(differ.find(" on the workspace at heap offset "), std::string::npos) << differ;
          EXPECT_EQ(ws.calls(), calls) << "nothing launched";
          Tensor narrower = view;
          narrower.cols = 999;
          const std::string refused = test::error_text<std::invalid_argument>(
              [&] { ccl::all_reduce(ctx, is_culprit ? narrower : view, view, cfg, ws); });
          if (is_culprit) {
            EXPECT_EQ(refused.rfind("all_reduce: ", 0), 0u) << refused;
            EXPECT_EQ(refused.find("refused"), std::string::npos) << "its own error: " << refused;
          } else {
            EXPECT_EQ(refused.rfind(detail::str_cat("all_reduce: rank ", culprit,
                                                    " refused this call, so no rank launches it (IRIS_CHECK_CALLS): "
                                                    "all_reduce: "),
                                    0),
                      0u)
                << refused;
          }
          EXPECT_EQ(ws.calls(), calls) << "nothing launched";
          ctx.synchronize();  // no device error: no kernel waited for a peer that did not come
          x.release();
          check_once(ctx, cfg, ws, DType::kFloat32, ReduceOp::kSum, 64, 1000, 1000, false, true, seed++,
                     "still in step: " + name);
          ccl::ContextWorkspaceHost host(ctx);
          ws.release(host);
        }
      },
      options);
}

// IRIS_CHECK_CALLS, a call made on one rank alone (the case of the device-timeout test below, which
// without the check times out on the device): rank 0 calls all_reduce while its peers compare their heap
// allocations (another collective of the context). Every rank raises, naming what the other did, and
// nothing is launched; the collectives are in step again afterwards, and the next call is right.
TEST_P(AllReduce, WithCheckCallsACallOnOneRankAloneRaisesOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks: one calls all_reduce alone";
  ContextOptions options = big_heap(GetParam().world);
  options.check_calls = true;
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const Config cfg = variant_config(AllReduceVariant::kOneShot);
        Workspace ws;
        check_once(ctx, cfg, ws, DType::kFloat32, ReduceOp::kSum, 32, 1000, 1000, false, true, 21, "before");
        auto x = TestTensor::make(ctx, DType::kFloat32, 32, 1000, 1000, true);
        const uint64_t calls = ws.calls();
        if (ctx.rank() == 0) {
          const std::string what =
              test::error_text<std::invalid_argument>([&] { ccl::all_reduce(ctx, x.view, x.view, cfg, ws); });
          EXPECT_EQ(what.rfind("Calls differ across ranks (IRIS_CHECK_CALLS): rank 0 calls all_reduce 32x1000 ", 0), 0u)
              << what;
          EXPECT_NE(what.find(" but rank 1 made another collective call of the context at this point"),
                    std::string::npos)
              << what;
        } else {
          const std::string what = test::error_text<std::invalid_argument>([&] { ctx.check_heap_symmetry(); });
          EXPECT_EQ(what.rfind(detail::str_cat("Collective calls out of step across ranks: rank ", ctx.rank(),
                                               " in the comparison of heap allocation sequences"),
                               0),
                    0u)
              << what;
          EXPECT_NE(what.find("from rank 0 where every rank sends 16, so rank 0 made another collective call"),
                    std::string::npos)
              << what;
        }
        EXPECT_EQ(ws.calls(), calls) << "nothing launched";
        ctx.synchronize();
        ctx.barrier();
        x.release();
        check_once(ctx, cfg, ws, DType::kFloat32, ReduceOp::kSum, 32, 1000, 1000, false, true, 22, "after");
        ccl::ContextWorkspaceHost host(ctx);
        ws.release(host);
      },
      options);
}

// Every entry point runs on its context's device whatever the calling thread has current (a thread pool's
// worker, or a thread that never chose one: device 0), and gives the thread its device back, as NCCL's
// calls do (iris::detail::DeviceGuard). Without it the kernels would be launched for the wrong device
// ("invalid resource handle") and the preamble's device queries would answer for another GPU. Needs a
// second GPU to make current.
TEST_P(AllReduce, CallsFromAThreadWithAnotherDeviceCurrentRunOnTheContextsDevice) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (test::gpu_count() < 2) GTEST_SKIP() << "needs a second GPU to make current, " << test::gpu_count() << " visible";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int other = (ctx.device() + 1) % test::gpu_count();
        uint64_t seed = 31;
        for (AllReduceVariant v : {AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot, AllReduceVariant::kRing,
                                   AllReduceVariant::kSpinlock, AllReduceVariant::kAtomic}) {
          SCOPED_TRACE(ccl::variant_name(v));
          const Config cfg = variant_config(v);
          auto in = TestTensor::make(ctx, DType::kFloat32, 64, 1000, 1000, true);
          auto out = TestTensor::make(ctx, DType::kFloat32, 64, 1000, 1000, true);
          in.upload(ctx.stream(), test::make_input(DType::kFloat32, 64, 1000, 1000, seed, ctx.rank()));
          out.poison(ctx.stream());  // a call that wrote nothing would leave the poison
          Workspace ws;
          IRIS_CUDA_CHECK(cudaSetDevice(other));
          ccl::all_reduce_preamble(ctx, out.view, in.view, cfg, ws);
          ccl::all_reduce(ctx, out.view, in.view, cfg, ws);
          int current = -1;
          IRIS_CUDA_CHECK(cudaGetDevice(&current));
          EXPECT_EQ(current, other) << "the calling thread's device is given back";
          ctx.synchronize();
          IRIS_CUDA_CHECK(cudaSetDevice(ctx.device()));
          auto host = out.download(ctx.stream());
          int64_t wrong = 0;
          for (int64_t i = 0; i < 64000; ++i) {
            double want;
            wrong += !test::float_reduction_ok(DType::kFloat32, ReduceOp::kSum, seed, ctx.world_size(), i,
                                               decode_element(DType::kFloat32, host.data() + i * 4), &want);
          }
          EXPECT_EQ(wrong, 0);
          ++seed;
          ctx.barrier();
          out.release();
          in.release();
          {
            IRIS_CUDA_CHECK(cudaSetDevice(other));
            ccl::ContextWorkspaceHost host_ws(ctx);  // the context's device while it lives, then `other` again
            ws.release(host_ws);
          }
          IRIS_CUDA_CHECK(cudaSetDevice(ctx.device()));
        }
      },
      big_heap(GetParam().world));
}

// Peers reach the workspace's arrays at this rank's offsets of them: a rank that allocated a buffer the
// others did not would place them elsewhere. The preamble compares the heap's alloc/free sequences once the
// call's parameters agree, and every rank raises before allocating (before 2026-12-04 only barrier()
// compared them, and a preamble before any barrier placed the arrays at other offsets on that rank).
TEST_P(AllReduce, RankAllocatingOutOfStepMakesThePreambleRaiseEverywhere) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        auto in = TestTensor::make(ctx, DType::kFloat32, 16, 128, 128, true);
        void* extra = ctx.rank() == 1 ? ctx.alloc(512) : nullptr;  // rank 1 goes out of step
        Workspace ws;
        const uint64_t before = ctx.allocation_count();
        const std::string what = test::error_text<std::invalid_argument>(
            [&] { ccl::all_reduce_preamble(ctx, in.view, in.view, Config{}, ws); });
        EXPECT_EQ(
            what.rfind("Heap allocation sequence differs across ranks before this preamble: rank 0 made 1 (hash ", 0),
            0u)
            << what;
        EXPECT_NE(what.find("rank 1 made 2 (hash "), std::string::npos) << what;
        EXPECT_FALSE(ws.prepared());
        EXPECT_EQ(ctx.allocation_count(), before) << "the preamble allocated";
        // The ranks stay out of step (a programming error to fix); each frees what it allocated.
        if (extra) ctx.free(extra);
        in.release();
      },
      big_heap(GetParam().world));
}

// Without IRIS_CHECK_CALLS a call after its preamble is not compared on the host. Ranks whose calls differ
// and each change the workspace's layout are caught by all_reduce's layout fence on the device: each rank
// finds a peer's key other than its own, ends its kernel before touching its peers' data, and raises
// InvalidArgument at synchronize() naming that peer; the workspace is then refused until prepared again,
// and prepared again it is right. Three differences, each after an agreeing 64-row fp32 sum:
//  - rows: every rank passes its own row count, 4 * (rank + 1). Before 2026-12-04 these calls ran: each
//    rank read its peers' staging in its own layout (a wrong result and no error) or waited for words that
//    never came.
//  - count: rank 0 31 rows, its peers 32 (not one_shot LL, whose header key the rows case checks): counts
//    close enough to share two_shot's chunks or one_shot simple's segments, which finished without an error
//    before 2026-12-06, rank 0's peers reading stale staging past its data; the shape is now in the key.
//  - dtype: rank 0 fp16, its peers bf16 (the same bytes), 32 rows on every rank.
//  - reduction: rank 0 avg, its peers sum, 32 fp32 rows. These two laid out the same bytes and, before
//    2026-12-06, finished without an error, each rank with another result; the dtype and the reduction are
//    now part of the key the fence compares.
//  - swizzle (the tile variants: ring, spinlock, atomic): rank 0 another swizzle_size, 32 fp32 rows. Tile t
//    named other rectangles on the ranks, which added each other's blocks into the wrong partials without
//    an error before 2026-12-06 (not in the key).
// one_shot LL, whose layout has no shape (ccl_common.cuh, layout_fence), does not fence: each rank finds its
// peer's call key (dtype, reduction and size) in the peer's header line beside the data (ll_exchange.cu;
// since 2026-12-05) and raises the same way, saying its output is not valid instead of that the kernel
// ended first.
TEST_P(AllReduce, CallsThatDifferAfterThePreambleRaiseOnEveryRankFromTheDevice) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses these calls before launch";
        const int me = ctx.rank();
        uint64_t seed = 1300;
        for (const Config& cfg :
             {variant_config(AllReduceVariant::kOneShot, OneShotProtocol::kSimple),
              variant_config(AllReduceVariant::kOneShot, OneShotProtocol::kLL),
              variant_config(AllReduceVariant::kTwoShot), variant_config(AllReduceVariant::kRing),
              variant_config(AllReduceVariant::kSpinlock), variant_config(AllReduceVariant::kAtomic)}) {
          for (const std::string differ : {"rows", "count", "dtype", "reduction", "swizzle"}) {
            const bool tiled = cfg.all_reduce_variant == AllReduceVariant::kRing ||
                               cfg.all_reduce_variant == AllReduceVariant::kSpinlock ||
                               cfg.all_reduce_variant == AllReduceVariant::kAtomic;
            if (differ == "swizzle" && !tiled) continue;  // only the tile variants order their tiles by it
            const bool ll = cfg.all_reduce_one_shot_protocol == OneShotProtocol::kLL;
            if (differ == "count" && ll) continue;  // the header's key names the count: the "rows" case
            Config call_cfg = cfg;
            if (differ == "swizzle" && me == 0) call_cfg.swizzle_size = cfg.swizzle_size == 1 ? 2 : 1;
            const std::string name =
                std::string(ccl::variant_name(cfg.all_reduce_variant)) + (ll ? " LL" : "") + ", " + differ;
            SCOPED_TRACE(name);
            const bool by_rows = differ == "rows";
            const DType dt = differ != "dtype" ? DType::kFloat32 : me == 0 ? DType::kFloat16 : DType::kBFloat16;
            const ReduceOp op = differ == "reduction" && me == 0 ? ReduceOp::kAvg : ReduceOp::kSum;
            const int64_t rows = by_rows ? 4 * (me + 1) : differ == "count" && me == 0 ? 31 : 32;
            // The first peer, in the fence's order, whose call differs: with rows every peer's does; otherwise
            // rank 0 alone differs from the rest.
            const int named = by_rows ? (me + 1) % ctx.world_size() : me == 0 ? 1 : 0;
            Workspace ws;
            check_once(ctx, cfg, ws, DType::kFloat32, ReduceOp::kSum, 64, 1000, 1000, false, true, seed++,
                       "agreeing: " + name);
            const uint64_t errors = ctx.device_timeouts();
            // The same allocation on every rank (the heap's sequences must agree), a view of its own rows.
            auto x = TestTensor::make(ctx, dt, 64, 1000, 1000, true);
            const Tensor view = Tensor::matrix(x.raw, dt, rows, 1000, 1000);
            const std::vector<char> input = test::make_input(dt, 64, 1000, 1000, seed++, me);
            x.upload(ctx.stream(), input);
            ccl::all_reduce(ctx, view, view, call_cfg, ws, ctx.stream(), op);
            const std::string err = test::error_text<std::invalid_argument>([&] { ctx.synchronize(); });
            EXPECT_EQ(err.rfind("iris device error in all_reduce", 0), 0u) << err;
            if (ll) {
              std::string keys = " made another call on this workspace (its call key is ";
              if (by_rows) {
                // Every peer's key differs; the first source checked is named: rank 0 names 1, the others 0.
                const int first = me == 0 ? 1 : 0;
                // ll_call_key: all_reduce (1), fp32 (0), sum (0), then the elements: 4000 per rank and index.
                char theirs[32], ours[32];
                std::snprintf(theirs, sizeof(theirs), "%llx", (1ull << 60) | (4000ull * (first + 1)));
                std::snprintf(ours, sizeof(ours), "%llx", (1ull << 60) | (4000ull * (me + 1)));
                keys = detail::str_cat(" on rank ", me, ": rank ", first, keys, theirs, ", this rank's ", ours, "; ");
              }
              EXPECT_NE(err.find(keys), std::string::npos) << err;
              EXPECT_NE(err.find("This rank's output of that call is not valid"), std::string::npos) << err;
            } else {
              EXPECT_TRUE(x.download(ctx.stream()) == input) << "the kernel that found the difference wrote its output";
              EXPECT_NE(err.find(detail::str_cat(" on rank ", me, ": rank ", named,
                                                 " made another call on this workspace (its call lays out the data as ")),
                        std::string::npos)
                  << err;
              EXPECT_NE(err.find("so the ranks' calls differ in shape, dtype, reduction, variant or config. The kernel "
                                 "ended before it touched its peers' data."),
                        std::string::npos)
                  << err;
            }
            EXPECT_EQ(ctx.device_timeouts(), errors + 1);
            EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ccl::all_reduce(ctx, view, view, cfg, ws); })
                          .rfind("all_reduce: a device error (an iris::TimeoutError, a kernel's misuse, or calls that "
                                 "differed across ranks) was raised "
                                 "on this rank since this workspace was prepared",
                                 0),
                      0u);
            x.release();
            ctx.barrier();
            check_once(ctx, cfg, ws, DType::kFloat32, ReduceOp::kSum, 64, 1000, 1000, false, true, seed++,
                       "prepared again: " + name);
            ccl::ContextWorkspaceHost host(ctx);
            ws.release(host);
          }
        }
      },
      big_heap(GetParam().world));
}

// A device timeout on one rank leaves the workspace out of step between ranks: here rank 0 calls all_reduce
// alone (its peers never join), so its kernel gives up after the 300 ms device timeout with its epoch one
// ahead of theirs. all_reduce then refuses the workspace on rank 0 with an exact message (before 2026-12-03
// the next calls ran: rank 0 waited for an epoch its peers never reached, and their waits could pass on
// rank 0's words of the abandoned call). Preparing it again on every rank starts it over (epoch 0
// everywhere), and every variant is right again on the same workspace.
TEST_P(AllReduce, AfterADeviceTimeoutTheWorkspaceIsRefusedUntilPreparedAgain) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks: one calls all_reduce alone and times out";
  ContextOptions options = big_heap(GetParam().world);
  options.device_timeout = std::chrono::milliseconds(300);
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        // A call on one rank alone is what IRIS_CHECK_CALLS refuses before launch (the test below).
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses a call made on one rank alone";
        const DType dt = DType::kFloat32;
        std::vector<Config> configs;
        for (AllReduceVariant v : {AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot, AllReduceVariant::kRing,
                                   AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock}) {
          configs.emplace_back();
          configs.back().all_reduce_variant = v;
        }
        const Config& one_shot = configs[0];
        Workspace ws;
        prepare_for_every(ctx, ws, Tensor::matrix(nullptr, dt, 32, 1000), configs);
        uint64_t seed = 900;
        check_once(ctx, one_shot, ws, dt, ReduceOp::kSum, 32, 1000, 1000, false, true, seed++, "before");
        auto x = TestTensor::make(ctx, dt, 32, 1000, 1000, true);
        if (ctx.rank() == 0) {
          ccl::all_reduce(ctx, x.view, x.view, one_shot, ws);
          EXPECT_THROW(ctx.synchronize(), TimeoutError);
          EXPECT_EQ(ctx.device_timeouts(), 1u);
          EXPECT_EQ(
              test::error_text<std::invalid_argument>([&] { ccl::all_reduce(ctx, x.view, x.view, one_shot, ws); }),
              "all_reduce: a device error (an iris::TimeoutError, a kernel's misuse, or calls that differed across "
              "ranks) was raised on this rank since "
              "this workspace was prepared, so its flags and epochs may be out of step between ranks; call "
              "all_reduce_preamble again "
              "on every rank (it starts the workspace over) before using it.");
        }
        ctx.barrier();
        ccl::all_reduce_preamble(ctx, x.view, x.view, one_shot, ws);
        uint64_t epoch = 1;
        IRIS_CUDA_CHECK(cudaMemcpy(&epoch, ws.block_state(), sizeof(epoch), cudaMemcpyDeviceToHost));
        EXPECT_EQ(epoch, 0u) << "rank " << ctx.rank() << ": the workspace starts over";
        EXPECT_EQ(ws.device_timeouts_at_prepare(), ctx.device_timeouts());
        for (const Config& cfg : configs)
          check_once(ctx, cfg, ws, dt, ReduceOp::kSum, 32, 1000, 1000, false, true, seed++,
                     std::string("after the timeout: ") + ccl::variant_name(cfg.all_reduce_variant));
        x.release();
        ctx.barrier();
        ccl::ContextWorkspaceHost host_ws(ctx);
        ws.release(host_ws);
      },
      options);
}

// A rank whose call failed skips the calls it queued behind it on the workspace, and its peers name it, for every
// variant. Every rank but rank 1 queues three all_reduces, and rank 1 none at first (a call without elements
// launches nothing): their first call waits in its layout fence for rank 1 until the device timeout (500 ms
// here) and raises a TimeoutError naming rank 1 as not started; their second and third return at once (the
// workspace's stop word, ccl_common.cuh: begin_call) and leave their outputs poisoned. Rank 1's one call then
// passes the fence on their first call's words and waits for data that call never pushed: it raises a
// TimeoutError naming rank 0, stopped at its call 1. Before 2026-12-06 the queued calls fenced again and
// signalled their fence words (their waits gave up at the first error poll), rank 1 found there the third
// call's, and its error said only that a peer never signalled. The workspace is refused until prepared again,
// and then right.
TEST_P(AllReduce, CallsQueuedBehindAFailedCallSkipAndTheirPeersNameTheRankThatStopped) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks: one makes a call the others do not";
  ContextOptions options = big_heap(GetParam().world);
  options.device_timeout = std::chrono::milliseconds(500);
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses these calls before launch";
        const DType dt = DType::kFloat32;
        const int me = ctx.rank();
        std::vector<Config> configs(6);
        configs[0].all_reduce_variant = configs[1].all_reduce_variant = AllReduceVariant::kOneShot;
        configs[0].all_reduce_one_shot_protocol = OneShotProtocol::kLL;
        configs[1].all_reduce_one_shot_protocol = OneShotProtocol::kSimple;
        configs[2].all_reduce_variant = AllReduceVariant::kTwoShot;
        configs[3].all_reduce_variant = AllReduceVariant::kRing;
        configs[4].all_reduce_variant = AllReduceVariant::kAtomic;
        configs[5].all_reduce_variant = AllReduceVariant::kSpinlock;
        uint64_t seed = 1900;
        for (const Config& cfg : configs) {
          SCOPED_TRACE(call_name(cfg));
          std::vector<TestTensor> in(3), out(3);
          for (int k = 0; k < 3; ++k) {
            in[k] = TestTensor::make(ctx, dt, 32, 1000, 1000, true);
            out[k] = TestTensor::make(ctx, dt, 32, 1000, 1000, true);
            in[k].upload(ctx.stream(), test::make_input(dt, 32, 1000, 1000, seed++, me));
            out[k].poison(ctx.stream());
          }
          Workspace ws;
          ccl::all_reduce_preamble(ctx, out[0].view, in[0].view, cfg, ws);
          const uint64_t errors = ctx.device_timeouts();
          if (me != 1) {
            for (int k = 0; k < 3; ++k) ccl::all_reduce(ctx, out[k].view, in[k].view, cfg, ws);
            IRIS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));  // all three have ended; nothing raised yet
          } else {
            Tensor empty = in[0].view;
            empty.rows = 0;
            ccl::all_reduce(ctx, empty, empty, cfg, ws);  // launches nothing
          }
          ctx.bootstrap().barrier();  // rank 1 calls once its peers' calls have ended
          if (me != 1) {
            test::expect_peer_made_no_call_error(test::error_text<TimeoutError>([&] { ctx.synchronize(); }), 1, 1);
            EXPECT_NO_THROW(ctx.synchronize()) << "the skipped calls record nothing while an error is pending";
            for (int k = 1; k < 3; ++k)
              EXPECT_TRUE(out[k].still_poisoned(ctx.stream())) << "call " << k + 1 << " wrote its output";
          } else {
            ccl::all_reduce(ctx, out[0].view, in[0].view, cfg, ws);
            test::expect_peer_stopped_error(test::error_text<TimeoutError>([&] { ctx.synchronize(); }),
                                            "iris device timeout in all_reduce(", 1, 0, 1, 1);
          }
          EXPECT_EQ(ctx.device_timeouts(), errors + 1);
          EXPECT_EQ(test::error_text<std::invalid_argument>([&] {
                      ccl::all_reduce(ctx, out[0].view, in[0].view, cfg, ws);
                    }).rfind("all_reduce: a device error", 0),
                    0u);
          ctx.barrier();
          for (int k = 0; k < 3; ++k) {
            out[k].release();
            in[k].release();
          }
          check_once(ctx, cfg, ws, dt, ReduceOp::kSum, 32, 1000, 1000, false, true, seed++, "prepared again");
          ctx.barrier();
          ccl::ContextWorkspaceHost host_ws(ctx);
          ws.release(host_ws);
        }
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllReduce, ::testing::ValuesIn(test::any_world_rank_setups()), test::rank_setup_name);

}  // namespace
}  // namespace iris
