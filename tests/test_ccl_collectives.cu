// GPU tests of all_gather, reduce_scatter, all_to_all and broadcast: every dtype over shapes that break
// the chunking, heap and cudaMalloc buffers, strided views, in place, several block counts, against a
// bit-exact host reference (copies: the input bits; reduce_scatter: float32 accumulation in rank
// order, emulated on the host); CUDA-graph replays with changing inputs; one workspace reused across
// shapes and roots; the workspace capacity errors; mismatched and invalid calls. 1 and 2 ranks (more
// with IRIS_TEST_MAX_RANKS), threads and processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ccl_test_util.cuh"
#include "iris/ccl/collectives.hpp"
#include "support/call_tag_error.hpp"
#include "support/error_text.hpp"
#include "support/ranks.hpp"
#include "support/reach.hpp"
#include "support/scoped_capture.hpp"
#include "support/stopped_error.hpp"

namespace iris {
namespace {

using ccl::Config;
using ccl::ReduceOp;
using ccl::Workspace;
using test::RankSetup;
using test::TestTensor;

// reduce_scatter: every type it reduces. all_gather, all_to_all and broadcast move bits, one kernel per
// element width, so their full sweeps take every width (1, 2, 4 and 8 bytes); EveryDtypeMovesItsBits
// runs every dtype through them on fewer shapes.
const DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32,      DType::kInt64,
                         DType::kFloat64, DType::kInt8,    DType::kUInt8,    DType::kFloat8E4M3, DType::kFloat8E5M2};
const DType kMovedDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                              DType::kInt32,   DType::kInt64,   DType::kUInt8};

// One rank's block (all_gather's input, reduce_scatter's output, all_to_all's per-rank block,
// broadcast's tensor). Chunks are 8 KiB to 256 KiB: 16x64 is one chunk in every dtype, 1x2048 fp32
// exactly one full chunk, 1x2049 one element more, 1000x333 and 3x100003 many (more than the SMs).
struct Shape {
  int64_t m, n;
};
const Shape kShapes[] = {{1, 1}, {1, 7}, {16, 64}, {1, 2048}, {1, 2049}, {1000, 333}, {3, 100003}};

ContextOptions big_heap(int world) {
  ContextOptions o;
  // 8192 x 8192 fp32/bf16 in + out, plus staging that grows with the ranks.
  o.heap_size = (size_t{1} << 30) + static_cast<size_t>(world) * (size_t{512} << 20);
  o.device_timeout = std::chrono::milliseconds(20000);
  // Heap guards: a kernel that writes past the end of an output or a workspace array (into the rounding up
  // to 256 bytes, where the checks of the outputs do not look, or into the next heap object) makes the next
  // barrier() raise HeapCorruption (a test audit's finding: nothing here saw such a write before 2026-12-06).
  o.heap_guards = true;
  return o;
}

void release(Context& ctx, Workspace& ws) {
  ccl::ContextWorkspaceHost host(ctx);
  ws.release(host);
}

std::string shape_name(DType dt, int64_t m, int64_t n) {
  return std::string(test::short_name(dt)) + " " + std::to_string(m) + "x" + std::to_string(n);
}

// Variations of one check.
struct Mode {
  int64_t pad = 0;  // row stride = cols + pad, for the input and the output
  bool on_heap = true;
  bool in_place = false;
  const char* name = "heap";
};
const Mode kModes[] = {{0, true, false, "heap"}, {0, false, false, "cudaMalloc"}, {5, false, false, "strided"}};

// Expected bytes of element i of rank r's input.
void input_bytes(DType dt, uint64_t seed, int rank, int64_t i, char* dst) {
  encode_element(dt, test::input_value(dt, seed, rank, i), dst);
}

// Counts elements (r, c) of the host image whose bytes differ from want(r, c, bytes); fails the test
// with the first one. Row padding must still hold the poison.
void verify(const std::vector<char>& host, DType dt, int64_t rows, int64_t cols, int64_t stride,
            const std::function<void(int64_t, int64_t, char*)>& want, bool check_padding, const std::string& what,
            unsigned char poison = 0xFF) {
  const size_t esz = dtype_size(dt);
  int64_t wrong = 0, first_r = -1, first_c = -1;
  double got_v = 0, want_v = 0;
  char expect[8];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      want(r, c, expect);
      const char* got = host.data() + (r * stride + c) * esz;
      if (std::memcmp(got, expect, esz) != 0) {
        if (wrong++ == 0)
          first_r = r, first_c = c, got_v = decode_element(dt, got), want_v = decode_element(dt, expect);
      }
    }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << rows * cols << " elements wrong; first at (" << first_r
                      << ", " << first_c << "): got " << got_v << ", want " << want_v;
  if (check_padding && stride > cols) {
    int64_t written = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = cols; c < stride; ++c)
        for (size_t b = 0; b < esz; ++b)
          written += static_cast<unsigned char>(host[(r * stride + c) * esz + b]) != poison;
    EXPECT_EQ(written, 0) << what << ": row padding written";
  }
}

// Rows [first, first + rows) of t.
Tensor rows_of(const Tensor& t, int64_t first, int64_t rows) {
  return Tensor{static_cast<char*>(t.data) + first * t.stride * static_cast<int64_t>(t.element_size()), t.dtype, rows,
                t.cols, t.stride};
}

// Host image of a (rows x stride) tensor, poisoned, with `block` copied in at row `first`.
std::vector<char> image_with(DType dt, int64_t rows, int64_t stride, int64_t first, const std::vector<char>& block,
                             int64_t block_rows) {
  const size_t esz = dtype_size(dt);
  std::vector<char> host(static_cast<size_t>(std::max<int64_t>(1, rows * stride)) * esz, static_cast<char>(0xFF));
  std::memcpy(host.data() + first * stride * esz, block.data(), block_rows * stride * esz);
  return host;
}

// ---- all_gather ----------------------------------------------------------------------------------------

void check_all_gather(Context& ctx, const Config& cfg, Workspace& ws, DType dt, int64_t m, int64_t n, const Mode& mode,
                      uint64_t seed, bool prepare = true) {
  const std::string what = "all_gather " + shape_name(dt, m, n) + " " + mode.name;
  SCOPED_TRACE(what);
  const int world = ctx.world_size(), me = ctx.rank();
  const int64_t stride = n + mode.pad;
  auto out = TestTensor::make(ctx, dt, world * m, n, stride, mode.on_heap);
  auto mine = test::make_input(dt, m, n, stride, seed, me);
  TestTensor in;
  Tensor in_view;
  if (mode.in_place) {
    out.upload(ctx.stream(), image_with(dt, world * m, stride, me * m, mine, m));
    in_view = rows_of(out.view, me * m, m);
  } else {
    in = TestTensor::make(ctx, dt, m, n, stride, mode.on_heap);
    in.upload(ctx.stream(), mine);
    out.poison(ctx.stream());
    in_view = in.view;
  }
  if (prepare) ccl::all_gather_preamble(ctx, out.view, in_view, cfg, ws);
  ccl::all_gather(ctx, out.view, in_view, cfg, ws);
  ctx.synchronize();
  auto host = out.download(ctx.stream());
  verify(
      host, dt, world * m, n, stride,
      [&](int64_t r, int64_t c, char* dst) { input_bytes(dt, seed, static_cast<int>(r / m), (r % m) * n + c, dst); },
      true, what);
  ctx.barrier();
  out.release();
  in.release();
}

// ---- reduce_scatter ------------------------------------------------------------------------------------

// Element i of the reduction, as the kernel computes it, so the bytes must match exactly: integer types
// exactly in their own arithmetic (test::reduce_int_ref); float64 in double and the other floats in
// float32, in rank order 0..W-1, for avg one IEEE division by W, one rounding to the dtype at the end.
void reduced_bytes(DType dt, ReduceOp op, uint64_t seed, int world, int64_t i, char* dst) {
  if (test::is_integer(dt)) {
    const int64_t v = test::reduce_int_ref(dt, op, seed, world, i);
    std::memcpy(dst, &v, dtype_size(dt));  // the low bytes: little-endian
    return;
  }
  encode_element(dt, test::reduce_float_in_rank_order(dt, op, seed, world, i), dst);
}

void check_reduce_scatter(Context& ctx, const Config& cfg, Workspace& ws, DType dt, ReduceOp op, int64_t m, int64_t n,
                          const Mode& mode, uint64_t seed, bool prepare = true) {
  const std::string what =
      std::string("reduce_scatter ") + ccl::reduce_op_name(op) + " " + shape_name(dt, m, n) + " " + mode.name;
  SCOPED_TRACE(what);
  const int world = ctx.world_size(), me = ctx.rank();
  const int64_t stride = n + mode.pad;
  auto in = TestTensor::make(ctx, dt, world * m, n, stride, mode.on_heap);
  in.upload(ctx.stream(), test::make_input(dt, world * m, n, stride, seed, me));
  TestTensor out;
  Tensor out_view;
  if (mode.in_place) {
    out_view = rows_of(in.view, me * m, m);
  } else {
    out = TestTensor::make(ctx, dt, m, n, stride, mode.on_heap);
    out.poison(ctx.stream());
    out_view = out.view;
  }
  if (prepare) ccl::reduce_scatter_preamble(ctx, out_view, in.view, cfg, ws, op);
  const auto want = [&](int64_t r, int64_t c, char* dst) {
    reduced_bytes(dt, op, seed, world, (me * m + r) * n + c, dst);
  };
  ccl::reduce_scatter(ctx, out_view, in.view, cfg, ws, ctx.stream(), op);
  ctx.synchronize();
  auto host = mode.in_place ? in.download(ctx.stream()) : out.download(ctx.stream());
  if (mode.in_place) host.erase(host.begin(), host.begin() + me * m * stride * dtype_size(dt));
  // In place, the row padding is the input's, 0xFF bytes as the poison: never written either way.
  verify(host, dt, m, n, stride, want, true, what);
  // An integer poison (0xFF bytes: -1, or 255 for uint8) is a value a sum or product can give: where some
  // rank expects it, every rank runs the call again into 0x00 bytes, so that an element left unwritten shows
  // either way (before 2026-12-06 about one int8 or uint8 element in 256 could be left unwritten unseen).
  if (!mode.in_place && test::is_integer(dt)) {
    const size_t esz = dtype_size(dt);
    bool poison_expected = false;
    char bytes[8];
    for (int64_t r = 0; r < m && !poison_expected; ++r)
      for (int64_t c = 0; c < n && !poison_expected; ++c) {
        want(r, c, bytes);
        poison_expected = std::all_of(bytes, bytes + esz, [](char b) { return static_cast<unsigned char>(b) == 0xFF; });
      }
    const auto all = ctx.bootstrap().allgather(poison_expected ? "1" : "0");
    if (std::find(all.begin(), all.end(), "1") != all.end()) {
      out.poison(ctx.stream(), 0x00);
      ccl::reduce_scatter(ctx, out_view, in.view, cfg, ws, ctx.stream(), op);
      ctx.synchronize();
      verify(out.download(ctx.stream()), dt, m, n, stride, want, true, what + " (output poisoned with 0x00)", 0x00);
    }
  }
  ctx.barrier();
  out.release();
  in.release();
}

// ---- all_to_all ----------------------------------------------------------------------------------------

void check_all_to_all(Context& ctx, const Config& cfg, Workspace& ws, DType dt, int64_t m, int64_t n, const Mode& mode,
                      uint64_t seed, bool prepare = true) {
  const std::string what = "all_to_all " + shape_name(dt, m, n) + " " + mode.name;
  SCOPED_TRACE(what);
  const int world = ctx.world_size(), me = ctx.rank();
  const int64_t stride = n + mode.pad;
  auto in = TestTensor::make(ctx, dt, world * m, n, stride, mode.on_heap);
  auto out = TestTensor::make(ctx, dt, world * m, n, stride, mode.on_heap);
  in.upload(ctx.stream(), test::make_input(dt, world * m, n, stride, seed, me));
  out.poison(ctx.stream());
  if (prepare) ccl::all_to_all_preamble(ctx, out.view, in.view, cfg, ws);
  ccl::all_to_all(ctx, out.view, in.view, cfg, ws);
  ctx.synchronize();
  auto host = out.download(ctx.stream());
  // out block s, row r = rank s's input block me, row r.
  verify(
      host, dt, world * m, n, stride,
      [&](int64_t r, int64_t c, char* dst) {
        input_bytes(dt, seed, static_cast<int>(r / m), (me * m + r % m) * n + c, dst);
      },
      true, what);
  ctx.barrier();
  out.release();
  in.release();
}

// ---- broadcast -----------------------------------------------------------------------------------------

