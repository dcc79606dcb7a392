// GPU tests of the GEMM core (iris::ops::gemm) against an fp64 host reference, and of the fused ops'
// host layer on real contexts (preambles on the heap, launch-time capacity checks). The fused ops'
// results are tested in test_fused_gpu.cu.
//
// GEMM cases cover every instantiation (bfloat16/float16 in; 16-bit or float32 out; B as K x N and
// N x K; every tile; the stream-K kernel), one tile exactly, sizes that are multiples of no tile
// dimension, padded row strides, bias on and off, alpha, a limited SM count (each CTA walks many tiles)
// and CUDA-graph replay. Outputs start poisoned (0xFF: NaN) with poisoned padding and a poisoned guard after the
// buffer, so a missed tile shows as NaN and a write past a row or the end shows as a changed byte.
// Accuracy: ||out - ref|| / ||ref|| below twice C's unit roundoff for 16-bit outputs (2^-8 bfloat16, 2^-10
// float16: one rounding of a float32 sum; 1e-2 before 2026-12-06) and 1e-4 for float32 outputs (the inputs
// are exact in 16 bits and the products exact in float32), and elementwise
// |out - ref| <= rel(C) * |ref| + 1e-4 * sum_k |a_ik * b_kj| (C's rounding plus float32 accumulation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ccl_test_util.cuh"
#include "iris/core/cuda_check.hpp"
#include "iris/ops/fused.hpp"
#include "iris/ops/gemm.hpp"
#include "support/error_text.hpp"
#include "support/ranks.hpp"
#include "support/require_gemm_core.hpp"

