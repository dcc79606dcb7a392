// gemm_bench: the iris GEMM core (iris::ops::gemm, CUTLASS sm90) against cuBLAS on one GPU, side by
// side on the same buffers: TFLOP/s of each and the ratio iris / cuBLAS, plus the largest difference
// between the two outputs (a sanity check; the tests hold the fp64 reference). Not a test.
//
// Shapes: issue 5's global (M, N, K) = (8192, 8192, 8192), (16384, 4096, 8192), (4096, 8192, 4096),
// (2048, 8192, 8192), (128, 8192, 8192), then the per-rank GEMMs of the fused ops at 128 rows on 2
// ranks: (128, 8192, 4096) (matmul_all_reduce, matmul_reduce_scatter), (128, 4096, 8192)
// (all_gather_matmul), (64, 8192, 8192) (matmul_all_gather), and decode shapes whose output fills at
// most half the SMs even with 64x64 tiles: (128, 2048, 8192), (64, 4096, 8192), (128, 1024, 8192),
// (64, 1024, 8192), (128, 1280, 8192) (a 70B model's QKV projection on 8-way tensor parallelism),
// (32, 2048, 8192), (16, 4096, 4096). bf16 in, bf16 out (or float32 with --out f32), fp32 accumulation, B as K x N and
// as N x K. The automatic choice and every tile of kGemmTiles are timed (the 16- and 32-row tiles only where M is at
// most 4 of their tiles deep), the 128x128 tile with GemmArguments::stream_k ("128x128+sk") where it then runs the
// stream-K kernel, the automatic choice with the automatic split of K (GemmArguments::split_k = 0: "auto:64x64/4" for
// 4 slices) where it splits, and with --splits S1,S2,..., the automatic
// tile with each of those splits ("64x64 split4") at outputs up to 2^25 elements. Each figure is the median of
// --repeats timed batches of --iters launches after a warm-up, each batch one CUDA-graph replay (with --eager, direct
// launches, which add the host's cost per call where it exceeds the GPU's); cuBLAS and every iris row are timed in
// turns within each repeat, so that drift in clocks and power over the run (a sustained GEMM holds an
// H200 at its power limit) falls on all of them alike, not on whichever was timed first.
//
// --shape MxNxK (repeatable) times those shapes instead of the list above.
//
// --bands B1,B2,... adds, for each B, the GEMM as the fused ops' band pipelines run it (src/ops/fused.cc):
// B GEMMs one after the other, each over whole tile rows, with the 128x256 tile (FusedConfig's default
// until 2026-12-02, when the default became the tile select_fused_tile picks) and with the 128x128 tile ("128x256 x4",
// to compare with the "128x256" row); and the same with a source operand added in every band's epilogue ("128x256
// x4+src", as the ring of matmul_reduce_scatter adds its upstream's partial sums; the source is zeros here, so the
// sanity check against cuBLAS still holds: the tests check the sum). What one GPU can show of a band pipeline: what
// cutting the GEMM costs, before any transfer overlaps it.
//
//   gemm_bench [--repeats N] [--iters N] [--out bf16|f32] [--splits S1,S2,...] [--bands B1,B2,...]
//              [--shape MxNxK ...] [--eager] [--json FILE]
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "iris/core/cuda_check.hpp"
#include "iris/ops/gemm.hpp"
#include "iris_bench_clocks.hpp"
#include "iris_bench_util.hpp"

namespace {

struct Shape {
  int64_t m, n, k;
};
constexpr Shape kShapes[] = {{8192, 8192, 8192}, {16384, 4096, 8192}, {4096, 8192, 4096}, {2048, 8192, 8192},
                             {128, 8192, 8192},  {128, 8192, 4096},   {128, 4096, 8192},  {64, 8192, 8192},
                             {128, 2048, 8192},  {64, 4096, 8192},    {128, 1024, 8192},  {64, 1024, 8192},
                             {128, 1280, 8192},  {32, 2048, 8192},    {16, 4096, 4096}};

#define CUBLAS_OK(x)                                                              \
  do {                                                                            \
    cublasStatus_t s_ = (x);                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "cuBLAS error %d at %s:%d\n", int(s_), __FILE__, __LINE__); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = __float2bfloat16(static_cast<float>(x & 0xffff) / 65536.0f - 0.5f);
  }
}

__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_float(float x) { return x; }