// Non-root ranks pass their own (different) input, or an empty view when `empty_in_elsewhere`: either
// way it must not be read.
void check_broadcast(Context& ctx, const Config& cfg, Workspace& ws, DType dt, int64_t m, int64_t n, const Mode& mode,
                     int root, uint64_t seed, bool prepare = true, bool empty_in_elsewhere = false) {
  const std::string what = "broadcast from " + std::to_string(root) + " " + shape_name(dt, m, n) + " " + mode.name;
  SCOPED_TRACE(what);
  const int me = ctx.rank();
  const int64_t stride = n + mode.pad;
  // Every rank allocates the same (heap allocation is collective), whatever it passes.
  auto out = TestTensor::make(ctx, dt, m, n, stride, mode.on_heap);
  auto in = TestTensor::make(ctx, dt, m, n, stride, mode.on_heap);
  Tensor in_view = in.view;
  if (mode.in_place && me == root) {
    out.upload(ctx.stream(), test::make_input(dt, m, n, stride, seed, me));
    in_view = out.view;
  } else {
    out.poison(ctx.stream());
    in.upload(ctx.stream(), test::make_input(dt, m, n, stride, seed, me));
    if (me != root && empty_in_elsewhere) in_view = Tensor{};
  }
  if (prepare) ccl::broadcast_preamble(ctx, out.view, in_view, root, cfg, ws);
  ccl::broadcast(ctx, out.view, in_view, root, cfg, ws);
  ctx.synchronize();
  auto host = out.download(ctx.stream());
  verify(
      host, dt, m, n, stride, [&](int64_t r, int64_t c, char* dst) { input_bytes(dt, seed, root, r * n + c, dst); },
      true, what);  // in place on the root, the padding is its input's: 0xFF bytes, as the poison
  ctx.barrier();
  out.release();
  in.release();
}

// ---- every dtype, shape and mode --------------------------------------------------------------------------

class Collective : public ::testing::TestWithParam<RankSetup> {};

// Runs body(dt, shape, mode, cfg, ws, seed) for every dtype x shape x mode, plus in place, with a fresh
// workspace per dtype and shape, and two launches that loop over chunks (comm_sms 1 and 3).
template <typename Dtypes, typename Body>
void for_each_case(Context& ctx, const Dtypes& dtypes, bool has_in_place, Body&& body) {
  uint64_t seed = 1;
  for (DType dt : dtypes)
    for (const Shape& s : kShapes) {
      Workspace ws;
      Config cfg;
      for (const Mode& mode : kModes) body(dt, s, mode, cfg, ws, seed++);
      if (has_in_place) {
        body(dt, s, Mode{0, true, true, "in place"}, cfg, ws, seed++);
        body(dt, s, Mode{5, false, true, "in place strided"}, cfg, ws, seed++);
      }
      for (int sms : {1, 3}) {
        Config few = cfg;
        few.comm_sms = sms;
        body(dt, s, Mode{0, true, false, sms == 1 ? "comm_sms 1" : "comm_sms 3"}, few, ws, seed++);
      }
      release(ctx, ws);
    }
}

TEST_P(Collective, AllGatherMatchesInputs) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        for_each_case(ctx, kMovedDtypes, true,
                      [&](DType dt, const Shape& s, const Mode& mode, const Config& cfg, Workspace& ws, uint64_t seed) {
                        check_all_gather(ctx, cfg, ws, dt, s.m, s.n, mode, seed);
                      });
      },
      big_heap(GetParam().world));
}

TEST_P(Collective, ReduceScatterMatchesRankOrderReference) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        for_each_case(
            ctx, kDtypes, true,
            [&](DType dt, const Shape& s, const Mode& mode, const Config& cfg, Workspace& ws, uint64_t seed) {
              check_reduce_scatter(ctx, cfg, ws, dt, ReduceOp::kSum, s.m, s.n, mode, seed);
              if (!mode.in_place && mode.pad == 0 && mode.on_heap) {  // the other ops once per dtype and shape
                check_reduce_scatter(ctx, cfg, ws, dt, ReduceOp::kMax, s.m, s.n, mode, seed + 1000);
                check_reduce_scatter(ctx, cfg, ws, dt, ReduceOp::kMin, s.m, s.n, mode, seed + 2000);
                check_reduce_scatter(ctx, cfg, ws, dt, ReduceOp::kAvg, s.m, s.n, mode, seed + 3000);
                check_reduce_scatter(ctx, cfg, ws, dt, ReduceOp::kProd, s.m, s.n, mode, seed + 4000);
              }
            });
      },
      big_heap(GetParam().world));
}

TEST_P(Collective, AllToAllMatchesInputs) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        for_each_case(ctx, kMovedDtypes, false,
                      [&](DType dt, const Shape& s, const Mode& mode, const Config& cfg, Workspace& ws, uint64_t seed) {
                        check_all_to_all(ctx, cfg, ws, dt, s.m, s.n, mode, seed);
                      });
      },
      big_heap(GetParam().world));
}

TEST_P(Collective, BroadcastFromFirstAndLastRankMatchesRoot) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    const int last = ctx.world_size() - 1;
    for_each_case(ctx, kMovedDtypes, true,
                  [&](DType dt, const Shape& s, const Mode& mode, const Config& cfg, Workspace& ws, uint64_t seed) {
                    check_broadcast(ctx, cfg, ws, dt, s.m, s.n, mode, 0, seed);
                    check_broadcast(ctx, cfg, ws, dt, s.m, s.n, mode, last, seed + 1000, true,
                                    /*empty_in_elsewhere=*/!mode.on_heap);
                  });
  }, big_heap(GetParam().world));
}

// Every dtype (int64, float64, uint8, int8, float8 e4m3 and e5m2 included) through all_gather, all_to_all and
// broadcast: a shape of one LL line's worth and a shape of many chunks with an odd row length, on the heap and
// strided, bit for bit.
TEST_P(Collective, EveryDtypeMovesItsBits) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        uint64_t seed = 9000;
        for (DType dt : kAllDTypes) {
          for (const Shape& s : {Shape{1, 7}, Shape{1000, 333}}) {
            for (const Mode& mode : {kModes[0], kModes[2]}) {
              Config cfg;
              Workspace ag, a2a, bc;
              check_all_gather(ctx, cfg, ag, dt, s.m, s.n, mode, seed++);
              check_all_to_all(ctx, cfg, a2a, dt, s.m, s.n, mode, seed++);
              check_broadcast(ctx, cfg, bc, dt, s.m, s.n, mode, ctx.world_size() - 1, seed++);
              for (Workspace* ws : {&ag, &a2a, &bc}) release(ctx, *ws);
            }
          }
        }
      },
      big_heap(GetParam().world));
}

// 8192 x 8192 in total, bf16: one rank's block is 8192/W rows (broadcast: the whole tensor).
TEST_P(Collective, LargeBf16) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    const int64_t n = 8192, m = 8192 / ctx.world_size();
    const Mode heap{};
    Config cfg;
    Workspace ag, rs, a2a, bc;
    check_all_gather(ctx, cfg, ag, DType::kBFloat16, m, n, heap, 11);
    release(ctx, ag);
    check_reduce_scatter(ctx, cfg, rs, DType::kBFloat16, ReduceOp::kSum, m, n, heap, 12);
    release(ctx, rs);
    check_all_to_all(ctx, cfg, a2a, DType::kBFloat16, m, n, heap, 13);
    release(ctx, a2a);
    check_broadcast(ctx, cfg, bc, DType::kBFloat16, n, n, heap, ctx.world_size() - 1, 14);
    release(ctx, bc);
  }, big_heap(GetParam().world));
}

// One workspace per op, prepared for the largest shape, then 40 calls alternating smaller shapes (and,
// for broadcast, roots; for reduce_scatter, max, sum and avg) without a preamble: chunk plans and roots change between
// calls on the same staging and flags, and every result is right.
TEST_P(Collective, OneWorkspaceServesChangingShapesAndRoots) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    const Shape shapes[] = {{300, 1000}, {1, 7}, {64, 1000}, {1000, 33}};
    const DType dt = DType::kFloat32;
    const Mode heap{};
    Config cfg;
    Workspace ag, rs, a2a, bc;
    check_all_gather(ctx, cfg, ag, dt, 300, 1000, heap, 100);
    check_reduce_scatter(ctx, cfg, rs, dt, ReduceOp::kSum, 300, 1000, heap, 101);
    check_all_to_all(ctx, cfg, a2a, dt, 300, 1000, heap, 102);
    check_broadcast(ctx, cfg, bc, dt, 300, 1000, heap, 0, 103);
    const uint64_t heap_ops = ctx.allocation_count();
    for (int call = 0; call < 40; ++call) {
      const Shape& s = shapes[call % 4];
      const uint64_t seed = 200 + call;
      check_all_gather(ctx, cfg, ag, dt, s.m, s.n, heap, seed, false);
      const ReduceOp op = call % 3 == 0 ? ReduceOp::kMax : call % 3 == 1 ? ReduceOp::kSum : ReduceOp::kAvg;
      check_reduce_scatter(ctx, cfg, rs, dt, op, s.m, s.n, heap, seed, false);
      check_all_to_all(ctx, cfg, a2a, dt, s.m, s.n, heap, seed, false);
      check_broadcast(ctx, cfg, bc, dt, s.m, s.n, heap, call % ctx.world_size(), seed, false);
      if (::testing::Test::HasFailure()) break;
    }
    // Each check allocates and frees its input and output (4 heap operations), nothing else.
    EXPECT_EQ(ctx.allocation_count(), heap_ops + 40 * 4 * 4) << "a call allocated on the heap";
    EXPECT_EQ(ag.calls(), 41u);
    for (Workspace* ws : {&ag, &rs, &a2a, &bc}) release(ctx, *ws);
  }, big_heap(GetParam().world));
}

// An empty call first (a serving loop's empty batch) leaves a fresh workspace for the later calls of any size,
// LL and chunked: before 2026-12-07 its preamble allocated 256 bytes of LL staging, which then stayed the
// workspace's, and every later call's preamble raised "Staging buffer too small" (a collectives audit's finding).
TEST_P(Collective, AnEmptyCallFirstLeavesTheWorkspaceToLaterCalls) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const DType dt = DType::kFloat32;
        const Mode heap{};
        Config cfg;
        float* buf = ctx.zeros<float>(1000);
        const Tensor empty = Tensor::matrix(buf, dt, 0, 1000);
        Workspace ag, rs, a2a, bc;
        ccl::all_gather_preamble(ctx, empty, empty, cfg, ag);
        ccl::all_gather(ctx, empty, empty, cfg, ag);
        ccl::reduce_scatter_preamble(ctx, empty, empty, cfg, rs);
        ccl::reduce_scatter(ctx, empty, empty, cfg, rs);
        ccl::all_to_all_preamble(ctx, empty, empty, cfg, a2a);
        ccl::all_to_all(ctx, empty, empty, cfg, a2a);
        ccl::broadcast_preamble(ctx, empty, empty, 0, cfg, bc);
        ccl::broadcast(ctx, empty, empty, 0, cfg, bc);
        ctx.synchronize();
        const Shape shapes[] = {{300, 1000}, {1, 7}};  // chunked (the largest first: arrays never grow), then LL
        uint64_t seed = 300;
        for (const Shape& s : shapes) {
          check_all_gather(ctx, cfg, ag, dt, s.m, s.n, heap, seed++);
          check_reduce_scatter(ctx, cfg, rs, dt, ReduceOp::kSum, s.m, s.n, heap, seed++);
          check_all_to_all(ctx, cfg, a2a, dt, s.m, s.n, heap, seed++);
          check_broadcast(ctx, cfg, bc, dt, s.m, s.n, heap, ctx.world_size() - 1, seed++);
        }
        for (Workspace* ws : {&ag, &rs, &a2a, &bc}) release(ctx, *ws);
        ctx.free(buf);
      },
      big_heap(GetParam().world));
}

// ---- CUDA graphs -----------------------------------------------------------------------------------------

// Replay k's input, element i, rank r: a small integer (test::small_value).
__host__ __device__ inline float replay_value(int rank, int k, int64_t i) {
  return static_cast<float>(test::small_value(rank, k, i));
}

__global__ void fill_replay_input(__nv_bfloat16* p, int64_t n, int rank, const int* k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = __float2bfloat16_rn(replay_value(rank, *k, i));
}

// Captures {refresh the input from *k, op} once, in global mode, and replays it, checking every replay.
void replay_graph(Context& ctx, const char* name, int replays, __nv_bfloat16* in, int64_t in_n, __nv_bfloat16* out,
                  int64_t out_n, const std::function<void()>& op, const std::function<float(int, int64_t)>& want) {
  SCOPED_TRACE(name);
  int* k = ctx.zeros<int>(1);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  // In global mode (PyTorch's default), with host barriers around it: see replay_graph_and_check in
  // test_ccl_all_reduce.cu.
  ctx.bootstrap().barrier();
  {
    test::ScopedCapture capture(ctx.stream(), cudaStreamCaptureModeGlobal);
    fill_replay_input<<<64, 256, 0, ctx.stream()>>>(in, in_n, ctx.rank(), k);
    op();
    graph = capture.end();
  }
  ctx.bootstrap().barrier();
  IRIS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<__nv_bfloat16> host(out_n);
  int bad_replays = 0;
  for (int rep = 0; rep < replays; ++rep) {
    IRIS_CUDA_CHECK(cudaMemcpyAsync(k, &rep, sizeof(int), cudaMemcpyHostToDevice, ctx.stream()));
    IRIS_CUDA_CHECK(cudaMemsetAsync(out, 0xFF, out_n * 2, ctx.stream()));  // poison between replays
    IRIS_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream()));
    IRIS_CUDA_CHECK(cudaMemcpyAsync(host.data(), out, out_n * 2, cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.synchronize();
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < out_n; ++i)
      if (__bfloat162float(host[i]) != want(rep, i)) {
        if (wrong++ == 0) first = i;
      }
    if (wrong && bad_replays++ < 3)
      ADD_FAILURE() << name << " replay " << rep << ": " << wrong << " wrong elements, first " << first << ": got "
                    << __bfloat162float(host[first]) << ", want " << want(rep, first);
  }
  EXPECT_EQ(bad_replays, 0) << name;
  IRIS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  IRIS_CUDA_CHECK(cudaGraphDestroy(graph));
  ctx.barrier();
  ctx.free(k);
}