namespace iris::ops {
namespace {

using test::error_text;
using test::input_value;

constexpr size_t kGuardBytes = 4096;

// Device memory with a poisoned guard region after `bytes`.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    IRIS_CUDA_CHECK(cudaMalloc(&ptr, bytes + kGuardBytes));
    IRIS_CUDA_CHECK(cudaMemset(ptr, 0xFF, bytes + kGuardBytes));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<char>& host) {
    IRIS_CUDA_CHECK(cudaMemcpy(ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  std::vector<char> download() const {  // including the guard
    std::vector<char> host(bytes + kGuardBytes);
    IRIS_CUDA_CHECK(cudaMemcpy(host.data(), ptr, host.size(), cudaMemcpyDeviceToHost));
    return host;
  }
};

struct GemmCase {
  int64_t m, n, k;
  DType in, out;
  bool b_is_nk;
  bool bias;
  GemmTile tile;  // {} = automatic
  float alpha = 1.0f;
  int64_t pad = 0;  // extra elements per row of A, B and C (a multiple of 8)
  int sm_count = 0;
  bool stream_k = false;  // GemmArguments::stream_k
  int split_k = 1;        // GemmArguments::split_k
  int source = 0;         // GemmArguments::source: 0 none, 1 its own buffer, 2 C itself (C += A @ B)
};

std::string case_name(const ::testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  std::string s =
      std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + "_" + test::short_name(c.in) +
      "_to_" + test::short_name(c.out) + (c.b_is_nk ? "_nk" : "_kn") + (c.bias ? "_bias" : "") +
      (c.tile.is_auto() ? "_auto" : "_" + std::to_string(c.tile.m) + "x" + std::to_string(c.tile.n)) +
      (c.pad ? "_pad" + std::to_string(c.pad) : "") + (c.sm_count ? "_sms" + std::to_string(c.sm_count) : "") +
      (c.alpha != 1.0f ? "_alpha" : "") + (c.stream_k ? "_streamk" : "") +
      (c.split_k == 1   ? ""
       : c.split_k == 0 ? "_splitauto"
                        : "_split" + std::to_string(c.split_k)) +
      (c.source == 1   ? "_source"
       : c.source == 2 ? "_inplace"
                       : "");
  return s;
}

// Host image of a rows x cols matrix with row stride `ld` (padding 0xFF), values from `seed`.
std::vector<char> host_matrix(DType dt, int64_t rows, int64_t cols, int64_t ld, uint64_t seed,
                              std::vector<double>* values) {
  const size_t esz = dtype_size(dt);
  std::vector<char> img(static_cast<size_t>(rows * ld) * esz, static_cast<char>(0xFF));
  values->assign(static_cast<size_t>(rows * cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = input_value(dt, seed, 0, r * cols + c);
      (*values)[r * cols + c] = v;
      encode_element(dt, v, img.data() + (r * ld + c) * esz);
    }
  return img;
}

double rounding(DType dt) {
  switch (dt) {
    case DType::kBFloat16:
      return 0x1.0p-8;  // twice bf16's half-ulp
    case DType::kFloat16:
      return 0x1.0p-10;
    default:
      return 1e-6;
  }
}

// Checks C (downloaded with its guard; `bytes` of C proper) against the fp64 product of the host values.
void check_output(const GemmCase& c, const std::vector<char>& out, size_t bytes, const std::vector<double>& a,
                  const std::vector<double>& b, const std::vector<double>& bias, const std::vector<double>& src) {
  const int64_t ldc = c.n + c.pad;
  const size_t esz_out = dtype_size(c.out);
  double err2 = 0, ref2 = 0;
  int64_t bad = 0, not_finite = 0, padding_written = 0;
  std::string first_bad;
  const double rel = rounding(c.out);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0, abs_sum = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const double bv = c.b_is_nk ? b[j * c.k + kk] : b[kk * c.n + j];
        acc += a[i * c.k + kk] * bv;
        abs_sum += std::fabs(a[i * c.k + kk] * bv);
      }
      const double ref = c.alpha * acc + (c.bias ? bias[j] : 0.0) + (c.source ? src[i * c.n + j] : 0.0);
      const double got = decode_element(c.out, out.data() + (i * ldc + j) * esz_out);
      if (!std::isfinite(got)) {
        if (not_finite++ == 0 && first_bad.empty())
          first_bad = "C[" + std::to_string(i) + "][" + std::to_string(j) + "] is not finite (never written?)";
        continue;
      }
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
      const double tol = rel * std::fabs(ref) + 1e-4 * std::fabs(c.alpha) * abs_sum + 1e-6;
      if (std::fabs(got - ref) > tol && bad++ == 0 && first_bad.empty())
        first_bad = "C[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(got) +
                    " but the reference is " + std::to_string(ref);
    }
    for (int64_t j = c.n; j < ldc; ++j)  // row padding stays poisoned
      for (size_t byte = 0; byte < esz_out; ++byte)
        padding_written += out[(i * ldc + j) * esz_out + byte] != static_cast<char>(0xFF);
  }
  int64_t guard_written = 0;
  for (size_t byte = bytes; byte < out.size(); ++byte) guard_written += out[byte] != static_cast<char>(0xFF);
  EXPECT_EQ(not_finite, 0) << first_bad;
  EXPECT_EQ(bad, 0) << first_bad;
  EXPECT_EQ(padding_written, 0) << "bytes written into the padding between rows of C";
  EXPECT_EQ(guard_written, 0) << "bytes written past the end of C";
  const double ratio = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_LT(ratio, c.out == DType::kFloat32 ? 1e-4 : rel) << "||out - ref|| / ||ref||";
}


// Runs one case on the current device and checks it; in_graph: captures the GEMM once in a CUDA graph and
// replays it three times, each replay with a new A and C poisoned again (C reset to the source when it is
// one), each checked (before 2026-12-05 the three replays shared one A and only the last was checked, so a
// graph that kept its capture's data would have passed).
void run_case(const GemmCase& c, bool in_graph) {
  const int64_t lda = c.k + c.pad;
  const int64_t ldb = (c.b_is_nk ? c.k : c.n) + c.pad;
  const int64_t ldc = c.n + c.pad;
  const int64_t b_rows = c.b_is_nk ? c.n : c.k;
  const int64_t b_cols = c.b_is_nk ? c.k : c.n;
  std::vector<double> a, b, bias, src;
  const auto b_img = host_matrix(c.in, b_rows, b_cols, ldb, 22, &b);
  const auto bias_img = host_matrix(c.out, 1, c.n, c.n, 33, &bias);
  const auto src_img = host_matrix(c.out, c.m, c.n, ldc, 44, &src);  // padding 0xFF, as C's
  const size_t esz_out = dtype_size(c.out);
  DeviceBuffer da(static_cast<size_t>(c.m * lda) * dtype_size(c.in)), db(b_img.size()), dbias(bias_img.size());
  DeviceBuffer dc(static_cast<size_t>(c.m * ldc) * esz_out);  // starts all 0xFF, guard too
  DeviceBuffer dsrc(c.source == 1 ? src_img.size() : 0);
  db.upload(b_img);
  dbias.upload(bias_img);
  if (c.source == 1) dsrc.upload(src_img);

  GemmArguments args;
  args.a = Tensor::matrix(da.ptr, c.in, c.m, c.k, lda);
  args.b = Tensor::matrix(db.ptr, c.in, b_rows, b_cols, ldb);
  args.c = Tensor::matrix(dc.ptr, c.out, c.m, c.n, ldc);
  args.b_is_nk = c.b_is_nk;
  args.bias = c.bias ? dbias.ptr : nullptr;
  args.alpha = c.alpha;
  args.tile = c.tile;
  args.sm_count = c.sm_count;
  args.stream_k = c.stream_k;
  args.split_k = c.split_k;
  if (c.source == 1) args.source = Tensor::matrix(dsrc.ptr, c.out, c.m, c.n, ldc);
  if (c.source == 2) args.source = args.c;
  ASSERT_EQ(can_implement(args), "");
  const size_t ws_bytes = workspace_size(args);
  void* ws = nullptr;
  if (ws_bytes > 0) IRIS_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  cudaStream_t stream;
  IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (in_graph) {
    IRIS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    gemm(args, ws, stream);
    IRIS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    IRIS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  }
  for (int run = 0; run < (in_graph ? 3 : 1); ++run) {
    SCOPED_TRACE(in_graph ? "replay " + std::to_string(run) : std::string("direct call"));
    da.upload(host_matrix(c.in, c.m, c.k, lda, 11 + 1000 * static_cast<uint64_t>(run), &a));
    if (c.source == 2)
      dc.upload(src_img);  // C += A @ B: C starts as the source (no poison to find)
    else
      IRIS_CUDA_CHECK(cudaMemset(dc.ptr, 0xFF, dc.bytes));
    if (in_graph)
      IRIS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    else
      gemm(args, ws, stream);
    IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
    check_output(c, dc.download(), dc.bytes, a, b, bias, src);
  }
  if (in_graph) {
    IRIS_CUDA_CHECK(cudaGraphExecDestroy(exec));
    IRIS_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  IRIS_CUDA_CHECK(cudaStreamDestroy(stream));
  if (ws != nullptr) IRIS_CUDA_CHECK(cudaFree(ws));
}

class GemmGpu : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmGpu, MatchesFp64Reference) {
  IRIS_TEST_REQUIRE_GEMM_CORE(1);
  run_case(GetParam(), /*in_graph=*/false);
}

const DType kBF16 = DType::kBFloat16;
const DType kF16 = DType::kFloat16;
const DType kF32 = DType::kFloat32;

// Every instantiation at least once (marked), then the awkward shapes.
const GemmCase kCases[] = {
    // one tile, exactly
    {128, 256, 64, kBF16, kBF16, true, false, kGemmTileLarge},  // bf16 nk -> bf16, large
    {128, 128, 64, kBF16, kBF16, false, true, kGemmTileSmall},  // bf16 kn -> bf16, small
    {64, 128, 64, kBF16, kBF16, false, true, kGemmTileSkinny},  // bf16 kn -> bf16, skinny
    {64, 64, 64, kF16, kF16, true, false, kGemmTileTiny},       // f16 nk -> f16, tiny
    // no dimension a multiple of any tile dimension
    {200, 136, 72, kBF16, kF32, false, true, GemmTile{}},              // bf16 kn -> f32, tiny (auto)
    {1000, 520, 200, kF16, kF16, true, true, kGemmTileLarge},          // f16 nk -> f16, large
    {1000, 520, 200, kF16, kF32, false, false, kGemmTileLarge, 0.5f},  // f16 kn -> f32, large
    {333, 128, 96, kF16, kF32, true, true, GemmTile{}},                // f16 nk -> f32, tiny (auto)
    {1, 8, 8, kBF16, kBF16, true, true, GemmTile{}},                   // bf16 nk -> bf16, tiny (auto)
    {200, 136, 72, kF16, kF16, false, true, kGemmTileSkinny},          // f16 kn -> f16, skinny
    {333, 520, 200, kBF16, kBF16, true, true, kGemmTileTiny},          // bf16 nk -> bf16, tiny
    {257, 392, 1032, kBF16, kBF16, false, false, kGemmTileSmall},      // many K stages plus a remainder
    {64, 4096, 128, kF16, kF16, true, false, kGemmTileSmall},          // f16 nk -> f16, small
    // float32 outputs of every tile
    {520, 1000, 136, kBF16, kF32, false, true, kGemmTileLarge},
    {520, 1000, 136, kF16, kF32, true, false, kGemmTileLarge},
    {300, 400, 264, kBF16, kF32, false, true, kGemmTileSmall},
    {300, 400, 264, kBF16, kF32, true, false, kGemmTileSmall},
    {300, 400, 264, kF16, kF32, false, false, kGemmTileSmall, 1.0f, 8},
    {300, 400, 264, kF16, kF32, true, true, kGemmTileSmall},
    {130, 392, 520, kBF16, kF32, false, false, kGemmTileSkinny},
    {130, 392, 520, kBF16, kF32, true, true, kGemmTileSkinny, 1.0f, 16},
    {130, 392, 520, kF16, kF32, false, true, kGemmTileSkinny},
    {130, 392, 520, kF16, kF32, true, false, kGemmTileSkinny},
    {70, 200, 136, kBF16, kF32, true, true, kGemmTileTiny},
    {70, 200, 136, kF16, kF32, false, false, kGemmTileTiny, 0.5f},
    // decode-like and a persistent walk over many tiles on few SMs
    {128, 8192, 512, kBF16, kBF16, true, true, GemmTile{}},  // bf16 nk -> bf16, skinny (auto)
    {96, 4096, 256, kF16, kF16, false, true, GemmTile{}},    // f16 kn -> f16, tiny (auto)
    {520, 1000, 128, kBF16, kBF16, false, false, kGemmTileTiny, 1.0f, 0, 4},
    {2048, 1024, 256, kF16, kF16, false, true, kGemmTileLarge, 1.0f, 0, 8},  // f16 kn -> f16, large
    {512, 512, 512, kBF16, kBF16, false, true, kGemmTileLarge},              // bf16 kn -> bf16, large
    // padded row strides
    {300, 264, 136, kBF16, kF32, true, true, kGemmTileLarge, 1.0f, 8},     // bf16 nk -> f32, large
    {300, 264, 136, kF16, kF16, false, false, kGemmTileSmall, 1.0f, 16},   // f16 kn -> f16, small
    {257, 392, 1032, kF16, kF16, true, false, kGemmTileSkinny, 1.0f, 16},  // f16 nk -> f16, skinny, K stages
    {100, 264, 136, kBF16, kBF16, false, false, kGemmTileTiny, 0.5f, 8},   // bf16 kn -> bf16, tiny
    // alpha 0: the bias alone
    {130, 64, 64, kBF16, kBF16, true, true, GemmTile{}, 0.0f},
    // stream-K (the 128x128 tile with at most half the SMs' worth of tiles, K >= 8192 split across
    // CTAs): every 16-bit instantiation, a K with a remainder, padded strides, few SMs; then stream_k
    // where the rule keeps the data-parallel kernel (the automatic choice; many tiles, short K)
    {128, 512, 8192, kBF16, kBF16, true, true, kGemmTileSmall, 1.0f, 0, 0, true},    // bf16 nk
    {136, 264, 8200, kBF16, kBF16, false, false, kGemmTileSmall, 1.0f, 8, 0, true},  // bf16 kn
    {64, 256, 8192, kF16, kF16, true, false, kGemmTileSmall, 0.5f, 0, 16, true},     // f16 nk
    {96, 392, 8200, kF16, kF16, false, true, kGemmTileSmall, 1.0f, 16, 0, true},     // f16 kn
    {128, 512, 8192, kBF16, kBF16, true, true, GemmTile{}, 1.0f, 0, 0, true},
    {1000, 1024, 128, kBF16, kBF16, true, true, GemmTile{}, 1.0f, 0, 0, true},
    // split K (a batched GEMM into float32 partials, then their sum): every tile, 16-bit and float32 C,
    // both B layouts, slices that are not a multiple of the tile's K stage (1040 / 2 = 520, 2400 / 3 =
    // 800), padded strides, alpha with a bias, few SMs, the most slices; then the automatic split where
    // it splits (32 tiles, 4 slices; one tile, 16 slices) and where it does not (many tiles)
    {128, 512, 8192, kBF16, kBF16, true, true, kGemmTileTiny, 1.0f, 0, 0, false, 4},
    {130, 392, 1040, kF16, kF16, false, true, kGemmTileSkinny, 1.0f, 0, 0, false, 2},
    {200, 136, 2400, kBF16, kF32, false, false, kGemmTileSmall, 0.5f, 0, 0, false, 3},
    {300, 264, 1536, kF16, kF32, true, true, kGemmTileLarge, 1.0f, 8, 0, false, 2},
    {70, 200, 4096, kBF16, kBF16, false, true, kGemmTileTiny, 0.5f, 16, 0, false, 16},
    {257, 520, 2048, kF16, kF16, true, false, kGemmTileTiny, 1.0f, 0, 4, false, 8},
    {128, 1024, 8192, kBF16, kBF16, true, true, GemmTile{}, 1.0f, 0, 0, false, 0},
    {64, 64, 16384, kF16, kF32, false, true, GemmTile{}, 1.0f, 0, 0, false, 0},
    {1000, 1024, 128, kBF16, kBF16, false, true, GemmTile{}, 1.0f, 0, 0, false, 0},
    // the swapped tiles of 16- and 32-row outputs: one tile exactly, rows and columns short of a tile,
    // several tile rows (M above the tile), both B layouts, 16-bit and float32 C, bias, alpha, padded
    // strides, few SMs, split K and the automatic choice at decode shapes
    {16, 64, 64, kBF16, kBF16, true, false, kGemmTileRows16},
    {32, 64, 64, kBF16, kBF16, false, false, kGemmTileRows32},
    {13, 136, 200, kBF16, kBF16, false, true, kGemmTileRows16},
    {27, 136, 200, kBF16, kBF16, true, true, kGemmTileRows32, 0.5f},
    {100, 392, 264, kBF16, kF32, true, true, kGemmTileRows16, 1.0f, 8},
    {70, 392, 264, kBF16, kF32, false, false, kGemmTileRows32, 1.0f, 16},
    {1, 520, 136, kBF16, kBF16, false, true, kGemmTileRows16, 1.0f, 0, 4},
    {16, 4096, 4096, kBF16, kBF16, true, true, kGemmTileRows16, 1.0f, 0, 0, false, 2},
    {32, 2048, 8192, kBF16, kBF16, false, true, kGemmTileRows32, 1.0f, 0, 0, false, 4},
    {20, 1000, 2400, kBF16, kF32, true, false, kGemmTileRows32, 0.5f, 8, 0, false, 3},
    {16, 2048, 4096, kBF16, kBF16, false, true, GemmTile{}, 1.0f, 0, 0, false, 0},
    {32, 2048, 8192, kBF16, kBF16, true, false, GemmTile{}, 1.0f, 0, 0, false, 0},
    {16, 64, 64, kF16, kF16, false, true, kGemmTileRows16},
    {32, 64, 64, kF16, kF16, true, false, kGemmTileRows32},
    {9, 200, 136, kF16, kF32, true, true, kGemmTileRows16, 0.5f},
    {11, 136, 72, kF16, kF16, true, false, kGemmTileRows16},
    {17, 136, 72, kF16, kF16, false, true, kGemmTileRows32},
    {31, 200, 136, kF16, kF32, false, false, kGemmTileRows32, 1.0f, 8},
    {5, 1024, 4096, kF16, kF16, true, true, GemmTile{}, 1.0f, 0, 0, false, 0},
    {24, 520, 2048, kF16, kF32, false, true, GemmTile{}, 1.0f, 16, 0, false, 0},
    // a source added in the epilogue (C = alpha A @ B + source + bias): every tile that takes one, both
    // 16-bit types and float32 C, both B layouts, in place (C += A @ B), padded strides, alpha, few SMs,
    // one tile exactly and edges of no tile; the automatic choice at 20 rows (a swapped tile without a
    // source, kGemmTileTiny with one) and with split_k = 0 (never split with a source)
    {128, 256, 64, kBF16, kBF16, true, false, kGemmTileLarge, 1.0f, 0, 0, false, 1, 1},
    {1000, 520, 200, kF16, kF16, false, true, kGemmTileLarge, 1.0f, 8, 0, false, 1, 2},
    {300, 400, 264, kBF16, kBF16, false, false, kGemmTileSmall, 0.5f, 0, 0, false, 1, 1},
    {257, 392, 1032, kF16, kF16, true, true, kGemmTileSmall, 1.0f, 16, 0, false, 1, 2},
    {130, 392, 520, kBF16, kBF16, true, true, kGemmTileSkinny, 1.0f, 0, 4, false, 1, 1},
    {200, 136, 72, kF16, kF16, false, false, kGemmTileSkinny, 1.0f, 0, 0, false, 1, 2},
    {70, 200, 136, kBF16, kBF16, false, true, kGemmTileTiny, 1.0f, 8, 0, false, 1, 2},
    {333, 520, 200, kF16, kF16, true, false, kGemmTileTiny, 0.5f, 0, 0, false, 1, 1},
    {520, 1000, 136, kBF16, kF32, false, true, kGemmTileLarge, 1.0f, 0, 0, false, 1, 1},
    {300, 264, 136, kF16, kF32, true, false, kGemmTileSmall, 1.0f, 8, 0, false, 1, 2},
    {20, 1000, 2400, kBF16, kBF16, true, true, GemmTile{}, 1.0f, 0, 0, false, 0, 1},
    {1000, 1024, 128, kBF16, kBF16, false, false, GemmTile{}, 1.0f, 0, 0, false, 1, 2},
    // edges the cases above missed (a read-only audit, 2026-12-06): K below one 64-deep k-stage on every
    // tile, N narrower than the tile, one row on the 64- and 128-row tiles (the 2x1 cluster too) and the
    // swapped ones in float16 and float32 C, split K whose slices are 8 deep (below a k-stage) and at one
    // row, a source at one row (the automatic choice)
    {130, 136, 8, kBF16, kBF16, true, true, kGemmTileLarge},
    {200, 264, 40, kF16, kF32, false, false, kGemmTileSmall},
    {130, 136, 8, kF16, kF16, false, true, kGemmTileSkinny},
    {200, 264, 40, kBF16, kBF16, true, false, kGemmTileTiny},
    {300, 8, 72, kBF16, kF32, true, true, kGemmTileLarge},
    {200, 24, 64, kF16, kF16, false, false, kGemmTileLarge},
    {1, 264, 136, kBF16, kBF16, true, true, kGemmTileLarge},
    {1, 264, 136, kF16, kF32, false, true, kGemmTileSmall},
    {1, 264, 136, kBF16, kF32, true, false, kGemmTileSkinny},
    {1, 264, 136, kF16, kF16, false, false, kGemmTileTiny},
    {1, 136, 200, kF16, kF16, true, true, kGemmTileRows16},
    {1, 136, 200, kBF16, kF32, false, false, kGemmTileRows32},
    {128, 256, 64, kBF16, kBF16, true, true, kGemmTileTiny, 1.0f, 0, 0, false, 8},
    {64, 128, 16, kF16, kF32, false, false, kGemmTileSmall, 1.0f, 0, 0, false, 2},
    {1, 4096, 4096, kBF16, kBF16, true, false, kGemmTileRows16, 1.0f, 0, 0, false, 4},
    {1, 1000, 2400, kF16, kF16, false, true, GemmTile{}, 1.0f, 0, 0, false, 1, 1},
};

INSTANTIATE_TEST_SUITE_P(Cases, GemmGpu, ::testing::ValuesIn(kCases), case_name);

TEST(GemmGpuGraph, CapturedAndReplayedGivesTheSameResult) {
  IRIS_TEST_REQUIRE_GEMM_CORE(1);
  run_case(GemmCase{1000, 520, 200, kBF16, kBF16, true, true, GemmTile{}}, /*in_graph=*/true);
  run_case(GemmCase{1000, 520, 200, kBF16, kF32, false, true, kGemmTileLarge}, /*in_graph=*/true);
  run_case(GemmCase{128, 512, 8192, kBF16, kBF16, true, true, kGemmTileSmall, 1.0f, 0, 0, /*stream_k=*/true},
           /*in_graph=*/true);
  run_case(GemmCase{128, 1024, 8192, kF16, kF16, false, true, GemmTile{}, 1.0f, 0, 0, false, /*split_k=*/0},
           /*in_graph=*/true);
  // a decode shape: the swapped 16-row tile, K split in four
  run_case(GemmCase{16, 2048, 4096, kBF16, kBF16, true, true, GemmTile{}, 1.0f, 0, 0, false, /*split_k=*/0},
           /*in_graph=*/true);
  // The automatic split does not split on few SMs (ranks sharing a GPU under MPS): the same two shapes
  // with explicit splits, so the captured partials and their sum run on every device.
  run_case(GemmCase{128, 1024, 8192, kF16, kF16, false, true, GemmTile{}, 1.0f, 0, 0, false, /*split_k=*/4},
           /*in_graph=*/true);
  run_case(GemmCase{16, 2048, 4096, kBF16, kBF16, true, true, GemmTile{}, 1.0f, 0, 0, false, /*split_k=*/4},
           /*in_graph=*/true);
}

// A decode-shaped GEMM on the device: 128 x 1024 x 8192, bfloat16, B stored N x K; random A and B
// (from `seed`) uploaded, C all 0xFF. args(a) views them, with `a` (A's size) as A.
struct DecodeGemm {
  static constexpr int64_t m = 128, n = 1024, k = 8192;
  std::vector<char> a_img, b_img;
  DeviceBuffer a, b, c;
  explicit DecodeGemm(uint64_t seed)
      : a_img(image(m, k, seed)),
        b_img(image(n, k, seed + 1)),
        a(a_img.size()),
        b(b_img.size()),
        c(static_cast<size_t>(m * n) * 2) {
    a.upload(a_img);
    b.upload(b_img);
  }
  GemmArguments args(void* a_data) const {
    GemmArguments g;
    g.a = Tensor::matrix(a_data, kBF16, m, k);
    g.b = Tensor::matrix(b.ptr, kBF16, n, k);
    g.b_is_nk = true;
    g.c = Tensor::matrix(c.ptr, kBF16, m, n);
    return g;
  }
  static std::vector<char> image(int64_t rows, int64_t cols, uint64_t seed) {
    std::vector<double> unused;
    return host_matrix(kBF16, rows, cols, cols, seed, &unused);
  }
};

// A split of K needs its workspace (the float32 partials first), 16-byte aligned, and sums the slices in
// one order: two runs give the same bits.
TEST(GemmGpuSplitK, WorkspaceRequiredAndResultsRepeatBitwise) {
  IRIS_TEST_REQUIRE_GEMM_CORE(1);
  DecodeGemm g(5);
  const int64_t m = g.m, n = g.n;
  DeviceBuffer& c = g.c;
  GemmArguments args = g.args(g.a.ptr);
  EXPECT_EQ(workspace_size(args), 0u) << "split_k = 1: no split, no workspace";
  // Four slices, as the automatic split takes on 132 SMs (OpsGemmSplitK), but set here: the automatic
  // split follows the device's SMs (66 on half an H200 under MPS: 2 slices).
  args.split_k = 4;
  ASSERT_EQ(resolved_split_k(args), 4);
  const size_t need = workspace_size(args);
  EXPECT_GE(need, static_cast<size_t>(4 * m * n) * sizeof(float)) << "4 float32 partials of 128 x 1024";
  EXPECT_EQ(error_text<WorkspaceTooSmall>([&] { gemm(args, nullptr, nullptr); }),
            "gemm: these arguments need " + std::to_string(need) +
                " bytes of device workspace (workspace_size(args)) but workspace is null.");
  DeviceBuffer ws(need + 16);
  void* misaligned = static_cast<char*>(ws.ptr) + 8;
  std::ostringstream where;
  where << misaligned;
  EXPECT_EQ(error_text<std::invalid_argument>([&] { gemm(args, misaligned, nullptr); }),
            "gemm: workspace " + where.str() + " is not 16-byte aligned (split_k keeps float32 partials there).");
  // The sized overload checks the capacity from its one plan, 16 bytes short and exactly enough.
  IRIS_CUDA_CHECK(cudaMemset(c.ptr, 0xFF, c.bytes));
  EXPECT_EQ(error_text<WorkspaceTooSmall>([&] { gemm(args, ws.ptr, need - 16, nullptr); }),
            "gemm: these arguments need " + std::to_string(need) +
                " bytes of device workspace (workspace_size(args)) but the workspace holds " +
                std::to_string(need - 16) + ".");
  // A workspace that overlaps an operand (here C, 16-byte aligned and large enough by the unsized overload).
  std::ostringstream at_c;
  at_c << c.ptr;
  EXPECT_EQ(error_text<std::invalid_argument>([&] { gemm(args, c.ptr, nullptr); }),
            "gemm: the workspace (" + std::to_string(need) + " bytes at " + at_c.str() +
                ") overlaps C; the GEMM writes it while it reads its operands. Pass device memory no operand uses.");
  IRIS_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(c.download() == std::vector<char>(c.bytes + kGuardBytes, static_cast<char>(0xFF)))
      << "a refused call wrote C";
  std::vector<std::vector<char>> outs;
  for (int run = 0; run < 3; ++run) {
    IRIS_CUDA_CHECK(cudaMemset(c.ptr, 0xFF, c.bytes));
    IRIS_CUDA_CHECK(cudaMemset(ws.ptr, run == 0 ? 0x00 : 0x7F, ws.bytes));  // stale partials must not matter
    if (run < 2)
      gemm(args, ws.ptr, nullptr);
    else
      gemm(args, ws.ptr, need, nullptr);
    IRIS_CUDA_CHECK(cudaDeviceSynchronize());
    outs.push_back(c.download());
  }
  EXPECT_TRUE(outs[0] == outs[1]) << "two runs of the same split GEMM differ";
  EXPECT_TRUE(outs[0] == outs[2]) << "the sized gemm() overload ran a different GEMM";
  args.split_k = 1;  // and the unsplit GEMM agrees within rounding (the tests above hold the fp64 reference)
  IRIS_CUDA_CHECK(cudaMemset(c.ptr, 0xFF, c.bytes));
  gemm(args, nullptr, nullptr);
  IRIS_CUDA_CHECK(cudaDeviceSynchronize());
  const auto unsplit = c.download();
  int64_t far = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    const double x = decode_element(kBF16, outs[0].data() + i * 2), y = decode_element(kBF16, unsplit.data() + i * 2);
    far += !(std::fabs(x - y) <= 0x1.0p-6 * std::fabs(y) + 1e-2);
  }
  EXPECT_EQ(far, 0) << "elements where the split and unsplit GEMMs differ by more than rounding";
}