template <typename T>
__global__ void max_abs_diff(const T* a, const T* b, size_t n, float* out) {
  float m = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float d = fabsf(to_float(a[i]) - to_float(b[i]));
    m = fmaxf(m, d <= INFINITY ? d : INFINITY);  // fmaxf drops a NaN: the 0xff poison left unwritten counts as inf
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));  // m >= 0
}

// Median microseconds per launch of each of `launches`, timed in turns (iris-bench's time_in_turns):
// every repeat times a batch of `iters` launches of each in order, so that clock and power drift over
// the run falls on all of them alike rather than on whichever was timed first. By default each batch is
// one CUDA graph of `iters` launches (the GPU's time, as decode loops replay them); with eager, the
// launches are direct (and the host's cost per call shows wherever it exceeds the GPU's).
// With `clocks`, also the median SM clock during each one's batches into *mhz (NaN where too short).
std::vector<double> time_us_interleaved(const std::vector<std::function<void()>>& launches, int iters, int repeats,
                                        cudaStream_t stream, bool eager, iris_bench::ClockSampler* clocks,
                                        std::vector<double>* mhz) {
  std::vector<std::unique_ptr<iris_bench::Graph>> graphs;
  std::vector<iris_bench::Turn> turns;
  for (const auto& launch : launches) {
    if (eager) {
      turns.push_back(iris_bench::direct_turn(iters, launch));
      continue;
    }
    graphs.push_back(std::make_unique<iris_bench::Graph>());
    graphs.back()->capture(stream, iters, launch);
    turns.push_back(graphs.back()->turn(stream));
  }
  std::vector<iris_bench::ClockStats> clock;
  const auto times = iris_bench::time_in_turns(stream, turns, /*warmup=*/1, repeats, /*timeout_s=*/120, /*rank=*/0,
                                               "gemm_bench's timed launches", clocks, &clock);
  std::vector<double> median;
  mhz->assign(launches.size(), std::nan(""));
  for (size_t i = 0; i < times.size(); ++i) {
    median.push_back(iris_bench::median(times[i]));
    if (i < clock.size()) (*mhz)[i] = clock[i].sm_mhz;
  }
  return median;
}

// One timed launch of a row: its GEMM, or its band GEMMs one after the other (--bands).
void run_row(const iris::ops::GemmArguments& args, const std::vector<iris::ops::GemmArguments>& bands, void* ws,
             cudaStream_t stream) {
  if (bands.empty()) {
    iris::ops::gemm(args, ws, stream);
    return;
  }
  for (const auto& g : bands) iris::ops::gemm(g, nullptr, stream);
}

}  // namespace