TEST_P(Collective, GraphReplaysWithChangingInputsStayCorrect) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    const int world = ctx.world_size(), me = ctx.rank();
    const Config cfg;
    // Per-rank block: one chunk (4099 elements), and many chunks with a 3-block launch (3 x 30011).
    for (int64_t rows : {int64_t{1}, int64_t{3}}) {
      const int64_t cols = rows == 1 ? 4099 : 30011, n = rows * cols;
      Config c = cfg;
      if (rows == 3) c.comm_sms = 3;
      auto* in = ctx.empty<__nv_bfloat16>(world * n);
      auto* out = ctx.empty<__nv_bfloat16>(world * n);
      {
        Workspace ws;
        const Tensor tin = Tensor::matrix(in, DType::kBFloat16, rows, cols);
        const Tensor tout = Tensor::matrix(out, DType::kBFloat16, world * rows, cols);
        ccl::all_gather_preamble(ctx, tout, tin, c, ws);
        replay_graph(
            ctx, "all_gather", 1000, in, n, out, world * n, [&] { ccl::all_gather(ctx, tout, tin, c, ws); },
            [&](int k, int64_t i) { return replay_value(static_cast<int>(i / n), k, i % n); });
        EXPECT_EQ(ws.calls(), 1u) << "captured once";
        release(ctx, ws);
      }
      {
        Workspace ws;
        const Tensor tin = Tensor::matrix(in, DType::kBFloat16, world * rows, cols);
        const Tensor tout = Tensor::matrix(out, DType::kBFloat16, rows, cols);
        ccl::reduce_scatter_preamble(ctx, tout, tin, c, ws);
        replay_graph(
            ctx, "reduce_scatter", 1000, in, world * n, out, n, [&] { ccl::reduce_scatter(ctx, tout, tin, c, ws); },
            [&](int k, int64_t i) {
              float sum = 0;
              for (int s = 0; s < world; ++s) sum += replay_value(s, k, me * n + i);
              return sum;
            });
        release(ctx, ws);
      }
      {
        Workspace ws;
        const Tensor tin = Tensor::matrix(in, DType::kBFloat16, world * rows, cols);
        const Tensor tout = Tensor::matrix(out, DType::kBFloat16, world * rows, cols);
        ccl::all_to_all_preamble(ctx, tout, tin, c, ws);
        replay_graph(
            ctx, "all_to_all", 1000, in, world * n, out, world * n, [&] { ccl::all_to_all(ctx, tout, tin, c, ws); },
            [&](int k, int64_t i) { return replay_value(static_cast<int>(i / n), k, me * n + i % n); });
        release(ctx, ws);
      }
      {
        Workspace ws;
        const int root = world - 1;
        const Tensor tin = Tensor::matrix(in, DType::kBFloat16, rows, cols);
        const Tensor tout = Tensor::matrix(out, DType::kBFloat16, rows, cols);
        ccl::broadcast_preamble(ctx, tout, tin, root, c, ws);
        replay_graph(
            ctx, "broadcast", 1000, in, n, out, n, [&] { ccl::broadcast(ctx, tout, tin, root, c, ws); },
            [&](int k, int64_t i) { return replay_value(root, k, i); });
        release(ctx, ws);
      }
      ctx.free(out);
      ctx.free(in);
    }
  }, big_heap(GetParam().world));
}

__global__ void fill_call_input(__nv_bfloat16* p, int64_t n, int rank, int k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = __float2bfloat16_rn(replay_value(rank, k, i));
}

// `calls` calls queued back to back with no host synchronization, each with a fresh input and its
// output copied aside (with `delays`, one rank in turn is held back before its call): peers run ahead
// into the next call as far as the op lets them, so a buffer reused too early (staging, flags) shows.
// `checked(k)`, when given, is how many of call k's first output elements it writes (calls of several sizes).
void back_to_back(Context& ctx, const char* name, int calls, bool delays, __nv_bfloat16* in, int64_t in_n,
                  __nv_bfloat16* out, int64_t out_n, const std::function<void()>& op,
                  const std::function<float(int, int64_t)>& want,
                  const std::function<int64_t(int)>& checked = nullptr) {
  SCOPED_TRACE(name);
  __nv_bfloat16* history = nullptr;
  IRIS_CUDA_CHECK(cudaMalloc(&history, calls * out_n * 2));
  for (int k = 0; k < calls; ++k) {
    fill_call_input<<<64, 256, 0, ctx.stream()>>>(in, in_n, ctx.rank(), k);
    IRIS_CUDA_CHECK(cudaMemsetAsync(out, 0xFF, out_n * 2, ctx.stream()));  // poison: an element not written shows
    // Every third call, one rank in turn (before 2026-12-07 k % world == rank and k % 3 == 0: only rank 0 at
    // 3 ranks).
    if (delays && k % 3 == 0 && (k / 3) % ctx.world_size() == ctx.rank())
      test::hold_stream_us<<<1, 1, 0, ctx.stream()>>>(20 + k % 50);
    op();
    IRIS_CUDA_CHECK(
        cudaMemcpyAsync(history + k * out_n, out, out_n * 2, cudaMemcpyDeviceToDevice, ctx.stream()));
  }
  ctx.synchronize();
  std::vector<__nv_bfloat16> host(calls * out_n);
  IRIS_CUDA_CHECK(cudaMemcpy(host.data(), history, host.size() * 2, cudaMemcpyDeviceToHost));
  IRIS_CUDA_CHECK(cudaFree(history));
  int bad_calls = 0;
  for (int k = 0; k < calls; ++k) {
    int64_t wrong = 0, first = -1;
    const int64_t written = checked ? checked(k) : out_n;
    for (int64_t i = 0; i < written; ++i)
      if (__bfloat162float(host[k * out_n + i]) != want(k, i)) {
        if (wrong++ == 0) first = i;
      }
    if (wrong && bad_calls++ < 3)
      ADD_FAILURE() << name << " call " << k << ": " << wrong << " wrong elements, first " << first << ": got "
                    << __bfloat162float(host[k * out_n + first]) << ", want " << want(k, first);
  }
  EXPECT_EQ(bad_calls, 0) << name;
  ctx.barrier();
}

// Two skews: (a) small calls, one rank in turn held back before its call; (b) large calls where every
// odd rank runs each call on one block (comm_sms is not in these calls' signatures) while the others use
// every SM, so a fast rank finishes call e and pushes call e + 1 while a slow one still reads call e's
// staging chunk by chunk. Without the staging parities (or broadcast's wait for the peers' previous
// call) the slow ranks read the next call's data. The grids that differ between ranks also check that
// the pipelined kernels (pipelined_chunks, two_shot's columns) never wait on the same block index.
TEST_P(Collective, BackToBackCallsWithSkewedRanksStayCorrect) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    const int world = ctx.world_size(), me = ctx.rank();
    for (int skew = 0; skew < 2; ++skew) {
      const int calls = skew == 0 ? 300 : 40;
      const int64_t rows = 1, cols = skew == 0 ? 20011 : 500009, n = rows * cols;  // 5 / 123 chunks (bf16)
      Config c;
      c.comm_sms = skew == 0 ? 2 : (me % 2 == 1 ? 1 : 0);
      auto* in = ctx.empty<__nv_bfloat16>(world * n);
      auto* out = ctx.empty<__nv_bfloat16>(world * n);
      const Tensor one_in = Tensor::matrix(in, DType::kBFloat16, rows, cols);
      const Tensor all_in = Tensor::matrix(in, DType::kBFloat16, world * rows, cols);
      const Tensor one_out = Tensor::matrix(out, DType::kBFloat16, rows, cols);
      const Tensor all_out = Tensor::matrix(out, DType::kBFloat16, world * rows, cols);
      const bool delays = skew == 0;
      Workspace ag, rs, a2a, bc;
      ccl::all_gather_preamble(ctx, all_out, one_in, c, ag);
      back_to_back(
          ctx, "all_gather", calls, delays, in, n, out, world * n,
          [&] { ccl::all_gather(ctx, all_out, one_in, c, ag); },
          [&](int k, int64_t i) { return replay_value(static_cast<int>(i / n), k, i % n); });
      ccl::reduce_scatter_preamble(ctx, one_out, all_in, c, rs);
      back_to_back(
          ctx, "reduce_scatter", calls, delays, in, world * n, out, n,
          [&] { ccl::reduce_scatter(ctx, one_out, all_in, c, rs); },
          [&](int k, int64_t i) {
            float sum = 0;
            for (int s = 0; s < world; ++s) sum += replay_value(s, k, me * n + i);
            return sum;
          });
      ccl::all_to_all_preamble(ctx, all_out, all_in, c, a2a);
      back_to_back(
          ctx, "all_to_all", calls, delays, in, world * n, out, world * n,
          [&] { ccl::all_to_all(ctx, all_out, all_in, c, a2a); },
          [&](int k, int64_t i) { return replay_value(static_cast<int>(i / n), k, me * n + i % n); });
      // broadcast: (a) the root changes every call (one workspace); (b) rank 0, a fast rank, is the root
      // of every call, and nothing but its wait for the peers' previous call holds it back.
      ccl::broadcast_preamble(ctx, one_out, one_in, 0, c, bc);
      int k_root = 0;
      auto root_of = [&](int k) { return skew == 0 ? k % world : 0; };
      back_to_back(
          ctx, "broadcast", calls, delays, in, n, out, n,
          [&] { ccl::broadcast(ctx, one_out, one_in, root_of(k_root++), c, bc); },
          [&](int k, int64_t i) { return replay_value(root_of(k), k, i); });
      // all_reduce two_shot over the whole W x n buffer, both chunk distributions; in (b) the even ranks
      // run distribution 1 on 7 blocks, so both sides of the skew loop over several columns.
      for (int distribution = 0; distribution < 2; ++distribution) {
        Config r = c;
        r.all_reduce_variant = ccl::AllReduceVariant::kTwoShot;
        r.all_reduce_distribution = distribution;
        if (skew == 1 && distribution == 1 && me % 2 == 0) r.comm_sms = 7;
        const Tensor all_io = Tensor::matrix(out, DType::kBFloat16, world * rows, cols);
        Workspace ar;
        ccl::all_reduce_preamble(ctx, all_io, all_in, r, ar);
        back_to_back(
            ctx, distribution == 0 ? "all_reduce two_shot" : "all_reduce two_shot, distribution 1", calls, delays, in,
            world * n, out, world * n, [&] { ccl::all_reduce(ctx, all_io, all_in, r, ar); },
            [&](int k, int64_t i) {
              float sum = 0;
              for (int s = 0; s < world; ++s) sum += replay_value(s, k, i);
              return sum;
            });
        release(ctx, ar);
      }
      for (Workspace* ws : {&ag, &rs, &a2a, &bc}) release(ctx, *ws);
      ctx.free(out);
      ctx.free(in);
    }
  }, big_heap(GetParam().world));
}

// LL and chunked calls in turn on one workspace, back to back with one rank in turn held back: a fast rank's
// chunked call pushes into a staging whose other half a slow rank's LL call may still read, and broadcast's
// layout fence orders every switch. The protocols' shared parity argument (collective_kernels.hpp) and the
// fence were tested only with a barrier around each call before 2026-12-07 (a collectives audit's gap).
TEST_P(Collective, LLAndChunkedCallsInTurnWithSkewedRanksStayCorrect) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size(), me = ctx.rank();
        const int calls = 120;
        const int64_t big = 100003, small = 1000;  // bf16: 200 KB blocks (chunked), 2 KB (LL) for every op
        // Two of each in turn: with back_to_back's delays (every third call, one rank in turn), each rank is
        // held back before calls of both protocols.
        auto size_of = [&](int k) { return (k / 2) % 2 == 0 ? big : small; };
        Config c;
        c.comm_sms = 4;
        auto* in = ctx.empty<__nv_bfloat16>(world * big);
        auto* out = ctx.empty<__nv_bfloat16>(world * big);
        auto one = [&](__nv_bfloat16* p, int64_t n) { return Tensor::matrix(p, DType::kBFloat16, 1, n); };
        auto all = [&](__nv_bfloat16* p, int64_t n) { return Tensor::matrix(p, DType::kBFloat16, world, n); };
        Workspace ag, rs, bc;
        ccl::all_gather_preamble(ctx, all(out, big), one(in, big), c, ag);  // the larger needs first
        int k_ag = 0;
        back_to_back(
            ctx, "all_gather, LL and chunked in turn", calls, true, in, world * big, out, world * big,
            [&] {
              const int64_t n = size_of(k_ag++);
              ccl::all_gather(ctx, all(out, n), one(in, n), c, ag);
            },
            [&](int k, int64_t i) { return replay_value(static_cast<int>(i / size_of(k)), k, i % size_of(k)); },
            [&](int k) { return world * size_of(k); });
        ccl::reduce_scatter_preamble(ctx, one(out, big), all(in, big), c, rs);
        int k_rs = 0;
        back_to_back(
            ctx, "reduce_scatter, LL and chunked in turn", calls, true, in, world * big, out, big,
            [&] {
              const int64_t n = size_of(k_rs++);
              ccl::reduce_scatter(ctx, one(out, n), all(in, n), c, rs);
            },
            [&](int k, int64_t i) {
              float sum = 0;
              for (int s = 0; s < world; ++s) sum += replay_value(s, k, me * size_of(k) + i);
              return sum;
            },
            [&](int k) { return size_of(k); });
        ccl::broadcast_preamble(ctx, one(out, big), one(in, big), 0, c, bc);
        int k_bc = 0;
        back_to_back(
            ctx, "broadcast, LL and chunked in turn", calls, true, in, big, out, big,
            [&] {
              const int k = k_bc++;
              ccl::broadcast(ctx, one(out, size_of(k)), one(in, size_of(k)), (k / 4) % world, c, bc);
            },
            [&](int k, int64_t i) { return replay_value((k / 4) % world, k, i); }, [&](int k) { return size_of(k); });
        for (Workspace* ws : {&ag, &rs, &bc}) release(ctx, *ws);
        ctx.free(out);
        ctx.free(in);
      },
      big_heap(GetParam().world));
}