// stream_k asks for workspace only when the stream-K kernel runs (the 128x128 tile, at most half the
// SMs' worth of tiles, K >= 8192). Without it, gemm() refuses the call instead of running without the
// partial sums' room.
TEST(GemmGpuStreamK, WorkspaceOnlyWhenItRunsAndRequiredThen) {
  IRIS_TEST_REQUIRE_GEMM_CORE(1);
  DeviceBuffer a(256 * 8192 * 2), b(8192 * 8192 * 2), c(256 * 8192 * 2);
  GemmArguments args;
  auto shape = [&](int64_t m, int64_t n, int64_t k) {
    args.a = Tensor::matrix(a.ptr, kBF16, m, k);
    args.b = Tensor::matrix(b.ptr, kBF16, n, k);
    args.c = Tensor::matrix(c.ptr, kBF16, m, n);
  };
  args.b_is_nk = true;
  args.tile = kGemmTileSmall;
  // 2 tiles: stream-K on any GPU of 4 SMs or more (8 tiles of 128 x 1024 needed 16, more than the 14 a
  // process gets at 12% of an H200 under MPS).
  shape(128, 256, 8192);
  EXPECT_EQ(workspace_size(args), 0u) << "stream_k off";
  args.stream_k = true;
  const size_t need = workspace_size(args);
  EXPECT_GT(need, 0u) << "2 tiles, K = 8192: stream-K";
  EXPECT_EQ(error_text<WorkspaceTooSmall>([&] { gemm(args, nullptr, nullptr); }),
            "gemm: these arguments need " + std::to_string(need) +
                " bytes of device workspace (workspace_size(args)) but workspace is null.");
  // The stream-K fixup reads and writes its partials 16 bytes at a time: a misaligned workspace is refused
  // before launch (before 2026-12-04 only split-K's was, and stream-K's faulted with a misaligned address).
  {
    DeviceBuffer ws(need + 16);
    void* misaligned = static_cast<char*>(ws.ptr) + 8;
    std::ostringstream where;
    where << misaligned;
    EXPECT_EQ(error_text<std::invalid_argument>([&] { gemm(args, misaligned, need, nullptr); }),
              "gemm: workspace " + where.str() + " is not 16-byte aligned (stream_k keeps float32 partials there).");
    IRIS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  for (GemmTile other : {GemmTile{}, kGemmTileLarge, kGemmTileSkinny, kGemmTileTiny}) {
    args.tile = other;
    EXPECT_EQ(workspace_size(args), 0u) << "only the 128x128 tile has a stream-K kernel: " << other.m << "x"
                                        << other.n;
  }
  args.tile = kGemmTileSmall;
  shape(128, 1024, 4096);
  EXPECT_EQ(workspace_size(args), 0u) << "K = 4096: data-parallel";
  shape(256, 8192, 8192);
  EXPECT_EQ(workspace_size(args), 0u) << "128 tiles: data-parallel";
}

TEST(GemmGpuEmpty, EmptyOutputLaunchesNothing) {
  IRIS_TEST_REQUIRE_GEMM_CORE(1);
  DeviceBuffer a(64 * 2), b(64 * 64 * 2), c(64);
  GemmArguments args;
  args.a = Tensor::matrix(a.ptr, kBF16, 0, 64);
  args.b = Tensor::matrix(b.ptr, kBF16, 64, 64);
  args.c = Tensor::matrix(c.ptr, kBF16, 0, 64);
  EXPECT_EQ(workspace_size(args), 0u);
  gemm(args, nullptr, nullptr);
  IRIS_CUDA_CHECK(cudaDeviceSynchronize());
  for (char byte : c.download()) ASSERT_EQ(byte, static_cast<char>(0xFF));
}

// After spinning for about `cycles` clock cycles, copies x_bytes from x_src to x_dst and y_bytes from
// y_src to y_dst, having told the GPU at once that the kernel after it may be scheduled
// (griddepcontrol.launch_dependents): a kernel launched after it with programmatic dependent launch
// then runs beside it and must wait for it before it touches memory.
__global__ void copies_after_spin(const char* x_src, char* x_dst, size_t x_bytes, const char* y_src, char* y_dst,
                                  size_t y_bytes, long long cycles) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  const size_t step = size_t{gridDim.x} * blockDim.x;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < x_bytes; i += step) x_dst[i] = x_src[i];
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < y_bytes; i += step) y_dst[i] = y_src[i];
}