int main(int argc, char** argv) try {
  int repeats = 5, iters = 10;
  bool out_f32 = false, eager = false;
  std::string json;
  std::vector<int> splits, bands;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else if (a == "--eager")
      eager = true;
    else if ((a == "--splits" || a == "--bands") && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) {
        const int v = std::atoi(item.c_str());
        if (v < 1) {
          std::fprintf(stderr, "gemm_bench: %s takes positive integers, e.g. 2,4; got '%s'\n", a.c_str(), argv[i]);
          return 2;
        }
        (a == "--splits" ? splits : bands).push_back(v);
      }
    } else if (a == "--shape" && i + 1 < argc) {
      long long m = 0, n = 0, k = 0;
      char tail = 0;
      if (std::sscanf(argv[++i], "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m <= 0 || n <= 0 || k <= 0) {
        std::fprintf(stderr, "gemm_bench: --shape takes MxNxK with positive sizes, e.g. 16x4096x4096; got '%s'\n",
                     argv[i]);
        return 2;
      }
      shapes.push_back({m, n, k});
    } else if (a == "--out" && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "f32") == 0 || std::strcmp(argv[i + 1], "bf16") == 0))
      out_f32 = std::strcmp(argv[++i], "f32") == 0;
    else {
      std::fprintf(stderr,
                   "usage: gemm_bench [--repeats N] [--iters N] [--out bf16|f32] [--splits S1,S2,...] "
                   "[--bands B1,B2,...] [--shape MxNxK ...] [--eager] [--json FILE]\n");
      return 2;
    }
  }
  if (shapes.empty()) shapes.assign(std::begin(kShapes), std::end(kShapes));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gemm_bench: no CUDA GPU visible; nothing to measure.\n");
    return 0;
  }
  if (!iris::ops::gemm_available()) {
    std::printf("gemm_bench: built without the CUTLASS headers (bash scripts/setup.sh); nothing to measure.\n");
    return 0;
  }
  cudaDeviceProp prop{};
  IRIS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "# gemm_bench on %s (%d SMs): bf16 in, %s out, fp32 accumulation; ratio = iris / cuBLAS TFLOP/s; %s, median of "
      "%d batches of %d\n",
      prop.name, prop.multiProcessorCount, out_f32 ? "f32" : "bf16",
      eager ? "direct launches (--eager)" : "CUDA-graph replays", repeats, iters);
  const iris::DType c_dtype = out_f32 ? iris::DType::kFloat32 : iris::DType::kBFloat16;
  const size_t c_size = out_f32 ? 4 : 2;
  const cudaDataType_t c_cuda = out_f32 ? CUDA_R_32F : CUDA_R_16BF;
  std::printf("%7s %6s %6s %3s %-16s %9s %9s %9s %7s %10s\n", "M", "N", "K", "B", "tile", "iris_us", "cublas_us",
              "iris_TF", "ratio", "max|diff|");
  cublasHandle_t handle;
  CUBLAS_OK(cublasCreate(&handle));
  // A blocking stream (ordered with the legacy default stream of the memsets and checks below), given to
  // cuBLAS before its workspace (cublasSetStream resets it): a workspace of our own keeps captures from
  // allocating one.
  cudaStream_t stream;
  IRIS_CUDA_CHECK(cudaStreamCreate(&stream));
  iris_bench::ClockSampler clocks(0);
  std::printf(
      "# SM MHz: median SM clock (NVML, every ms) during iris's / cuBLAS's batches; %s\n",
      clocks.available() ? "'-' where the batches are too short to sample" : ("not sampled: " + clocks.why()).c_str());
  CUBLAS_OK(cublasSetStream(handle, stream));
  void* blas_ws = nullptr;
  constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
  IRIS_CUDA_CHECK(cudaMalloc(&blas_ws, kBlasWorkspaceBytes));
  CUBLAS_OK(cublasSetWorkspace(handle, blas_ws, kBlasWorkspaceBytes));
  size_t max_a = 0, max_b = 0, max_c = 0;
  for (const Shape& s : shapes) {
    max_a = std::max<size_t>(max_a, s.m * s.k);
    max_b = std::max<size_t>(max_b, s.k * s.n);
    max_c = std::max<size_t>(max_c, s.m * s.n);
  }
  __nv_bfloat16 *a, *b;
  void *c_iris, *c_ref, *c_src = nullptr;
  float* diff;
  IRIS_CUDA_CHECK(cudaMalloc(&a, max_a * 2));
  IRIS_CUDA_CHECK(cudaMalloc(&b, max_b * 2));
  IRIS_CUDA_CHECK(cudaMalloc(&c_iris, max_c * c_size));
  IRIS_CUDA_CHECK(cudaMalloc(&c_ref, max_c * c_size));
  IRIS_CUDA_CHECK(cudaMalloc(&diff, sizeof(float)));
  if (!bands.empty()) {
    IRIS_CUDA_CHECK(cudaMalloc(&c_src, max_c * c_size));
    IRIS_CUDA_CHECK(cudaMemset(c_src, 0, max_c * c_size));  // zeros: see --bands
  }
  fill_bf16<<<1024, 256>>>(a, max_a, 1);
  fill_bf16<<<1024, 256>>>(b, max_b, 2);
  IRIS_CUDA_CHECK(cudaDeviceSynchronize());
  std::string out = "[\n";
  bool first = true;
  for (const Shape& s : shapes) {
    for (bool nk : {false, true}) {
      const float one = 1.0f, zero = 0.0f;
      // Row-major C = A @ B is column-major C^T = B^T A^T: cuBLAS's first operand is B.
      auto cublas = [&] {
        CUBLAS_OK(cublasGemmEx(handle, nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, &one, b, CUDA_R_16BF,
                               nk ? s.k : s.n, a, CUDA_R_16BF, s.k, &zero, c_ref, c_cuda, s.n, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
      };
      struct Row {
        iris::ops::GemmArguments args;
        std::string name;
        void* ws = nullptr;
        std::vector<iris::ops::GemmArguments> bands;  // --bands: these one after the other instead of args
      };
      std::vector<Row> rows;
      // Each row: a tile (auto: {}), stream_k, split_k.
      struct Variant {
        iris::ops::GemmTile tile;
        bool stream_k = false;
        int split_k = 1;
      };
      std::vector<Variant> variants{{}};
      for (auto t : iris::ops::kGemmTiles)
        if (t.m >= 64 || s.m <= 4 * t.m) variants.push_back({t});  // the 16- and 32-row tiles only near their rows
      variants.push_back({iris::ops::kGemmTileSmall, true});  // the 128x128 tile again, with stream_k
      variants.push_back({{}, false, 0});                     // the automatic tile and split
      for (int sk : splits) variants.push_back({{}, false, sk});
      for (const Variant& v : variants) {
        Row row;
        iris::ops::GemmArguments& args = row.args;
        args.a = iris::Tensor::matrix(a, iris::DType::kBFloat16, s.m, s.k);
        args.b = nk ? iris::Tensor::matrix(b, iris::DType::kBFloat16, s.n, s.k)
                    : iris::Tensor::matrix(b, iris::DType::kBFloat16, s.k, s.n);
        args.b_is_nk = nk;
        args.c = iris::Tensor::matrix(c_iris, c_dtype, s.m, s.n);
        args.tile = v.tile;
        args.stream_k = v.stream_k;
        args.split_k = v.split_k;
        if (!iris::ops::can_implement(args).empty()) continue;  // a split K does not divide into
        const auto resolved = iris::ops::resolved_tile(args);
        const int split = iris::ops::resolved_split_k(args);
        const size_t ws_bytes = iris::ops::workspace_size(args);
        if (v.stream_k && ws_bytes == 0) continue;   // the data-parallel kernel: the same as the 128x128 row
        if (v.split_k == 0 && split == 1) continue;  // no split: the same as the auto row
        if (v.split_k > 1 && s.m * s.n > (int64_t{1} << 25)) continue;  // large outputs fill the SMs unsplit
        if (ws_bytes > 0) IRIS_CUDA_CHECK(cudaMalloc(&row.ws, ws_bytes));
        char tname[32];
        if (v.split_k > 1)  // an explicit split of the automatic tile
          std::snprintf(tname, sizeof tname, "%dx%d split%d", resolved.m, resolved.n, split);
        else
          std::snprintf(tname, sizeof tname, "%s%dx%d%s", v.tile.is_auto() ? "auto:" : "", resolved.m, resolved.n,
                        v.stream_k  ? "+sk"
                        : split > 1 ? ("/" + std::to_string(split)).c_str()
                                    : "");
        row.name = tname;
        rows.push_back(row);
      }
      // --bands: the two large tiles, without a split of K (the fused pipelines never split), over B
      // bands of whole tile rows: tile rows [T b / B, T (b + 1) / B) of the T = ceil(M / tile_m), as fused.cc
      // cuts them.
      for (iris::ops::GemmTile band_tile : {iris::ops::kGemmTileLarge, iris::ops::kGemmTileSmall})
        for (int nb : bands) {
          for (bool with_source : {false, true}) {
            Row row;
            iris::ops::GemmArguments whole;
            whole.a = iris::Tensor::matrix(a, iris::DType::kBFloat16, s.m, s.k);
            whole.b = nk ? iris::Tensor::matrix(b, iris::DType::kBFloat16, s.n, s.k)
                         : iris::Tensor::matrix(b, iris::DType::kBFloat16, s.k, s.n);
            whole.b_is_nk = nk;
            whole.c = iris::Tensor::matrix(c_iris, c_dtype, s.m, s.n);
            whole.tile = band_tile;
            const int64_t tiles_m = (s.m + whole.tile.m - 1) / whole.tile.m;
            if (nb > tiles_m) break;
            for (int bi = 0; bi < nb; ++bi) {
              const int64_t r0 = tiles_m * bi / nb * whole.tile.m;
              const int64_t r1 = std::min<int64_t>(s.m, tiles_m * (bi + 1) / nb * whole.tile.m);
              iris::ops::GemmArguments g = whole;
              g.a = iris::Tensor::matrix(a + r0 * s.k, iris::DType::kBFloat16, r1 - r0, s.k);
              g.c = iris::Tensor::matrix(static_cast<char*>(c_iris) + r0 * s.n * c_size, c_dtype, r1 - r0, s.n);
              if (with_source)
                g.source = iris::Tensor::matrix(static_cast<char*>(c_src) + r0 * s.n * c_size, c_dtype, r1 - r0, s.n);
              if (!iris::ops::can_implement(g).empty() || iris::ops::workspace_size(g) != 0) {
                row.bands.clear();
                break;
              }
              row.bands.push_back(g);
            }
            if (row.bands.empty()) continue;
            row.args = whole;
            row.name = std::to_string(whole.tile.m) + "x" + std::to_string(whole.tile.n) + " x" + std::to_string(nb) +
                       (with_source ? "+src" : "");
            rows.push_back(row);
          }
        }
      std::vector<std::function<void()>> launches{cublas};
      for (const Row& row : rows) launches.push_back([&row, stream] { run_row(row.args, row.bands, row.ws, stream); });
      std::vector<double> mhz;
      const std::vector<double> t_us = time_us_interleaved(launches, iters, repeats, stream, eager, &clocks, &mhz);
      auto mhz_text = [&](size_t i) { return std::isfinite(mhz[i]) ? std::to_string(std::lround(mhz[i])) : "-"; };
      auto mhz_json = [&](size_t i) { return std::isfinite(mhz[i]) ? std::to_string(std::lround(mhz[i])) : "null"; };
      const double t_ref = t_us[0] * 1e-3;  // ms
      for (size_t ri = 0; ri < rows.size(); ++ri) {
        const Row& row = rows[ri];
        const double t_iris = t_us[ri + 1] * 1e-3;
        // The difference from cuBLAS's output (c_ref holds the last cuBLAS launch's result), on a
        // poisoned output.
        IRIS_CUDA_CHECK(cudaMemset(c_iris, 0xff, s.m * s.n * c_size));
        run_row(row.args, row.bands, row.ws, stream);
        IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
        IRIS_CUDA_CHECK(cudaMemset(diff, 0, sizeof(float)));
        if (out_f32)
          max_abs_diff<<<264, 256>>>(static_cast<const float*>(c_iris), static_cast<const float*>(c_ref), s.m * s.n,
                                     diff);
        else
          max_abs_diff<<<264, 256>>>(static_cast<const __nv_bfloat16*>(c_iris),
                                     static_cast<const __nv_bfloat16*>(c_ref), s.m * s.n, diff);
        float d = 0;
        IRIS_CUDA_CHECK(cudaMemcpy(&d, diff, sizeof(float), cudaMemcpyDeviceToHost));
        const double flop = 2.0 * s.m * s.n * s.k;
        const double tf_iris = flop / (t_iris * 1e-3) / 1e12, tf_ref = flop / (t_ref * 1e-3) / 1e12;
        const char* tname = row.name.c_str();
        std::printf("%7lld %6lld %6lld %3s %-16s %9.1f %9.1f %9.1f %7.3f %10.4f   (cuBLAS %.1f TF; SM MHz %s/%s)\n",
                    (long long)s.m, (long long)s.n, (long long)s.k, nk ? "NK" : "KN", tname, t_iris * 1e3, t_ref * 1e3,
                    tf_iris, tf_iris / tf_ref, d, tf_ref, mhz_text(ri + 1).c_str(), mhz_text(0).c_str());
        // An unwritten or NaN element makes d infinite: JSON has no inf, so it is null there ("inf" in the table).
        char diff_text[32] = "null";
        if (std::isfinite(d)) std::snprintf(diff_text, sizeof diff_text, "%.5f", d);
        const std::string diff_json = diff_text;
        char line[640];
        std::snprintf(line, sizeof line,
                      "%s  {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"b\": \"%s\", \"tile\": \"%s\", \"iris_us\": %.2f, "
                      "\"cublas_us\": %.2f, \"iris_tflops\": %.1f, \"cublas_tflops\": %.1f, \"ratio\": %.3f, "
                      "\"max_abs_diff\": %s, \"iris_sm_mhz\": %s, \"cublas_sm_mhz\": %s}",
                      first ? "" : ",\n", (long long)s.m, (long long)s.n, (long long)s.k, nk ? "nk" : "kn", tname,
                      t_iris * 1e3, t_ref * 1e3, tf_iris, tf_ref, tf_iris / tf_ref, diff_json.c_str(),
                      mhz_json(ri + 1).c_str(), mhz_json(0).c_str());
        out += line;
        first = false;
      }
      for (const Row& row : rows)
        if (row.ws != nullptr) IRIS_CUDA_CHECK(cudaFree(row.ws));
    }
  }
  out += "\n]\n";
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (f) {
      std::fputs(out.c_str(), f);
      std::fclose(f);
    }
  }
  cublasDestroy(handle);
  if (c_src != nullptr) cudaFree(c_src);
  cudaFree(blas_ws);
  cudaStreamDestroy(stream);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gemm_bench: %s\n", e.what());
  return 1;
}