// Calls with one workspace run in the order they were made, whatever streams they are made on
// (iris::CallOrder). Rank 0 holds its first call's stream back until its second call is done, at most 20 ms
// (test::calls_on_two_streams): without the order its second call, on a second stream with the same shape
// and other data, would run first and meet its peers' first call, and both would return the other call's
// data with no error. After one call that loads the op's kernels; eagerly, and captured into one graph whose
// second stream forks off the first before the hold (the order is then an edge of the graph). Every op, on
// few elements (the LL exchanges, one_shot LL) and on many (chunked exchanges, all_reduce two_shot).
TEST_P(Collective, CallsWithOneWorkspaceOnTwoStreamsRunInTheOrderMade) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2)
    GTEST_SKIP() << "one rank: its calls exchange nothing, so calls run out of order still give right results and "
                    "the order is not shown";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size(), me = ctx.rank(), root = world - 1;
        cudaStream_t second = nullptr;
        IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking));
        const Config c;
        for (const int64_t n : {int64_t{1000}, int64_t{100003}}) {
          __nv_bfloat16* in[2] = {ctx.empty<__nv_bfloat16>(world * n), ctx.empty<__nv_bfloat16>(world * n)};
          __nv_bfloat16* out[2] = {ctx.empty<__nv_bfloat16>(world * n), ctx.empty<__nv_bfloat16>(world * n)};
          auto view = [&](__nv_bfloat16* p, int64_t rows) { return Tensor::matrix(p, DType::kBFloat16, rows, n); };
          auto rank_sum = [&](int k, int64_t i) {
            float sum = 0;
            for (int s = 0; s < world; ++s) sum += replay_value(s, k, i);
            return sum;
          };
          struct OpCase {
            const char* name;
            int64_t in_rows, out_rows;  // of n elements each
            std::function<void(Workspace&)> prepare;
            std::function<void(int, cudaStream_t, Workspace&)> call;  // call k on its buffers
            std::function<float(int, int64_t)> want;                  // element i of call k's output
          };
          const OpCase cases[] = {
              {"all_reduce", 1, 1,
               [&](Workspace& ws) { ccl::all_reduce_preamble(ctx, view(out[0], 1), view(in[0], 1), c, ws); },
               [&](int k, cudaStream_t s, Workspace& ws) {
                 ccl::all_reduce(ctx, view(out[k], 1), view(in[k], 1), c, ws, s);
               },
               rank_sum},
              {"all_gather", 1, world,
               [&](Workspace& ws) { ccl::all_gather_preamble(ctx, view(out[0], world), view(in[0], 1), c, ws); },
               [&](int k, cudaStream_t s, Workspace& ws) {
                 ccl::all_gather(ctx, view(out[k], world), view(in[k], 1), c, ws, s);
               },
               [&](int k, int64_t i) { return replay_value(static_cast<int>(i / n), k, i % n); }},
              {"reduce_scatter", world, 1,
               [&](Workspace& ws) { ccl::reduce_scatter_preamble(ctx, view(out[0], 1), view(in[0], world), c, ws); },
               [&](int k, cudaStream_t s, Workspace& ws) {
                 ccl::reduce_scatter(ctx, view(out[k], 1), view(in[k], world), c, ws, s);
               },
               [&](int k, int64_t i) { return rank_sum(k, me * n + i); }},
              {"all_to_all", world, world,
               [&](Workspace& ws) { ccl::all_to_all_preamble(ctx, view(out[0], world), view(in[0], world), c, ws); },
               [&](int k, cudaStream_t s, Workspace& ws) {
                 ccl::all_to_all(ctx, view(out[k], world), view(in[k], world), c, ws, s);
               },
               [&](int k, int64_t i) { return replay_value(static_cast<int>(i / n), k, me * n + i % n); }},
              {"broadcast", 1, 1,
               [&](Workspace& ws) { ccl::broadcast_preamble(ctx, view(out[0], 1), view(in[0], 1), root, c, ws); },
               [&](int k, cudaStream_t s, Workspace& ws) {
                 ccl::broadcast(ctx, view(out[k], 1), view(in[k], 1), root, c, ws, s);
               },
               [&](int k, int64_t i) { return replay_value(root, k, i); }},
          };
          for (const OpCase& op : cases) {
            Workspace ws;
            op.prepare(ws);
            op.call(0, ctx.stream(), ws);  // loads its kernels (test::calls_on_two_streams)
            ctx.synchronize();
            for (const bool graph : {false, true}) {
              SCOPED_TRACE(std::string(op.name) + ", " + std::to_string(n) + " elements per block, " +
                           (graph ? "one graph" : "eager"));
              for (int k = 0; k < 2; ++k) {
                fill_call_input<<<64, 256, 0, ctx.stream()>>>(in[k], op.in_rows * n, me, k);
                IRIS_CUDA_CHECK(cudaMemsetAsync(out[k], 0xFF, op.out_rows * n * 2, ctx.stream()));
              }
              ctx.synchronize();
              test::calls_on_two_streams(
                  ctx, second, graph, 20000, [&](cudaStream_t s) { op.call(0, s, ws); },
                  [&](cudaStream_t s) { op.call(1, s, ws); });
              for (int k = 0; k < 2; ++k) {
                std::vector<__nv_bfloat16> host(op.out_rows * n);
                IRIS_CUDA_CHECK(cudaMemcpy(host.data(), out[k], host.size() * 2, cudaMemcpyDeviceToHost));
                int64_t wrong = 0, first = -1;
                for (int64_t i = 0; i < static_cast<int64_t>(host.size()); ++i)
                  if (__bfloat162float(host[i]) != op.want(k, i) && wrong++ == 0) first = i;
                EXPECT_EQ(wrong, 0) << "call " << k << " (on the " << (k == 0 ? "held" : "second")
                                    << " stream): " << wrong << " wrong elements, first " << first << ": got "
                                    << (wrong ? __bfloat162float(host[first]) : 0.f) << ", want "
                                    << (wrong ? op.want(k, first) : 0.f);
              }
              ctx.barrier();
            }
            EXPECT_EQ(ws.calls(), 5u) << op.name << ": one to load its kernels, two calls eagerly, two captured";
            release(ctx, ws);
          }
          for (int k = 0; k < 2; ++k) {
            ctx.free(out[k]);
            ctx.free(in[k]);
          }
        }
        IRIS_CUDA_CHECK(cudaStreamDestroy(second));
      },
      big_heap(GetParam().world));
}

// ---- workspace capacity, mismatches, misuse ----------------------------------------------------------------

// The input and output of one call of an op whose per-rank block is m x n (fp32 unless said), on the heap.
struct OpCall {
  TestTensor in, out;
};

enum class Op { kAllGather, kReduceScatter, kAllToAll, kBroadcast };
const Op kOps[] = {Op::kAllGather, Op::kReduceScatter, Op::kAllToAll, Op::kBroadcast};
const char* op_name(Op op) {
  switch (op) {
    case Op::kAllGather: return "all_gather";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllToAll: return "all_to_all";
    case Op::kBroadcast: return "broadcast";
  }
  return "?";
}

OpCall make_call(Context& ctx, Op op, int64_t m, int64_t n, DType dt = DType::kFloat32) {
  const int w = ctx.world_size();
  OpCall c;
  const int64_t in_rows = op == Op::kReduceScatter || op == Op::kAllToAll ? w * m : m;
  const int64_t out_rows = op == Op::kAllGather || op == Op::kAllToAll ? w * m : m;
  c.in = TestTensor::make(ctx, dt, in_rows, n, n, true);
  c.out = TestTensor::make(ctx, dt, out_rows, n, n, true);
  return c;
}

void preamble(Context& ctx, Op op, const Tensor& out, const Tensor& in, Workspace& ws, const Config& cfg = {}) {
  switch (op) {
    case Op::kAllGather: return ccl::all_gather_preamble(ctx, out, in, cfg, ws);
    case Op::kReduceScatter: return ccl::reduce_scatter_preamble(ctx, out, in, cfg, ws);
    case Op::kAllToAll: return ccl::all_to_all_preamble(ctx, out, in, cfg, ws);
    case Op::kBroadcast: return ccl::broadcast_preamble(ctx, out, in, 0, cfg, ws);
  }
}

void call(Context& ctx, Op op, const Tensor& out, const Tensor& in, Workspace& ws, const Config& cfg = {}) {
  switch (op) {
    case Op::kAllGather: return ccl::all_gather(ctx, out, in, cfg, ws);
    case Op::kReduceScatter: return ccl::reduce_scatter(ctx, out, in, cfg, ws);
    case Op::kAllToAll: return ccl::all_to_all(ctx, out, in, cfg, ws);
    case Op::kBroadcast: return ccl::broadcast(ctx, out, in, 0, cfg, ws);
  }
}

// The collective `op` of m x n fp32 blocks (broadcast: from rank 0), checked against its reference (check_all_gather
// and its siblings: each runs the preamble on `ws`, then one call).
void check_exchange(Context& ctx, Op op, Workspace& ws, int64_t m, int64_t n, const Mode& mode, uint64_t seed) {
  if (op == Op::kBroadcast) check_broadcast(ctx, Config{}, ws, DType::kFloat32, m, n, mode, 0, seed);
  if (op == Op::kAllGather) check_all_gather(ctx, Config{}, ws, DType::kFloat32, m, n, mode, seed);
  if (op == Op::kReduceScatter)
    check_reduce_scatter(ctx, Config{}, ws, DType::kFloat32, ReduceOp::kSum, m, n, mode, seed);
  if (op == Op::kAllToAll) check_all_to_all(ctx, Config{}, ws, DType::kFloat32, m, n, mode, seed);
}

// After a device error on `ws` (calls that differed): the next call of `op` is refused, then, once every
// rank has released the call's tensors `c`, the workspace prepared again gives the right m x n exchange;
// then it is released.
void refused_then_right_when_prepared_again(Context& ctx, Op op, const Tensor& out, const Tensor& in, Workspace& ws,
                                            OpCall& c, int64_t m, int64_t n, uint64_t seed) {
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { call(ctx, op, out, in, ws); })
                .rfind(detail::str_cat(op_name(op), ": a device error"), 0),
            0u);
  ctx.barrier();
  c.out.release();
  c.in.release();
  check_exchange(ctx, op, ws, m, n, Mode{0, true, false, "prepared again"}, seed);
  release(ctx, ws);
}

// big_heap, with waits that give up after `timeout`: for the tests whose calls are meant to time out.
ContextOptions big_heap_timing_out(int world, std::chrono::milliseconds timeout) {
  ContextOptions o = big_heap(world);
  o.device_timeout = timeout;
  return o;
}

// A workspace prepared for a 1x1 block, then a call and a preamble for a larger block: both raise the
// exact message, and nothing is allocated.
void expect_too_small(Context& ctx, Op op, int64_t m, int64_t n, const std::string& message, int64_t small_m = 1,
                      int64_t small_n = 1) {
  SCOPED_TRACE(op_name(op));
  OpCall small = make_call(ctx, op, small_m, small_n), large = make_call(ctx, op, m, n);
  Workspace ws;
  preamble(ctx, op, small.out.view, small.in.view, ws);
  const uint64_t before = ctx.allocation_count();
  try {
    call(ctx, op, large.out.view, large.in.view, ws);
    ADD_FAILURE() << op_name(op) << " ran with a workspace prepared for a " << small_m << "x" << small_n << " block on "
                  << m << "x" << n;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
  try {
    preamble(ctx, op, large.out.view, large.in.view, ws);
    ADD_FAILURE() << "the preamble accepted a workspace prepared for a " << small_m << "x" << small_n << " block for "
                  << m << "x" << n;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
  EXPECT_EQ(ctx.allocation_count(), before);
  ctx.barrier();  // every rank raised; allocation sequences still agree
  release(ctx, ws);
  for (OpCall* c : {&large, &small}) {
    c->out.release();
    c->in.release();
  }
}

TEST_P(Collective, WorkspaceTooSmallForStagingIsRejected) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "one rank needs no staging";
  test::run_ranks(GetParam(), [](Context& ctx) {
    const size_t world = ctx.world_size();
    // 1x1000 fp32, 4000 bytes. Every op takes the LL path for blocks this small (broadcast too, since
    // 2026-12-06; before, one chunk in a 4096-byte slot): 2 parities x W sources x (a header line and 500 lines)
    // of 16 bytes, rounded up to 256 bytes (1x1: a header and one line each).
    auto round256 = [](size_t b) { return (b + 255) / 256 * 256; };
    for (Op op : kOps) {
      const size_t have = round256(2 * world * (1 + 1) * 16);
      const size_t need = round256(2 * world * (1 + 500) * 16);
      expect_too_small(ctx, op, 1, 1000,
                       "Staging buffer too small: have " + std::to_string(have) + " bytes but need " +
                           std::to_string(need) +
                           ". Pre-allocate workspace with the largest tensor and block sizes you intend to use, or "
                           "reserve it for all of your calls first (iris::ccl::reserve_workspace).");
    }
  }, big_heap(GetParam().world));
}

TEST_P(Collective, WorkspaceTooSmallForFlagsIsRejected) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "one rank needs no flags";
  test::run_ranks(GetParam(), [](Context& ctx) {
    const size_t peers = ctx.world_size() - 1;
    // 64x1000 fp32: 256000 bytes in 8 KiB chunks = 32 chunks. The workspace is prepared for 17x1000
    // (68000 bytes: 9 chunks, past the blocks the LL exchanges take, so it has flags). Flags are
    // checked first. broadcast's flags are a done word per rank, then one per chunk.
    for (Op op : kOps) {
      const size_t per_chunk = op == Op::kBroadcast ? 1 : 2 * peers;
      const size_t fixed = op == Op::kBroadcast ? peers + 1 : 0;
      expect_too_small(ctx, op, 64, 1000,
                       "Flags array too small: have " + std::to_string(fixed + per_chunk * 9) + " but need " +
                           std::to_string(fixed + per_chunk * 32) +
                           ". Pre-allocate workspace with the smallest block sizes you intend to use.",
                       17, 1000);
    }
  }, big_heap(GetParam().world));
}