// The GEMM reads what the kernel before it writes (A), and writes what that kernel still reads (C),
// with and without a split of K (whose sum is launched with programmatic dependent launch): the same
// bits as with everything synchronized, and the earlier kernel's copy of C holds C from before the GEMM.
// The GEMM's own kernel is launched without PDL (measured: with CUTLASS_ENABLE_GDC_FOR_SM90 and PDL,
// back-to-back 64x128 GEMMs at 128 x 8192 x 8192 went from 37.9 to 42.5 us); this guards whoever
// turns it on.
TEST(GemmGpuPdl, WaitsForTheKernelBeforeIt) {
  IRIS_TEST_REQUIRE_GEMM_CORE(1);
  DecodeGemm g(7);
  DeviceBuffer& a_true = g.a;  // the GEMM reads `a`, which the slow kernel fills from here
  DeviceBuffer& c = g.c;
  DeviceBuffer a(a_true.bytes), c_before(c.bytes);
  cudaStream_t stream;
  IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // 0: the automatic split (none on few SMs); 4: a split on every device.
  for (int split : {1, 0, 4}) {
    GemmArguments args = g.args(a.ptr);
    args.split_k = split;
    if (split == 4) ASSERT_EQ(resolved_split_k(args), 4);
    const size_t ws_bytes = workspace_size(args);
    DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    // Everything synchronized: the expected C.
    IRIS_CUDA_CHECK(cudaMemcpy(a.ptr, a_true.ptr, a.bytes, cudaMemcpyDeviceToDevice));
    gemm(args, ws.ptr, stream);
    IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto expected = c.download();
    // A zeroed, then written by a slow kernel right before the GEMM; C poisoned, then copied by it.
    IRIS_CUDA_CHECK(cudaMemset(a.ptr, 0, a.bytes));
    IRIS_CUDA_CHECK(cudaMemset(c.ptr, 0x5A, c.bytes));
    IRIS_CUDA_CHECK(cudaDeviceSynchronize());
    copies_after_spin<<<132, 256, 0, stream>>>(static_cast<const char*>(a_true.ptr), static_cast<char*>(a.ptr), a.bytes,
                                               static_cast<const char*>(c.ptr), static_cast<char*>(c_before.ptr),
                                               c.bytes, 4000000);  // ~2 ms
    gemm(args, ws.ptr, stream);
    IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(c.download() == expected) << "split_k " << split << ": the GEMM read A before the kernel wrote it";
    const auto before = c_before.download();
    for (size_t i = 0; i < c_before.bytes; ++i)
      ASSERT_EQ(before[i], static_cast<char>(0x5A))
          << "split_k " << split << ": the GEMM wrote C before the kernel read it";
  }
  IRIS_CUDA_CHECK(cudaStreamDestroy(stream));
}

// ---- fused ops: host layer on real contexts ---------------------------------------------------------

using test::RankSetup;


class FusedOpsGpu : public ::testing::TestWithParam<RankSetup> {};

// Every op: the preamble prepares the workspace on the heap and a call with those blocks runs. The
// founding regression on the real heap: 128x128 blocks, then 64x64 blocks (with one rank: 16 locks, 64
// needed, in every op); the capacity check must name the undersized lock array, in the preamble and at
// launch alike. A tile set by hand sets all three block sizes (FusedConfig::validate); before
// 2026-12-03 this test set only M and N and was refused for block_size_k = 0 since the tile became
// automatic (2026-12-02); the GPU runs since had selected *FusedGpu* and *GemmGpu*, which its suite
// does not match.
TEST_P(FusedOpsGpu, PreamblesPrepareAndSmallerBlocksFindTheLockArrayTooSmall) {
  IRIS_TEST_REQUIRE_GEMM_CORE(GetParam());
  test::run_ranks(GetParam(), [](Context& ctx) {
    const int w = ctx.world_size();
    const int64_t m = 512, n = 512, k = 256;
    // Zeroed inputs: the run's result is not checked here, only that it runs and finishes.
    DeviceBuffer a(m * k * 2), b(k * n * 2), c(m * n * 2);
    IRIS_CUDA_CHECK(cudaMemset(a.ptr, 0, a.bytes));
    IRIS_CUDA_CHECK(cudaMemset(b.ptr, 0, b.bytes));
    auto big = FusedConfig{};
    big.block_size_m = kGemmTileSmall.m;  // 128 x 128 x 64
    big.block_size_n = kGemmTileSmall.n;
    big.block_size_k = kGemmTileSmall.k;
    auto small = big;
    small.block_size_m = kGemmTileTiny.m;  // 64 x 64 x 64
    small.block_size_n = kGemmTileTiny.n;
    small.block_size_k = kGemmTileTiny.k;
    struct Op {
      const char* name;
      void (*preamble)(Context&, const MatmulOperands&, const FusedConfig&, FusedWorkspace&);
      void (*run)(Context&, const MatmulOperands&, const FusedConfig&, FusedWorkspace&, cudaStream_t);
      int64_t a_rows, c_rows;
      ccl::AllReduceVariant variant = ccl::AllReduceVariant::kTwoShot;  // matmul_all_reduce's
    };
    // matmul_all_reduce in each of its variants: each holds a lock per tile (before 2026-12-05 only the
    // default two_shot ran here; the host tests covered the others).
    const Op ops[] = {
        {"matmul_all_reduce", matmul_all_reduce_preamble, matmul_all_reduce, m, m, ccl::AllReduceVariant::kAtomic},
        {"matmul_all_reduce", matmul_all_reduce_preamble, matmul_all_reduce, m, m, ccl::AllReduceVariant::kSpinlock},
        {"matmul_all_reduce", matmul_all_reduce_preamble, matmul_all_reduce, m, m, ccl::AllReduceVariant::kOneShot},
        {"matmul_all_reduce", matmul_all_reduce_preamble, matmul_all_reduce, m, m, ccl::AllReduceVariant::kTwoShot},
        {"matmul_reduce_scatter", matmul_reduce_scatter_preamble, matmul_reduce_scatter, m, m / w},
        {"all_gather_matmul", all_gather_matmul_preamble, all_gather_matmul, m / w, m},
        {"matmul_all_gather", matmul_all_gather_preamble, matmul_all_gather, m / w, m},
    };
    for (const Op& op : ops) {
      SCOPED_TRACE(std::string(op.name) + " " + ccl::variant_name(op.variant));
      big.all_reduce_variant = small.all_reduce_variant = op.variant;
      MatmulOperands mm;
      mm.a = Tensor::matrix(a.ptr, kBF16, op.a_rows, k);
      mm.b = Tensor::matrix(b.ptr, kBF16, k, n);
      mm.c = Tensor::matrix(c.ptr, kBF16, op.c_rows, n);
      FusedWorkspace ws;
      op.preamble(ctx, mm, big, ws);
      EXPECT_TRUE(ws.prepared());
      EXPECT_EQ(error_text([&] { op.run(ctx, mm, big, ws, nullptr); }), "(nothing thrown)");
      ctx.synchronize();
      // matmul_all_gather's GEMM tiles each rank's own M/W rows; the others tile a 512x512 product.
      const int64_t rows = std::string(op.name) == "matmul_all_gather" ? m / w : m;
      const std::string lock_msg = "Lock array too small: have " + std::to_string((rows + 127) / 128 * (n / 128)) +
                                   " but need " + std::to_string((rows + 63) / 64 * (n / 64)) +
                                   ". Pre-allocate workspace with the smallest block sizes you intend to use.";
      EXPECT_EQ(error_text([&] { op.preamble(ctx, mm, small, ws); }), lock_msg);
      EXPECT_EQ(error_text([&] { op.run(ctx, mm, small, ws, nullptr); }), lock_msg);
      // No rank frees the workspace while a peer's call may still reach into it.
      ctx.barrier();
      ccl::ContextWorkspaceHost host(ctx);
      ws.release(host);
    }
    ctx.barrier();
  });
}