TEST_P(Collective, UnpreparedOrForeignWorkspaceIsRejected) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    for (Op op : kOps) {
      OpCall c = make_call(ctx, op, 4, 4);
      Workspace ws;
      try {
        call(ctx, op, c.out.view, c.in.view, ws);
        ADD_FAILURE() << op_name(op) << " ran without a preamble";
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), std::string(op_name(op)) + ": the workspace was never prepared; call " +
                                             op_name(op) +
                                             "_preamble with the same arguments and this workspace first (on every "
                                             "rank).");
      }
      // Prepared for another collective.
      const Op other = op == Op::kAllGather ? Op::kAllToAll : Op::kAllGather;
      OpCall o = make_call(ctx, other, 4, 4);
      preamble(ctx, other, o.out.view, o.in.view, ws);
      try {
        call(ctx, op, c.out.view, c.in.view, ws);
        ADD_FAILURE() << op_name(op) << " ran with a workspace prepared for " << op_name(other);
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), std::string(op_name(op)) + ": the workspace was last prepared for " +
                                             op_name(other) + "; call " + op_name(op) +
                                             "_preamble with it first (on every rank), or give " + op_name(op) +
                                             " a workspace of its own.");
      }
      ctx.barrier();
      release(ctx, ws);
      for (OpCall* t : {&o, &c}) {
        t->out.release();
        t->in.release();
      }
    }
  }, big_heap(GetParam().world));
}

// A preamble allocates, zeroes and synchronizes the context's stream, which a CUDA graph cannot capture (the
// failed call would also end the capture): while ctx.stream() is being captured every op's preamble raises,
// on every rank, naming it, and the capture goes on. A workspace whose arrays are no longer live on this
// context's heap (freed behind its back, or from another Context) is refused by every op before launch.
TEST_P(Collective, PreambleUnderCaptureAndWorkspaceOffTheHeapAreRefused) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        for (Op op : kOps) {
          OpCall c = make_call(ctx, op, 4, 4);
          Workspace ws;
          IRIS_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeRelaxed));
          EXPECT_EQ(
              test::error_text<std::invalid_argument>([&] { preamble(ctx, op, c.out.view, c.in.view, ws); }),
              std::string(op_name(op)) +
                  "_preamble: the context's stream is being captured into a CUDA graph; call the preamble "
                  "(collective: it allocates, zeroes and synchronizes) before the capture begins, and capture the "
                  "calls only.");
          cudaGraph_t graph = nullptr;
          EXPECT_EQ(cudaStreamEndCapture(ctx.stream(), &graph), cudaSuccess) << "the capture was not ended by it";
          if (graph != nullptr) IRIS_CUDA_CHECK(cudaGraphDestroy(graph));
          EXPECT_FALSE(ws.prepared());
          // A reservation too (before 2026-12-04 it failed with a raw CUDA error, which ended the capture).
          IRIS_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeRelaxed));
          ccl::WorkspaceNeeds needs;
          needs.flags = 64;
          EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ccl::reserve_workspace(ctx, ws, needs); }),
                    "reserve_workspace: the context's stream is being captured into a CUDA graph; reserve the "
                    "workspace (collective: it allocates, zeroes and synchronizes) before the capture begins, and "
                    "capture the calls only.");
          graph = nullptr;
          EXPECT_EQ(cudaStreamEndCapture(ctx.stream(), &graph), cudaSuccess) << "the capture was not ended by it";
          if (graph != nullptr) IRIS_CUDA_CHECK(cudaGraphDestroy(graph));
          EXPECT_EQ(ws.flag_capacity(), 0u);
          preamble(ctx, op, c.out.view, c.in.view, ws);
          ctx.barrier();
          // Every array freed behind the workspace's back (collective, the same order on every rank).
          for (const void* a : {static_cast<const void*>(ws.locks()), static_cast<const void*>(ws.flags()),
                                static_cast<const void*>(ws.staging()), static_cast<const void*>(ws.block_state())})
            if (a != nullptr) ctx.free(const_cast<void*>(a));
          EXPECT_EQ(
              test::error_text<std::invalid_argument>([&] { call(ctx, op, c.out.view, c.in.view, ws); }),
              std::string(op_name(op)) +
                  ": the workspace's arrays are not on this context's heap (it was prepared with another Context, "
                  "or with one since destroyed); call " +
                  op_name(op) + "_preamble with a workspace of this context (on every rank).");
          ctx.barrier();
          c.out.release();
          c.in.release();
        }
      },
      big_heap(GetParam().world));
}

// A context created after another was destroyed may map its heap at the destroyed one's addresses (the
// driver hands the same range out again), where a workspace left holding the destroyed heap's arrays
// points inside the new context's own allocations. Before 2026-12-06 only "is it a live allocation" was
// asked: the preamble kept the arrays as its own and zeroed them, and the kernels wrote locks into the
// new context's data. The heap's id, recorded with the arrays, refuses them: in the preamble, the call and
// release(), which frees nothing of the new heap.
TEST(CollectiveThreads, AWorkspaceOfADestroyedContextIsRefusedByOneAtItsAddresses) {
  IRIS_TEST_REQUIRE_GPUS(1);
  ContextOptions o;
  o.device = 0;
  o.heap_size = size_t{64} << 20;
  const int64_t m = 64, n = 256;
  const size_t bytes = static_cast<size_t>(m * n) * sizeof(float);
  Config cfg;
  cfg.all_reduce_variant = ccl::AllReduceVariant::kSpinlock;
  Workspace ws;
  const char* first_base = nullptr;
  {
    Context first(make_thread_bootstraps(1, std::chrono::seconds(30))[0], o);
    first_base = first.heap_base(0);
    void* in = first.alloc(bytes);
    void* out = first.alloc(bytes);
    ccl::all_reduce_preamble(first, Tensor::matrix(out, DType::kFloat32, m, n, n),
                             Tensor::matrix(in, DType::kFloat32, m, n, n), cfg, ws);
    ASSERT_NE(ws.locks(), nullptr);
  }  // destroyed with the workspace's arrays on its heap
  Context second(make_thread_bootstraps(1, std::chrono::seconds(30))[0], o);
  // One allocation over the first 8 MiB, where the first context placed its buffers and the arrays.
  auto* data = static_cast<unsigned char*>(second.alloc(size_t{8} << 20));
  IRIS_CUDA_CHECK(cudaMemset(data, 0x5A, size_t{8} << 20));
  const bool same_addresses = second.heap_base(0) == first_base;
  if (same_addresses) EXPECT_TRUE(second.is_symmetric(ws.locks())) << "the stale arrays lie in the new allocation";
  std::printf("[ note ] the second context's heap %s the first's addresses\n", same_addresses ? "reuses" : "avoids");
  const Tensor in = Tensor::matrix(data, DType::kFloat32, m, n, n);
  const Tensor out = Tensor::matrix(data + bytes, DType::kFloat32, m, n, n);
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ccl::all_reduce_preamble(second, out, in, cfg, ws); }),
            "all_reduce: the workspace's arrays are not on this context's heap (it was prepared with another "
            "Context, or with one since destroyed); give this context a workspace of its own (on every rank).");
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ccl::all_reduce(second, out, in, cfg, ws); }),
            "all_reduce: the workspace's arrays are not on this context's heap (it was prepared with another "
            "Context, or with one since destroyed); call all_reduce_preamble with a workspace of this context (on "
            "every rank).");
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { release(second, ws); }),
            "release: the workspace's arrays are not on this context's heap (it was prepared with another Context, "
            "or with one since destroyed); nothing was freed. Release it with the context that prepared it, or, "
            "when that context is destroyed (its heap went with it), assign it a fresh Workspace.");
  EXPECT_TRUE(second.is_symmetric(data)) << "release() freed nothing of this heap";
  std::vector<unsigned char> host(size_t{8} << 20);
  IRIS_CUDA_CHECK(cudaMemcpy(host.data(), data, host.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::count(host.begin(), host.end(), 0x5A), static_cast<std::ptrdiff_t>(host.size()))
      << "no byte of the new context's data changed";
  ws = Workspace();  // what the release refusal says to do
  ccl::all_reduce_preamble(second, out, in, cfg, ws);
  ccl::all_reduce(second, out, in, cfg, ws);
  IRIS_CUDA_CHECK(cudaStreamSynchronize(second.stream()));
  release(second, ws);
  second.free(data);
}

// A view that lies in the heap must lie within one live allocation of this rank's heap. An all_gather
// output allocated one row short of what it is described as would have its last row written into the next
// heap object (here: the input); a peer's buffer (translate) would be written in place of this rank's; a
// freed block would be written under whatever is allocated there next. Every rank raises, in the preamble
// (which allocates nothing) and at the call.
TEST_P(Collective, ViewsOnTheHeapMustLieWithinOneLiveAllocationOfThisRank) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int w = ctx.world_size();
        const int64_t m = 4, n = 64;
        auto* short_out = ctx.empty<float>((w * m - 1) * n);
        auto* in = ctx.empty<float>(m * n);
        auto* gone = ctx.empty<float>(m * n);
        const size_t gone_offset = ctx.offset_of(gone);
        ctx.free(gone);
        const Tensor out = Tensor::matrix(short_out, DType::kFloat32, w * m, n);
        const Tensor mine = Tensor::matrix(in, DType::kFloat32, m, n);
        auto error = [](auto&& fn) { return test::error_text<std::invalid_argument>(fn); };
        Workspace ws;
        const std::string past = "all_gather: output " + std::to_string(w * m) +
                                 "x64 float32 runs 256 bytes past the end "
                                 "of its heap allocation (" +
                                 std::to_string((w * m - 1) * n * 4) + " bytes at heap offset " +
                                 std::to_string(ctx.offset_of(short_out)) +
                                 "); pass a view that lies within one allocation.";
        const size_t heap_before = ctx.heap_bytes_in_use();
        EXPECT_EQ(error([&] { ccl::all_gather_preamble(ctx, out, mine, Config{}, ws); }), past);
        EXPECT_EQ(ctx.heap_bytes_in_use(), heap_before) << "nothing allocated";
        EXPECT_EQ(error([&] { ccl::all_gather(ctx, out, mine, Config{}, ws); }), past);
        const Tensor freed = Tensor::matrix(gone, DType::kFloat32, m, n);
        EXPECT_EQ(error([&] { ccl::broadcast(ctx, freed, mine, 0, Config{}, ws); }),
                  "broadcast: output 4x64 float32 lies in this rank's heap at offset " + std::to_string(gone_offset) +
                      " but in no live allocation; pass a buffer that is allocated (was it freed?).");
        if (w > 1) {
          const int peer = (ctx.rank() + 1) % w;
          const Tensor theirs = Tensor::matrix(ctx.translate(in, peer), DType::kFloat32, m, n);
          EXPECT_EQ(error([&] { ccl::all_reduce_preamble(ctx, mine, theirs, Config{}, ws); }),
                    "all_reduce: input 4x64 float32 lies in rank " + std::to_string(peer) + "'s heap, not in rank " +
                        std::to_string(ctx.rank()) +
                        "'s; pass this rank's own buffer (the kernels reach peers' memory themselves).");
        }
        // A view that starts below the heap's window (rank 0's heap in this rank's address space) and runs
        // into it: accepted before 2026-12-05, as a view off the heap.
        const char* window = reinterpret_cast<const char*>(ctx.translate(in, 0)) - ctx.offset_of(in);
        const Tensor straddling = Tensor::matrix(const_cast<char*>(window) - 256, DType::kFloat32, 1, 128);
        EXPECT_EQ(error([&] { ccl::all_reduce_preamble(ctx, straddling, straddling, Config{}, ws); }),
                  "all_reduce: input 1x128 float32 starts 256 bytes below the symmetric heap and runs into it; pass a "
                  "view that lies within one allocation.");
        // The whole allocation, in place: accepted.
        const Tensor exact = Tensor::matrix(short_out, DType::kFloat32, w * m - 1, n);
        EXPECT_NO_THROW(ccl::all_reduce_preamble(ctx, exact, exact, Config{}, ws));
        EXPECT_NO_THROW(ccl::all_reduce(ctx, exact, exact, Config{}, ws));
        ctx.barrier();
        release(ctx, ws);
        ctx.free(in);
        ctx.free(short_out);
      },
      big_heap(GetParam().world));
}

// Buffers a kernel on this rank's device cannot reach (pageable host memory where the device has no pageable
// access, HMM or ATS) and a stream of another device are refused before anything is queued, naming the op
// and the buffer: in the kernel they would fault (a sticky error) or fail to launch, while the peers wait
// out their device timeouts. Each needs what this machine may lack: a device without pageable access, and a
// second GPU.
TEST_P(Collective, BuffersTheDeviceCannotReachAndAnotherDevicesStreamAreRefused) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (const std::string why = test::reach_refusals_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int w = ctx.world_size();
        const int64_t m = 4, n = 64;
        auto* out = ctx.empty<float>(w * m * n);
        auto* in = ctx.empty<float>(m * n);
        const Tensor all = Tensor::matrix(out, DType::kFloat32, w * m, n);
        const Tensor mine = Tensor::matrix(in, DType::kFloat32, m, n);
        auto error = [](auto&& fn) { return test::error_text<std::invalid_argument>(fn); };
        Workspace ws;
        if (!test::pageable_access(ctx.device())) {
          std::vector<float> host(static_cast<size_t>(m * n));
          const Tensor pageable = Tensor::matrix(host.data(), DType::kFloat32, m, n);
          const std::string tail = " 4x64 float32 " + test::pageable_memory_problem(ctx);
          EXPECT_EQ(error([&] { ccl::all_gather_preamble(ctx, all, pageable, Config{}, ws); }),
                    "all_gather: input" + tail);
          EXPECT_EQ(error([&] { ccl::all_reduce_preamble(ctx, pageable, mine, Config{}, ws); }),
                    "all_reduce: output" + tail);
        }
        if (test::other_device_stream_checkable()) {
          ccl::all_gather_preamble(ctx, all, mine, Config{}, ws);
          const test::OtherDeviceStream elsewhere(ctx.device());
          const uint64_t calls = ws.calls();
          EXPECT_EQ(error([&] { ccl::all_gather(ctx, all, mine, Config{}, ws, elsewhere.get()); }),
                    test::other_device_stream_error("all_gather", ctx, elsewhere.device()));
          EXPECT_EQ(ws.calls(), calls) << "nothing queued";
          ccl::all_gather(ctx, all, mine, Config{}, ws);  // the workspace still serves every rank
          ctx.synchronize();
        }
        ctx.barrier();
        release(ctx, ws);
        ctx.free(in);
        ctx.free(out);
      },
      big_heap(GetParam().world));
}

// ---- sizing ahead --------------------------------------------------------------------------------------

ccl::WorkspaceNeeds needs(Op op, const Tensor& out, const Tensor& in, const Config& cfg, int world) {
  switch (op) {
    case Op::kAllGather:
      return ccl::all_gather_needs(out, in, cfg, world);
    case Op::kReduceScatter:
      return ccl::reduce_scatter_needs(out, in, cfg, world);
    case Op::kAllToAll:
      return ccl::all_to_all_needs(out, in, cfg, world);
    case Op::kBroadcast:
      return ccl::broadcast_needs(out, in, 0, cfg, world);
  }
  return {};
}

Tensor without_data(Tensor t) {
  t.data = nullptr;
  return t;
}

// A fresh workspace prepared by `prepare` holds exactly `want`, and the heap grew by heap_bytes(want)
// (and, with heap guards, their bytes after each array).
void expect_preamble_allocates(Context& ctx, const ccl::WorkspaceNeeds& want,
                               const std::function<void(Workspace&)>& prepare, const std::string& what) {
  SCOPED_TRACE(what);
  Workspace ws;
  const size_t before = ctx.heap_bytes_in_use();
  prepare(ws);
  EXPECT_EQ(ctx.heap_bytes_in_use() - before, ccl::heap_bytes(want, ctx.heap_guard_bytes()));
  EXPECT_EQ(ws.lock_capacity(), want.locks);
  EXPECT_EQ(ws.flag_capacity(), want.flags);
  EXPECT_EQ(ws.staging_capacity(), want.staging_bytes);
  EXPECT_EQ(ws.block_state_capacity(), want.block_state);
  ctx.barrier();
  release(ctx, ws);
}

// The *_needs functions, given the call's shapes without data, say what its preamble then allocates on
// the heap: every all_reduce variant (auto at an LL size and past it), every other op at an LL size and
// past it, shapes of partial tiles and chunks.
TEST_P(Collective, NeedsSayWhatThePreambleAllocates) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int w = ctx.world_size();
        using ccl::AllReduceVariant;
        for (const Shape& s : {Shape{1, 4096}, Shape{1000, 333}, Shape{1, int64_t{1} << 20}}) {
          TestTensor t = TestTensor::make(ctx, DType::kBFloat16, s.m, s.n, s.n, false);
          for (AllReduceVariant v : {AllReduceVariant::kAuto, AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot,
                                     AllReduceVariant::kRing, AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock}) {
            const bool tiles =
                v == AllReduceVariant::kRing || v == AllReduceVariant::kAtomic || v == AllReduceVariant::kSpinlock;
            if (tiles && s.n > 4096) continue;  // 16384 tiles: a quarter GiB of ring slots, nothing new
            Config cfg;
            cfg.all_reduce_variant = v;
            const Tensor shape = without_data(t.view);
            expect_preamble_allocates(
                ctx, ccl::all_reduce_needs(shape, shape, cfg, w),
                [&](Workspace& ws) { ccl::all_reduce_preamble(ctx, t.view, t.view, cfg, ws); },
                std::string("all_reduce ") + ccl::variant_name(v) + " " + shape_name(DType::kBFloat16, s.m, s.n));
          }
          t.release();
        }
        for (Op op : kOps) {
          for (const Shape& s : {Shape{4, 4}, Shape{1000, 333}, Shape{64, 4096}}) {
            OpCall c = make_call(ctx, op, s.m, s.n);
            expect_preamble_allocates(
                ctx, needs(op, without_data(c.out.view), without_data(c.in.view), Config{}, w),
                [&](Workspace& ws) { preamble(ctx, op, c.out.view, c.in.view, ws); },
                std::string(op_name(op)) + " " + shape_name(DType::kFloat32, s.m, s.n));
            c.out.release();
            c.in.release();
          }
        }
      },
      big_heap(GetParam().world));
}

// Rank 1 passes another (self-consistent) shape: the preamble raises on every rank. Then rank 1 passes
// a call its own validation rejects: it raises that, and every other rank raises the mismatch.
TEST_P(Collective, ShapeThatDiffersOnOneRankMakesEveryRankRaise) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(GetParam(), [](Context& ctx) {
    const bool odd = ctx.rank() == 1;
    for (Op op : kOps) {
      SCOPED_TRACE(op_name(op));
      OpCall c = make_call(ctx, op, 4, 128);
      Tensor in = c.in.view, out = c.out.view;
      in.cols = out.cols = odd ? 96 : 128;
      Workspace ws;
      try {
        preamble(ctx, op, out, in, ws);
        ADD_FAILURE() << "rank " << ctx.rank() << " accepted mismatched shapes";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("Collective parameters differ across ranks"), std::string::npos)
            << e.what();
      }
      EXPECT_FALSE(ws.prepared());
      // Rank 1's output has one row too many (broadcast: its root is out of range).
      Tensor bad_out = c.out.view;
      if (odd) bad_out.rows -= 1;
      try {
        if (op == Op::kBroadcast)
          ccl::broadcast_preamble(ctx, c.out.view, c.in.view, odd ? ctx.world_size() : 0, Config{}, ws);
        else
          preamble(ctx, op, bad_out, c.in.view, ws);
        ADD_FAILURE() << "rank " << ctx.rank() << " accepted an invalid call";
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        if (odd)
          EXPECT_EQ(what.rfind(std::string(op_name(op)) + ": ", 0), 0u) << what;
        else
          EXPECT_NE(what.find("Collective parameters differ across ranks"), std::string::npos) << what;
      }
      EXPECT_FALSE(ws.prepared());
      ctx.barrier();
      c.out.release();
      c.in.release();
    }
  }, big_heap(GetParam().world));
}

// Without IRIS_CHECK_CALLS a call after its preamble is not compared on the host, and the LL exchanges
// have no fence. Here each rank calls with blocks of its own size ((rank + 1) x 100 fp32, all LL, on a
// workspace prepared for 8 x 100; 50 lines a row, so that the lines a larger call waits for in vain start
// inside a warp whose other lanes finish, and one warp reaches end_call's barrier from two places:
// sync_block_divergent). Before 2026-12-05 the rank of the smaller call took the first lines of
// its peer's larger call as its own and returned without an error, and the peer waited for lines that
// never came until its device timeout. Now every rank finds its peer's call key in the peer's header line
// and raises InvalidArgument at synchronize(), naming the peer and both keys and saying that its output
// is not valid; the workspace is refused until prepared again, and prepared again it is right.
TEST_P(Collective, LLCallsThatDifferAfterThePreambleRaiseOnEveryRankFromTheDevice) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses these calls before launch";
        if (std::getenv("IRIS_LL_MAX_BYTES") != nullptr) GTEST_SKIP() << "IRIS_LL_MAX_BYTES may make them chunked";
        const int w = ctx.world_size(), me = ctx.rank();
        const int64_t n = 100;
        auto key = [](int mode, int64_t numel) {  // ll_call_key of an fp32 exchange (dtype 0, reduction sum: 0)
          char text[32];
          std::snprintf(text, sizeof(text), "%llx", static_cast<unsigned long long>(uint64_t(mode) << 60 | numel));
          return std::string(text);
        };
        uint64_t seed = 1400;
        for (Op op : {Op::kAllGather, Op::kReduceScatter, Op::kAllToAll}) {
          SCOPED_TRACE(op_name(op));
          const int mode = op == Op::kReduceScatter ? 2 : op == Op::kAllGather ? 3 : 4;  // LLMode + 1
          OpCall c = make_call(ctx, op, 8, n);
          Workspace ws;
          preamble(ctx, op, c.out.view, c.in.view, ws);
          const uint64_t errors = ctx.device_timeouts();
          const int64_t m = me + 1;
          Tensor in = c.in.view, out = c.out.view;
          in.rows = op == Op::kAllGather ? m : w * m;
          out.rows = op == Op::kReduceScatter ? m : w * m;
          c.in.upload(ctx.stream(), test::make_input(DType::kFloat32, c.in.view.rows, n, n, seed++, me));
          call(ctx, op, out, in, ws);
          const std::string err = test::error_text<std::invalid_argument>([&] { ctx.synchronize(); });
          const std::string head = detail::str_cat("iris device error in ", op_name(op), " on rank ", me, ": rank ");
          EXPECT_EQ(err.rfind(head, 0), 0u) << err;
          // The rank named is the first whose key differs (every peer's does): rank 0 names 1, the others 0.
          const int named = me == 0 ? 1 : 0;
          EXPECT_NE(err.find(detail::str_cat(" on rank ", me, ": rank ", named,
                                             " made another call on this workspace (its call key is ",
                                             key(mode, n * (named + 1)), ", this rank's ", key(mode, n * m),
                                             "; hex digits from the top: exchange, dtype, reduction and a 0 "
                                             "(broadcast: two of the root), then 12 of elements per block), so the "
                                             "ranks' calls differ in shape, dtype, reduction or root. This rank's "
                                             "output of that call is not valid")),
                    std::string::npos)
              << err;
          EXPECT_EQ(ctx.device_timeouts(), errors + 1);
          refused_then_right_when_prepared_again(ctx, op, out, in, ws, c, 8, n, seed++);
        }
      },
      big_heap(GetParam().world));
}

// Calls whose difference no kernel sees: rank 0's blocks are small enough for the LL exchange (1 x 100 fp32)
// while its peers' are not (200 x 100, chunked), on a workspace prepared for the larger. The LL rank waits for
// header lines its peers never write, they for flags it never sets. Before 2026-12-05 every rank raised a
// TimeoutError that said only that a peer never signalled; now each wait that gives up (500 ms here) reads its
// peers' call words, finds a peer in the same call (by count) with another call key, and raises a
// TimeoutError (a wait past its bound, DESIGN.md; InvalidArgument before 2026-12-05's second session) naming
// that peer and saying that the call's output is not valid. Rank 0 names rank 1, the others rank 0 (the
// first peer whose key differs). The workspace is refused until prepared again. broadcast (from rank 0, LL since
// 2026-12-06) too: rank 0's LL call waits for its peers' header lines (after a layout fence, its path having
// changed, which they never join), they for its chunk flags.
TEST_P(Collective, CallsThatTakeDifferentProtocolsRaiseOnEveryRankWhenTheirWaitsGiveUp) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  const ContextOptions options = big_heap_timing_out(GetParam().world, std::chrono::milliseconds(500));
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses these calls before launch";
        if (std::getenv("IRIS_LL_MAX_BYTES") != nullptr) GTEST_SKIP() << "IRIS_LL_MAX_BYTES may change the protocols";
        const int w = ctx.world_size(), me = ctx.rank();
        const int64_t n = 100, big = 200;
        uint64_t seed = 1500;
        for (Op op : kOps) {
          SCOPED_TRACE(op_name(op));
          OpCall c = make_call(ctx, op, big, n);
          Workspace ws;
          preamble(ctx, op, c.out.view, c.in.view, ws);
          const Mode heap{0, true, false, "before the calls that differ"};
          check_exchange(ctx, op, ws, big, n, heap, seed++);
          const uint64_t errors = ctx.device_timeouts();
          const int64_t m = me == 0 ? 1 : big;
          Tensor in = c.in.view, out = c.out.view;
          in.rows = op == Op::kAllGather || op == Op::kBroadcast ? m : w * m;
          out.rows = op == Op::kReduceScatter || op == Op::kBroadcast ? m : w * m;
          c.in.upload(ctx.stream(), test::make_input(DType::kFloat32, c.in.view.rows, n, n, seed++, me));
          call(ctx, op, out, in, ws);
          const std::string err = test::error_text<iris::TimeoutError>([&] { ctx.synchronize(); });
          // broadcast's chunked waits name themselves: "broadcast (owner waits for the root)", say.
          test::expect_peer_in_another_call_error(
              err,
              op == Op::kBroadcast && me != 0
                  ? std::string("iris device timeout in broadcast (")
                  : detail::str_cat("iris device timeout in ", op_name(op), " on rank ", me, " (block "),
              me == 0 ? 1 : 0);
          EXPECT_NE(err.find(detail::str_cat(" on rank ", me, " (block ")), std::string::npos) << err;
          EXPECT_EQ(ctx.device_timeouts(), errors + 1);
          refused_then_right_when_prepared_again(ctx, op, out, in, ws, c, big, n, seed++);
        }
      },
      options);
}