// A rank whose own validation fails still takes part in the preamble's exchange, so the others raise
// instead of waiting for it.
TEST_P(FusedOpsGpu, InvalidCallOnOneRankMakesEveryRankRaise) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs two ranks to disagree";
  test::run_ranks(GetParam(), [](Context& ctx) {
    const int64_t m = 256, n = 256, k = 128;
    DeviceBuffer a(m * k * 2), b(k * n * 2), c(m * n * 2);
    MatmulOperands mm;
    mm.a = Tensor::matrix(a.ptr, kBF16, m, k);
    mm.b = Tensor::matrix(b.ptr, kBF16, k, n);
    mm.c = Tensor::matrix(c.ptr, kBF16, m, n);
    FusedConfig config;
    const bool culprit = ctx.rank() == ctx.world_size() - 1;
    if (culprit) {  // a whole tile but for its M
      config.block_size_m = 96;
      config.block_size_n = 128;
      config.block_size_k = 64;
    }
    FusedWorkspace ws;
    const std::string what = error_text([&] { matmul_all_reduce_preamble(ctx, mm, config, ws); });
    if (culprit)
      EXPECT_EQ(what, "block_size_m must be 64, 128 or 256 (a Hopper wgmma tile), got 96");
    else
      EXPECT_NE(what.find("Collective parameters differ across ranks"), std::string::npos) << what;
    EXPECT_FALSE(ws.prepared());
    ctx.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, FusedOpsGpu, ::testing::ValuesIn(test::all_rank_setups()), test::rank_setup_name);

}  // namespace
}  // namespace iris::ops