// Calls that differ in a way that leaves every wait of the chunked exchanges satisfied, after a preamble
// for bf16 blocks of 200 x 400 (160 KB: chunked for every exchange): the last rank passes fp16 of the same
// bytes, or reduces with max where its peers sum, or (all_gather, two ranks) passes half the rows. Before
// 2026-12-06 the first two finished without an error on every rank with wrong results (fp16 bits read as
// bf16, sums and maxima mixed), and in the third the rank of the smaller call took its peer's first chunks
// as its own and returned while its peer timed out. Now the flags carry a tag of each call's key beside the
// epoch (collective_kernels.hpp, tagged_epoch): every rank that waits for a flag of the other call raises
// InvalidArgument at synchronize(), naming the rank whose call differs, and the workspace is refused until
// prepared again, and then right. The others name the last rank; the last rank names a peer (rank 0 at two
// ranks). broadcast (from rank 0, two ranks): rank 1 raises so; the root waits for its peers' ends (since
// 2026-12-06; before, it waited for no flag and raised nothing), which rank 1's call, failed, never signals: its
// wait gives up and raises a TimeoutError naming rank 1, in the same call with another key.
// The rank named is the writer of the flag (tag_writer), which at more ranks the broadcast's forwarding and
// a smaller call's flag layout make a matter of timing: those cases run at two ranks only.
TEST_P(Collective, ChunkedCallsThatDifferAfterThePreambleRaiseOnTheRanksThatWaitForThem) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  // A wait for a flag that never comes (two-rank cases excepted, none should) gives up after 2 s.
  const ContextOptions options = big_heap_timing_out(GetParam().world, std::chrono::milliseconds(2000));
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses these calls before launch";
        if (std::getenv("IRIS_LL_MAX_BYTES") != nullptr) GTEST_SKIP() << "IRIS_LL_MAX_BYTES may make them LL";
        const int w = ctx.world_size(), me = ctx.rank(), culprit = w - 1;
        const int64_t m = 200, n = 400;
        struct Case {
          Op op;
          const char* how;  // "fp16", "max", "half the rows"
        };
        const Case cases[] = {{Op::kAllGather, "fp16"},    {Op::kAllToAll, "fp16"},  {Op::kReduceScatter, "fp16"},
                              {Op::kReduceScatter, "max"}, {Op::kBroadcast, "fp16"}, {Op::kAllGather, "half the rows"}};
        uint64_t seed = 1700;
        for (const Case& k : cases) {
          const std::string how = k.how;
          if (w > 2 && (k.op == Op::kBroadcast || how == "half the rows")) continue;
          SCOPED_TRACE(detail::str_cat(op_name(k.op), ", the last rank's call: ", how));
          OpCall c = make_call(ctx, k.op, m, n, DType::kBFloat16);
          Workspace ws;
          preamble(ctx, k.op, c.out.view, c.in.view, ws);
          // Two right calls first on every rank: the flags of both parities then hold their tags, and the call
          // that differs (call 3, parity 1) finds call 1's words, of an older epoch, where it waits.
          c.in.upload(ctx.stream(), test::make_input(DType::kBFloat16, c.in.view.rows, n, n, seed++, me));
          call(ctx, k.op, c.out.view, c.in.view, ws);
          call(ctx, k.op, c.out.view, c.in.view, ws);
          ctx.synchronize();
          const uint64_t errors = ctx.device_timeouts();
          Tensor in = c.in.view, out = c.out.view;
          ReduceOp reduce = ReduceOp::kSum;
          if (me == culprit) {
            if (how == "fp16") in.dtype = out.dtype = DType::kFloat16;
            if (how == "max") reduce = ReduceOp::kMax;
            if (how == "half the rows") {
              in.rows /= 2;
              out.rows /= 2;
            }
          }
          c.in.upload(ctx.stream(), test::make_input(DType::kBFloat16, c.in.view.rows, n, n, seed++, me));
          c.out.poison(ctx.stream());
          if (k.op == Op::kReduceScatter)
            ccl::reduce_scatter(ctx, out, in, Config{}, ws, nullptr, reduce);
          else
            call(ctx, k.op, out, in, ws);
          if (k.op == Op::kBroadcast && me == 0) {
            const std::string err = test::error_text<TimeoutError>([&] { ctx.synchronize(); });
            test::expect_peer_in_another_call_error(
                err, "iris device timeout in broadcast (root waits for its peers' ends) on rank 0 (block 0)", 1);
            EXPECT_EQ(ctx.device_timeouts(), errors + 1);
          } else {
            const std::string err = test::error_text<std::invalid_argument>([&] { ctx.synchronize(); });
            // broadcast's op names the wait; at two ranks rank 1 owns every chunk and waits for the root only.
            const std::string op =
                k.op != Op::kBroadcast ? std::string(op_name(k.op)) : "broadcast (owner waits for the root)";
            test::expect_call_tag_error_naming_the_culprit(
                err, detail::str_cat("iris device error in ", op, " on rank ", me, ": rank "), me, w);
            EXPECT_NE(err.find("This rank's output of that call is not valid: the exchange stopped before it read "
                               "rank "),
                      std::string::npos)
                << err;
            EXPECT_EQ(ctx.device_timeouts(), errors + 1);
          }
          // Refused, then, prepared again (fp32 blocks of the same bytes), right.
          refused_then_right_when_prepared_again(ctx, k.op, out, in, ws, c, m / 2, n, seed++);
        }
      },
      options);
}

// A call one rank did not make: rank 1's second call has no elements, which launches nothing (an empty
// call is a no-op, as in NCCL, and must be empty on every rank). Its peers' second call waits for rank 1
// until the device timeout (500 ms here); the wait that gives up reads rank 1's call words and raises a
// TimeoutError saying that rank 1 has not started this call, with the call counts (before 2026-12-05: only
// that a peer never signalled). Rank 1 raises nothing. The exchanges, LL and chunked, and broadcast from rank 0,
// whose root waits for its peers' ends (before 2026-12-06 it waited only for their previous call, and at two
// ranks raised nothing).
TEST_P(Collective, ACallThatOneRankDidNotMakeTimesOutNamingThatRank) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  const ContextOptions options = big_heap_timing_out(GetParam().world, std::chrono::milliseconds(500));
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses these calls before launch";
        const int me = ctx.rank();
        uint64_t seed = 1600;
        for (Op op : kOps) {
          for (const int64_t m : {int64_t{1}, int64_t{200}}) {  // LL and chunked (broadcast too)
            SCOPED_TRACE(detail::str_cat(op_name(op), " ", m, " rows"));
            OpCall c = make_call(ctx, op, m, 100);
            Workspace ws;
            preamble(ctx, op, c.out.view, c.in.view, ws);
            c.in.upload(ctx.stream(), test::make_input(DType::kFloat32, c.in.view.rows, 100, 100, seed++, me));
            call(ctx, op, c.out.view, c.in.view, ws);  // call 1 on every rank
            ctx.synchronize();
            Tensor in = c.in.view, out = c.out.view;
            if (me == 1) in.rows = out.rows = 0;
            call(ctx, op, out, in, ws);  // call 2: nothing launched on rank 1
            if (me == 1) {
              EXPECT_NO_THROW(ctx.synchronize());
            } else {
              const std::string err = test::error_text<TimeoutError>([&] { ctx.synchronize(); });
              EXPECT_EQ(err.rfind("iris device timeout in ", 0), 0u) << err;
              EXPECT_NE(err.find(detail::str_cat(" on rank ", me, " (block ")), std::string::npos) << err;
              EXPECT_NE(err.find(", and rank 1 has not started this call: this rank is in call 2 on this workspace, "
                                 "and the latest call rank 1 started there is call 1 (counted since the workspace's "
                                 "arrays were zeroed). Rank 1 made fewer calls on this workspace (a call without "
                                 "elements launches nothing: it must be so on every rank)"),
                        std::string::npos)
                  << err;
            }
            ctx.barrier();
            release(ctx, ws);
            c.out.release();
            c.in.release();
          }
        }
      },
      options);
}

// Ranks that each pass themselves as broadcast's root, on a workspace prepared for root 0 (the preamble compared
// that call; without IRIS_CHECK_CALLS the calls after it are not compared on the host). Before 2026-12-06 the root
// waited for no flag, and each rank returned its own input as the broadcast's without an error. Now, chunked (200 x
// 100 fp32, 80 KB: ten chunks), every rank sends its chunks and waits for its peers' done words, which no rank
// sets, being a root itself: every rank's wait gives up (500 ms here), finds its peers in the same call with
// another key (the root is part of it) and raises a TimeoutError naming one. LL (1 x 100), every rank reads its
// peers' header lines, whose keys carry another root: InvalidArgument at once, naming one. Rank 0 names rank 1,
// the others rank 0. Then the workspace is refused, and right once prepared again. At every world size.
TEST_P(Collective, RanksThatEachPassThemselvesAsTheBroadcastRootRaiseOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  const ContextOptions options = big_heap_timing_out(GetParam().world, std::chrono::milliseconds(500));
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses these calls before launch";
        const int me = ctx.rank();
        const int64_t n = 100;
        uint64_t seed = 1900;
        for (const int64_t m : {int64_t{1}, int64_t{200}}) {
          SCOPED_TRACE(detail::str_cat(m, " rows"));
          OpCall c = make_call(ctx, Op::kBroadcast, m, n);
          Workspace ws;
          preamble(ctx, Op::kBroadcast, c.out.view, c.in.view, ws);  // root 0 on every rank
          c.in.upload(ctx.stream(), test::make_input(DType::kFloat32, m, n, n, seed++, me));
          call(ctx, Op::kBroadcast, c.out.view, c.in.view, ws);  // call 1, from rank 0
          ctx.synchronize();
          const uint64_t errors = ctx.device_timeouts();
          ccl::broadcast(ctx, c.out.view, c.in.view, me, Config{}, ws);  // call 2: every rank its own root
          const int named = me == 0 ? 1 : 0;
          if (m == 1) {
            const std::string err = test::error_text<std::invalid_argument>([&] { ctx.synchronize(); });
            // The LL key (ll_call_key): broadcast (5), float32 (0), the root in two digits, 100 elements.
            auto key = [](int root) {
              char text[32];
              std::snprintf(text, sizeof(text), "%llx",
                            static_cast<unsigned long long>(uint64_t{5} << 60 | uint64_t(root) << 48 | 100));
              return std::string(text);
            };
            EXPECT_EQ(err.rfind(detail::str_cat("iris device error in broadcast on rank ", me, ": rank ", named,
                                                " made another call on this workspace (its call key is ", key(named),
                                                ", this rank's ", key(me), "; "),
                                0),
                      0u)
                << err;
          } else {
            const std::string err = test::error_text<TimeoutError>([&] { ctx.synchronize(); });
            test::expect_peer_in_another_call_error(
                err,
                detail::str_cat("iris device timeout in broadcast (root waits for its peers' ends) on rank ", me,
                                " (block 0)"),
                named);
          }
          EXPECT_EQ(ctx.device_timeouts(), errors + 1);
          refused_then_right_when_prepared_again(ctx, Op::kBroadcast, c.out.view, c.in.view, ws, c, m, n, seed++);
        }
      },
      options);
}

// The output of the exchange `op` (not broadcast) of contiguous m x n fp32 blocks whose inputs came from `seed` on
// every rank, against its reference (as check_all_gather and its siblings verify theirs).
void verify_exchange(Context& ctx, Op op, const std::vector<char>& host, int64_t m, int64_t n, uint64_t seed,
                     const std::string& what) {
  const DType dt = DType::kFloat32;
  const int world = ctx.world_size(), me = ctx.rank();
  if (op == Op::kAllGather)
    verify(
        host, dt, world * m, n, n,
        [&](int64_t r, int64_t c, char* dst) { input_bytes(dt, seed, static_cast<int>(r / m), (r % m) * n + c, dst); },
        false, what);
  if (op == Op::kReduceScatter)
    verify(
        host, dt, m, n, n,
        [&](int64_t r, int64_t c, char* dst) {
          reduced_bytes(dt, ReduceOp::kSum, seed, world, (me * m + r) * n + c, dst);
        },
        false, what);
  if (op == Op::kAllToAll)
    verify(
        host, dt, world * m, n, n,
        [&](int64_t r, int64_t c, char* dst) {
          input_bytes(dt, seed, static_cast<int>(r / m), (me * m + r % m) * n + c, dst);
        },
        false, what);
  // Broadcast from rank 0 (call()'s root). Before 2026-12-06 it had no branch here, so the check of rank 1's
  // first broadcast checked nothing (a test audit's finding).
  if (op == Op::kBroadcast)
    verify(
        host, dt, m, n, n, [&](int64_t r, int64_t c, char* dst) { input_bytes(dt, seed, 0, r * n + c, dst); }, false,
        what);
  if (op != Op::kAllGather && op != Op::kReduceScatter && op != Op::kAllToAll && op != Op::kBroadcast)
    ADD_FAILURE() << "verify_exchange has no check of " << op_name(op);
}

// A rank whose call failed skips the calls it queued behind it on the workspace, and its peers name it. Every
// rank but rank 1 queues three calls, and rank 1 none at first (a call without elements launches nothing):
// their first call waits for rank 1 until the device timeout (500 ms here) and gives up, naming rank 1 as not
// started; their second and third return at once (the workspace's stop word, ccl_common.cuh: begin_call) and
// leave their outputs poisoned. Then rank 1 makes two calls: its first meets their first, whose data they
// pushed before they gave up, and is right; its second waits for calls they skipped and raises a TimeoutError
// naming rank 0, stopped at its call 1. Before 2026-12-06 the queued calls ran on after the failure (each wait
// gives up at its first error poll, after the pushes before it) and pushed their data into rank 1's staging,
// two calls ahead: rank 1's first call took rank 0's third call's data for its first's (the chunked exchanges:
// a wrong result and no error) or timed out (LL). The workspace is refused until prepared again, and then right.
TEST_P(Collective, CallsQueuedBehindAFailedCallSkipAndTheirPeersNameTheRankThatStopped) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks: one makes a call the others do not";
  const ContextOptions options = big_heap_timing_out(GetParam().world, std::chrono::milliseconds(500));
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses these calls before launch";
        const int me = ctx.rank();
        const int64_t n = 100;
        uint64_t seed = 1700;
        for (Op op : kOps) {
          for (const int64_t m : {int64_t{1}, int64_t{200}}) {  // LL and chunked (broadcast too)
            const std::string what = detail::str_cat(op_name(op), " ", m, " rows");
            SCOPED_TRACE(what);
            std::vector<OpCall> calls(3);
            std::vector<uint64_t> seeds;
            for (OpCall& c : calls) {
              c = make_call(ctx, op, m, n);
              seeds.push_back(seed++);
              c.in.upload(ctx.stream(), test::make_input(DType::kFloat32, c.in.view.rows, n, n, seeds.back(), me));
              c.out.poison(ctx.stream());
            }
            Workspace ws;
            preamble(ctx, op, calls[0].out.view, calls[0].in.view, ws);
            const uint64_t errors = ctx.device_timeouts();
            if (me != 1) {
              for (OpCall& c : calls) call(ctx, op, c.out.view, c.in.view, ws);
              IRIS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));  // all three have ended; nothing raised yet
            } else {
              Tensor in = calls[0].in.view, out = calls[0].out.view;
              in.rows = out.rows = 0;
              call(ctx, op, out, in, ws);  // launches nothing
            }
            ctx.bootstrap().barrier();  // rank 1 calls once its peers' calls have ended
            if (me != 1) {
              test::expect_peer_made_no_call_error(test::error_text<TimeoutError>([&] { ctx.synchronize(); }), 1, 1);
              EXPECT_NO_THROW(ctx.synchronize()) << "the skipped calls record nothing while an error is pending";
              for (int k = 1; k < 3; ++k)
                EXPECT_TRUE(calls[k].out.still_poisoned(ctx.stream())) << "call " << k + 1 << " wrote its output";
            } else {
              call(ctx, op, calls[0].out.view, calls[0].in.view, ws);
              EXPECT_NO_THROW(ctx.synchronize());
              verify_exchange(ctx, op, calls[0].out.download(ctx.stream()), m, n, seeds[0], "rank 1's first call");
              call(ctx, op, calls[1].out.view, calls[1].in.view, ws);
              test::expect_peer_stopped_error(test::error_text<TimeoutError>([&] { ctx.synchronize(); }),
                                              detail::str_cat("iris device timeout in ", op_name(op)), 1, 0, 1, 2);
            }
            EXPECT_EQ(ctx.device_timeouts(), errors + 1);
            ctx.barrier();
            for (int k = 1; k < 3; ++k) {
              calls[k].out.release();
              calls[k].in.release();
            }
            refused_then_right_when_prepared_again(ctx, op, calls[0].out.view, calls[0].in.view, ws, calls[0], m, n,
                                                   seed++);
          }
        }
      },
      options);
}

// IRIS_CHECK_CALLS (ContextOptions::check_calls): each call compares itself across ranks before it launches.
// On a workspace prepared for 4 x 128 blocks, the last rank calls with 96 columns (broadcast: from another
// root), which the workspace holds: every rank raises, naming both calls, and nothing is launched. The
// ranks stay in step: the next calls are right and no device error was raised.
TEST_P(Collective, WithCheckCallsACallThatDiffersOnOneRankRaisesEverywhereAndLaunchesNothing) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  ContextOptions options = big_heap(GetParam().world);
  options.check_calls = true;
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int culprit = ctx.world_size() - 1;
        const bool is_culprit = ctx.rank() == culprit;
        const Mode mode{0, true, false, "on the heap"};
        uint64_t seed = 300;
        for (Op op : kOps) {
          SCOPED_TRACE(op_name(op));
          OpCall c = make_call(ctx, op, 4, 128);
          Workspace ws;
          preamble(ctx, op, c.out.view, c.in.view, ws);
          Tensor in = c.in.view, out = c.out.view;
          if (is_culprit && op != Op::kBroadcast) in.cols = out.cols = 96;
          const uint64_t calls = ws.calls();
          const std::string what = test::error_text<std::invalid_argument>([&] {
            if (op == Op::kBroadcast)
              ccl::broadcast(ctx, out, in, is_culprit ? culprit : 0, Config{}, ws);
            else
              call(ctx, op, out, in, ws);
          });
          const std::string mine = op == Op::kBroadcast ? detail::str_cat(" root ", is_culprit ? culprit : 0)
                                   : is_culprit         ? std::string("x96 float32")
                                                        : std::string("x128 float32");
          EXPECT_EQ(what.rfind(detail::str_cat("Calls differ across ranks (IRIS_CHECK_CALLS): rank ", ctx.rank(),
                                               " calls ", op_name(op), " "),
                               0),
                    0u)
              << what;
          const size_t theirs = what.find(detail::str_cat(" but rank ", is_culprit ? 0 : culprit, " calls "));
          ASSERT_NE(theirs, std::string::npos) << what;
          EXPECT_LT(what.find(mine), theirs) << what;
          EXPECT_EQ(ws.calls(), calls) << "nothing launched";
          ctx.synchronize();  // no device error: no kernel waited for a peer that did not come
          ctx.barrier();
          c.out.release();
          c.in.release();
          switch (op) {
            case Op::kAllGather:
              check_all_gather(ctx, Config{}, ws, DType::kFloat32, 4, 128, mode, seed++);
              break;
            case Op::kReduceScatter:
              check_reduce_scatter(ctx, Config{}, ws, DType::kFloat32, ReduceOp::kSum, 4, 128, mode, seed++);
              break;
            case Op::kAllToAll:
              check_all_to_all(ctx, Config{}, ws, DType::kFloat32, 4, 128, mode, seed++);
              break;
            case Op::kBroadcast:
              check_broadcast(ctx, Config{}, ws, DType::kFloat32, 4, 128, mode, culprit, seed++);
              break;
          }
          release(ctx, ws);
        }
      },
      options);
}

TEST_P(Collective, OverlappingBuffersAreRejected) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        // The root's invalid broadcast below is made on one rank alone; with IRIS_CHECK_CALLS even a refused call
        // is compared across ranks, so every rank would have to make it.
        if (ctx.check_calls()) GTEST_SKIP() << "IRIS_CHECK_CALLS refuses a call made on one rank alone";
        const int w = ctx.world_size();
        auto buf = TestTensor::make(ctx, DType::kFloat32, 2 * w, 64, 64, true);
        Workspace ws;
        // all_gather: in is part of out, but not this rank's rows (a shift of one row).
        const Tensor shifted = rows_of(buf.view, ctx.rank() * 2 + (ctx.rank() == 0 ? 1 : -1), 2);
        EXPECT_THROW(ccl::all_gather_preamble(ctx, buf.view, shifted, Config{}, ws), std::invalid_argument);
        // all_to_all in place is not supported.
        EXPECT_THROW(ccl::all_to_all(ctx, buf.view, buf.view, Config{}, ws), std::invalid_argument);
        // broadcast: partial overlap on the root.
        const Tensor half = rows_of(buf.view, 1, 2 * w - 1);
        if (ctx.rank() == 0) {
          EXPECT_THROW(ccl::broadcast(ctx, rows_of(buf.view, 0, 2 * w - 1), half, 0, Config{}, ws),
                       std::invalid_argument);
        }
        ctx.barrier();
        buf.release();
      },
      big_heap(GetParam().world));
}

// A comm_sms past the device's SMs is refused by every op, in the preamble (every rank raises its own
// message, none waits) and at the call on a workspace prepared without it; before 2026-12-03 up to 65535
// was launched, and blocks past what the GPU keeps resident could leave their peers waiting until a
// TimeoutError. comm_sms equal to the SMs is accepted (these small calls launch fewer blocks).
TEST_P(Collective, CommSmsPastTheDeviceSmsIsRefusedByEveryOp) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int w = ctx.world_size();
        int sms = 0;
        IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx.device()));
        auto full = TestTensor::make(ctx, DType::kFloat32, 4 * w, 64, 64, true);
        auto part = TestTensor::make(ctx, DType::kFloat32, 4, 64, 64, true);
        auto other = TestTensor::make(ctx, DType::kFloat32, 4 * w, 64, 64, true);
        Config bad;
        bad.comm_sms = sms + 1;
        const std::string tail =
            ": comm_sms (" + std::to_string(sms + 1) + ") must be at most the device's " + std::to_string(sms) +
            " SMs: the communication kernel's blocks wait for its peers' blocks, so all of them must "
            "be resident at once.";
        struct Op {
          const char* name;
          std::function<void(const Config&, Workspace&)> preamble, call;
        };
        const Op ops[] = {
            {"all_reduce",
             [&](const Config& c, Workspace& ws) { ccl::all_reduce_preamble(ctx, full.view, full.view, c, ws); },
             [&](const Config& c, Workspace& ws) { ccl::all_reduce(ctx, full.view, full.view, c, ws); }},
            {"all_gather",
             [&](const Config& c, Workspace& ws) { ccl::all_gather_preamble(ctx, full.view, part.view, c, ws); },
             [&](const Config& c, Workspace& ws) { ccl::all_gather(ctx, full.view, part.view, c, ws); }},
            {"reduce_scatter",
             [&](const Config& c, Workspace& ws) { ccl::reduce_scatter_preamble(ctx, part.view, full.view, c, ws); },
             [&](const Config& c, Workspace& ws) { ccl::reduce_scatter(ctx, part.view, full.view, c, ws); }},
            {"all_to_all",
             [&](const Config& c, Workspace& ws) { ccl::all_to_all_preamble(ctx, other.view, full.view, c, ws); },
             [&](const Config& c, Workspace& ws) { ccl::all_to_all(ctx, other.view, full.view, c, ws); }},
            {"broadcast",
             [&](const Config& c, Workspace& ws) { ccl::broadcast_preamble(ctx, full.view, full.view, 0, c, ws); },
             [&](const Config& c, Workspace& ws) { ccl::broadcast(ctx, full.view, full.view, 0, c, ws); }},
        };
        std::vector<Config> variants;
        for (auto v : {ccl::AllReduceVariant::kOneShot, ccl::AllReduceVariant::kTwoShot, ccl::AllReduceVariant::kRing,
                       ccl::AllReduceVariant::kAtomic, ccl::AllReduceVariant::kSpinlock}) {
          Config c = bad;
          c.all_reduce_variant = v;
          variants.push_back(c);
        }
        for (const Op& op : ops) {
          SCOPED_TRACE(op.name);
          Workspace ws;
          const std::string want = op.name + tail;
          EXPECT_EQ(test::error_text<std::invalid_argument>([&] { op.preamble(bad, ws); }), want);
          EXPECT_FALSE(ws.prepared());
          op.preamble(Config{}, ws);
          EXPECT_EQ(test::error_text<std::invalid_argument>([&] { op.call(bad, ws); }), want);
          if (std::string(op.name) == "all_reduce") {
            for (const Config& c : variants) {
              EXPECT_EQ(test::error_text<std::invalid_argument>([&] { op.call(c, ws); }), want)
                  << ccl::variant_name(c.all_reduce_variant);
            }
          }
          Config most;
          most.comm_sms = sms;
          op.call(most, ws);
          IRIS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
          ctx.barrier();
          release(ctx, ws);
        }
        full.release();
        part.release();
        other.release();
      },
      big_heap(GetParam().world));
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collective, ::testing::ValuesIn(test::any_world_rank_setups()), test::rank_setup_name);

}  // namespace
}  // namespace iris
