// iris-bench --fused: each iris::ops fused GEMM + communication op against the sequential path it
// replaces, a cuBLAS GEMM and the NCCL collective one after the other, on the same heap buffers.
//
// For each op and global (M, N, K), every rank allocates its A, B and C on the iris heap (plus the
// sequential path's intermediate buffer and a copy of its result), fills A and B with random bf16
// values (different on every rank; matmul_all_gather's B is the same on every rank, as the op
// assumes), then:
//   1. sequential: one eager call, whose C is saved as the reference, then `iters` calls captured into
//      a CUDA graph (cuBLAS and NCCL both capture);
//   2. GEMM only: that GEMM alone, captured the same way after one eager call;
//   3. fused, per variant: the preamble (outside any capture: it allocates and talks to the other
//      ranks), one eager call into a poisoned C that is compared with the reference, then a graph of
//      `iters` calls (when the capture throws, direct launches instead, and the row says so);
//   4. per variant, the three graphs replayed in turns (warm-up rounds, then timed rounds), so that
//      none gains from its place in the run: a GPU at its power limit runs whatever follows an idle
//      gap faster. The sequential and GEMM graphs are timed again with every variant;
//   5. A changes (a new seed on every rank) and the sequential path runs once on it for a new reference;
//      one direct fused call (the first on the new A), then one more fused replay, each into a poisoned C,
//      is compared with that, so a tile read from a peer's earlier call shows (every timed call has the
//      same inputs; of the replay's `iters` calls only the last is seen); then A and the reference are set
//      back.
// With --eager, steps 1-3 capture nothing and steps 4-5 make batches of `iters` direct calls instead of
// replays, for the three paths alike (the host's cost per call shows where it exceeds the GPU's).
// Times are medians over the timed replays per rank, then the maximum over ranks. As in the
// collective tables, every fallible step ends with an agreement between the ranks, so a failure (an
// op that is not implemented, an exhausted heap) marks that column on every rank and the run goes on.
#include "iris_bench_fused.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "iris/ccl/config.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"
#include "iris/ops/fused.hpp"
#include "iris_bench_ccl.hpp"
#include "iris_bench_data.hpp"
#include "iris_bench_util.hpp"

namespace iris_bench {
namespace {

using Bf16 = __nv_bfloat16;
constexpr iris::DType kDType = iris::DType::kBFloat16;
constexpr size_t kElemBytes = sizeof(Bf16);

// The heap hands out whole multiples of 256 bytes.
size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// ---- per-rank geometry ------------------------------------------------------------------------------

// One rank's share of a global (M, N, K) for one op (include/iris/ops/fused.hpp has the rules).
struct Layout {
  int64_t a_rows = 0, a_cols = 0;              // A_r
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;  // this rank's GEMM, the same in both paths
  int64_t c_rows = 0, c_cols = 0;              // C
  int64_t scratch_elems = 0;                   // the sequential path's intermediate buffer (0: none)
  std::string why_not;                         // non-empty when the shape does not split over the ranks

  size_t a_bytes() const { return static_cast<size_t>(a_rows * a_cols) * kElemBytes; }
  size_t b_bytes() const { return static_cast<size_t>(gemm_k * gemm_n) * kElemBytes; }
  size_t c_elems() const { return static_cast<size_t>(c_rows * c_cols); }
  size_t c_bytes() const { return c_elems() * kElemBytes; }
  size_t scratch_bytes() const { return static_cast<size_t>(scratch_elems) * kElemBytes; }
};

Layout layout_for(FusedOp op, const FusedShape& s, int world) {
  Layout l;
  const int64_t w = world;
  auto divisible = [&](int64_t value, const char* name) {
    if (value % w != 0 && l.why_not.empty())
      l.why_not =
          std::string(name) + " = " + std::to_string(value) + " does not split over " + std::to_string(w) + " ranks";
  };
  switch (op) {
    case FusedOp::kMatmulAllReduce:  // K sharded; every rank holds the summed M x N
      divisible(s.k, "K");
      l.a_rows = s.m, l.a_cols = s.k / w;
      l.gemm_m = s.m, l.gemm_n = s.n, l.gemm_k = s.k / w;
      l.c_rows = s.m, l.c_cols = s.n;
      break;
    case FusedOp::kMatmulReduceScatter:  // K sharded; rank r keeps rows r*M/W.. of the sum
      divisible(s.k, "K");
      divisible(s.m, "M");
      l.a_rows = s.m, l.a_cols = s.k / w;
      l.gemm_m = s.m, l.gemm_n = s.n, l.gemm_k = s.k / w;
      l.c_rows = s.m / w, l.c_cols = s.n;
      l.scratch_elems = s.m * s.n;  // the M x N partial product the reduce-scatter reads
      break;
    case FusedOp::kAllGatherMatmul:  // A row-sharded, B column-sharded (N_r = N/W)
      divisible(s.m, "M");
      divisible(s.n, "N");
      l.a_rows = s.m / w, l.a_cols = s.k;
      l.gemm_m = s.m, l.gemm_n = s.n / w, l.gemm_k = s.k;
      l.c_rows = s.m, l.c_cols = s.n / w;
      l.scratch_elems = s.m * s.k;  // the gathered M x K A
      break;
    case FusedOp::kMatmulAllGather:  // A row-sharded; every rank holds all M rows of A @ B
      divisible(s.m, "M");
      l.a_rows = s.m / w, l.a_cols = s.k;
      l.gemm_m = s.m / w, l.gemm_n = s.n, l.gemm_k = s.k;
      l.c_rows = s.m, l.c_cols = s.n;
      break;
    case FusedOp::kAllGatherMatmulKSharded:  // A column-sharded (K/W each), B whole; every rank holds A @ B
      divisible(s.k, "K");
      l.a_rows = s.m, l.a_cols = s.k / w;
      l.gemm_m = s.m, l.gemm_n = s.n, l.gemm_k = s.k;
      l.c_rows = s.m, l.c_cols = s.n;
      l.scratch_elems = 2 * s.m * s.k;  // the all-gathered W blocks of M x K/W, then the M x K A they make
      break;
  }
  return l;
}

iris::ops::MatmulOperands operands(const Layout& l, void* a, void* b, void* c, bool b_nk) {
  iris::ops::MatmulOperands mm;
  mm.a = iris::Tensor::matrix(a, kDType, l.a_rows, l.a_cols);
  mm.b =
      b_nk ? iris::Tensor::matrix(b, kDType, l.gemm_n, l.gemm_k) : iris::Tensor::matrix(b, kDType, l.gemm_k, l.gemm_n);
  mm.c = iris::Tensor::matrix(c, kDType, l.c_rows, l.c_cols);
  mm.b_is_nk = b_nk;
  return mm;
}

// ---- the ops ----------------------------------------------------------------------------------------

struct Variant {
  std::string name;  // "-" when the op has no variants
  iris::ops::FusedConfig config;
};

// Every row of an op: matmul_all_reduce once per fused variant (atomic, spinlock, one_shot, two_shot),
// the others once with the default config.
// With --fused-copy both, each of those twice: copy engines, then copy kernels beside the GEMM ("+sm").
// Every row runs the tile the GEMM core advises for this rank's GEMM among the fused tiles
// (select_fused_tile), which is what FusedConfig's default (block sizes 0) resolves to; set here so the
// row can print it.
std::vector<Variant> variants_for(FusedOp op, const Options& o, const Layout& l, int device_sms) {
  const iris::ops::GemmTile tile = iris::ops::select_fused_tile(l.gemm_m, l.gemm_n, l.gemm_k, o.fused_b_nk, device_sms);
  std::vector<Variant> base;
  if (op != FusedOp::kMatmulAllReduce) {
    base.push_back(Variant{"-", {}});
  } else {
    for (auto v : {iris::ccl::AllReduceVariant::kAtomic, iris::ccl::AllReduceVariant::kSpinlock,
                   iris::ccl::AllReduceVariant::kOneShot, iris::ccl::AllReduceVariant::kTwoShot}) {
      Variant x{iris::ccl::variant_name(v), {}};
      x.config.all_reduce_variant = v;
      base.push_back(std::move(x));
    }
  }
  for (Variant& v : base) {
    v.config.comm_sms = o.fused_comm_sms;
    v.config.min_band_tiles = o.fused_min_band_tiles;
    v.config.block_size_m = tile.m;
    v.config.block_size_n = tile.n;
    v.config.block_size_k = tile.k;
  }
  std::vector<Variant> out;
  for (const Variant& v : base) {
    // atomic and spinlock add on SMs whatever copy_engine says: one row each.
    const auto av = v.config.all_reduce_variant;
    if (op == FusedOp::kMatmulAllReduce &&
        (av == iris::ccl::AllReduceVariant::kAtomic || av == iris::ccl::AllReduceVariant::kSpinlock)) {
      out.push_back(v);
      continue;
    }
    if (o.fused_copy_engine) out.push_back(v);
    if (o.fused_copy_sm) {
      Variant x = v;
      x.name = v.name == "-" ? "sm" : v.name + "+sm";
      x.config.copy_engine = false;
      out.push_back(std::move(x));
    }
  }
  return out;
}

iris::ops::FusedPlan plan_for(FusedOp op, const iris::ops::MatmulOperands& mm, const iris::ops::FusedConfig& cfg,
                              int world, int device_sms) {
  switch (op) {
    case FusedOp::kMatmulAllReduce:
      return iris::ops::plan_matmul_all_reduce(mm, cfg, world, device_sms);
    case FusedOp::kMatmulReduceScatter:
      return iris::ops::plan_matmul_reduce_scatter(mm, cfg, world, device_sms);
    case FusedOp::kAllGatherMatmul:
      return iris::ops::plan_all_gather_matmul(mm, cfg, world, device_sms);
    case FusedOp::kMatmulAllGather:
      return iris::ops::plan_matmul_all_gather(mm, cfg, world, device_sms);
    case FusedOp::kAllGatherMatmulKSharded:
      return iris::ops::plan_all_gather_matmul_k_sharded(mm, cfg, world, device_sms);
  }
  throw iris::InvalidArgument("iris-bench: unknown fused op");
}

void fused_preamble(FusedOp op, iris::Context& ctx, const iris::ops::MatmulOperands& mm,
                    const iris::ops::FusedConfig& cfg, iris::ops::FusedWorkspace& ws) {
  switch (op) {
    case FusedOp::kMatmulAllReduce:
      return iris::ops::matmul_all_reduce_preamble(ctx, mm, cfg, ws);
    case FusedOp::kMatmulReduceScatter:
      return iris::ops::matmul_reduce_scatter_preamble(ctx, mm, cfg, ws);
    case FusedOp::kAllGatherMatmul:
      return iris::ops::all_gather_matmul_preamble(ctx, mm, cfg, ws);
    case FusedOp::kMatmulAllGather:
      return iris::ops::matmul_all_gather_preamble(ctx, mm, cfg, ws);
    case FusedOp::kAllGatherMatmulKSharded:
      return iris::ops::all_gather_matmul_k_sharded_preamble(ctx, mm, cfg, ws);
  }
}

void fused_call(FusedOp op, iris::Context& ctx, const iris::ops::MatmulOperands& mm, const iris::ops::FusedConfig& cfg,
                iris::ops::FusedWorkspace& ws, cudaStream_t stream) {
  switch (op) {
    case FusedOp::kMatmulAllReduce:
      return iris::ops::matmul_all_reduce(ctx, mm, cfg, ws, stream);
    case FusedOp::kMatmulReduceScatter:
      return iris::ops::matmul_reduce_scatter(ctx, mm, cfg, ws, stream);
    case FusedOp::kAllGatherMatmul:
      return iris::ops::all_gather_matmul(ctx, mm, cfg, ws, stream);
    case FusedOp::kMatmulAllGather:
      return iris::ops::matmul_all_gather(ctx, mm, cfg, ws, stream);
    case FusedOp::kAllGatherMatmulKSharded:
      return iris::ops::all_gather_matmul_k_sharded(ctx, mm, cfg, ws, stream);
  }
}

// ---- device helpers ---------------------------------------------------------------------------------

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  return static_cast<unsigned>(std::clamp<size_t>((n + kThreads - 1) / kThreads, 1, 1024));
}

// Uniform in [-1, 1): every element distinct in expectation, so a misplaced tile or a rank's missing
// contribution shows in the comparison (integer-valued inputs would make many outputs coincide).
__global__ void fill_uniform_kernel(Bf16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint64_t h = mix64(seed ^ mix64(i));
    p[i] = __float2bfloat16(static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
}

// stats[0] = max |ref|, stats[1] = max |out - ref|, as float bits: non-negative floats order like their
// bits, so atomicMax on the bits is a float max. A NaN difference is recorded as +inf.
__global__ void max_diff_kernel(const Bf16* out, const Bf16* ref, size_t n, unsigned* stats) {
  float ref_max = 0.0f, diff_max = 0.0f;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float r = __bfloat162float(ref[i]);
    float d = fabsf(__bfloat162float(out[i]) - r);
    if (isnan(d)) d = INFINITY;
    ref_max = fmaxf(ref_max, fabsf(r));
    diff_max = fmaxf(diff_max, d);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    ref_max = fmaxf(ref_max, __shfl_xor_sync(0xffffffffu, ref_max, offset));
    diff_max = fmaxf(diff_max, __shfl_xor_sync(0xffffffffu, diff_max, offset));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&stats[0], __float_as_uint(ref_max));
    atomicMax(&stats[1], __float_as_uint(diff_max));
  }
}

// *count += elements with |out - ref| beyond rel_tol * max |ref| (NaN included), after max_diff_kernel.
__global__ void count_beyond_kernel(const Bf16* out, const Bf16* ref, size_t n, const unsigned* stats, float rel_tol,
                                    unsigned long long* count) {
  const float tol = rel_tol * __uint_as_float(stats[0]);
  unsigned long long beyond = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float d = fabsf(__bfloat162float(out[i]) - __bfloat162float(ref[i]));
    if (!(d <= tol)) ++beyond;
  }
  for (int offset = 16; offset > 0; offset /= 2) beyond += __shfl_xor_sync(0xffffffffu, beyond, offset);
  if ((threadIdx.x & 31) == 0 && beyond > 0) atomicAdd(count, beyond);
}

struct DeviceStats {
  unsigned maxima[2];
  unsigned long long beyond;
};

// One comparison of C with the reference on this rank.
struct Diff {
  double rel = 0;      // max |out - ref| / max |ref| (the absolute difference when ref is all zeros)
  int64_t beyond = 0;  // elements beyond the tolerance
};

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw iris::Error(std::string(call) + " failed: " + cublasGetStatusString(status));
}

// A column from what time_together measured.
void record_time(const TurnTime& t, Column& c) {
  c.ran = true;
  if (t.error.empty()) {
    c.time_us = t.us;
    c.sm_mhz = t.sm_mhz;
    c.power_capped = t.power_capped;
  } else {
    c.error = t.error;
  }
}

Problem nccl_problem(Op op, size_t count, int world) {
  Problem p;
  p.op = op;
  p.dtype = kDType;
  p.world = world;
  p.count = count;
  return p;
}

// The sequential path's collective (seq_call below): the op and the count it is called with.
struct SeqCollective {
  Op op;
  size_t count;
};
SeqCollective seq_collective(FusedOp op, const Layout& l) {
  switch (op) {
    case FusedOp::kMatmulAllReduce:
      return {Op::kAllReduce, static_cast<size_t>(l.c_elems())};
    case FusedOp::kMatmulReduceScatter:
      return {Op::kReduceScatter, static_cast<size_t>(l.scratch_elems)};
    case FusedOp::kAllGatherMatmul:
    case FusedOp::kAllGatherMatmulKSharded:
      return {Op::kAllGather, static_cast<size_t>(l.a_rows * l.a_cols)};
    case FusedOp::kMatmulAllGather:
      break;
  }
  return {Op::kAllGather, static_cast<size_t>(l.gemm_m * l.c_cols)};
}

}  // namespace

size_t fused_heap_bytes(const Options& o, int world, int device_sms) {
  size_t most = 0;
  for (FusedOp op : kAllFusedOps) {
    for (const FusedShape& s : o.fused_shapes) {
      const Layout l = layout_for(op, s, world);
      if (!l.why_not.empty()) continue;
      // A, B, C, the saved sequential result (C's size) and the sequential path's intermediate buffer.
      const size_t buffers = align256(l.a_bytes()) + align256(l.b_bytes()) + 2 * align256(l.c_bytes()) +
                             (l.scratch_elems > 0 ? align256(l.scratch_bytes()) : 0);
      // Without NCCL the reference's iris::ccl collective holds its workspace, before the op.
      if (!o.nccl && o.check) {
        const SeqCollective sc = seq_collective(op, l);
        const Problem p = nccl_problem(sc.op, sc.count, world);
        try {
          most = std::max(
              most, buffers + iris::ccl::heap_bytes(iris_needs(p, output_tensor(p, nullptr), input_tensor(p, nullptr),
                                                               iris::ccl::Config{})));
        } catch (const std::exception&) {
          // Rejected arguments: the row reports the reference's failure when it runs.
        }
      }
      // Stand-in addresses: the plans read the views' shapes, types and alignment (and that C overlaps
      // neither input), never the memory, so disjoint aligned addresses plan what the heap buffers will.
      char* base = reinterpret_cast<char*>(uintptr_t{1} << 40);
      char* b = base + align256(l.a_bytes());
      char* c = b + align256(l.b_bytes());
      const iris::ops::MatmulOperands mm = operands(l, base, b, c, o.fused_b_nk);
      for (const Variant& v : variants_for(op, o, l, device_sms)) {
        try {
          const iris::ops::FusedPlan plan = plan_for(op, mm, v.config, world, device_sms);
          most = std::max(most, buffers + iris::ops::heap_bytes(plan));
        } catch (const std::exception&) {
          // Rejected arguments: the row reports the plan's message when it runs.
        }
      }
    }
  }
  return most;
}

struct FusedRunner::Impl {
  iris::Context& ctx;
  const Options& o;
  NcclComm* nccl;
  std::string no_nccl_reason;
  Aligner& align;
  cublasHandle_t blas = nullptr;
  void* blas_workspace = nullptr;
  DeviceStats* stats = nullptr;
  int device_sms = 0;

  Impl(iris::Context& c, const Options& opts, NcclComm* n, std::string reason, Aligner& a)
      : ctx(c), o(opts), nccl(n), no_nccl_reason(std::move(reason)), align(a) {}

  ~Impl() {
    cudaSetDevice(ctx.device());
    if (blas) cublasDestroy(blas);
    if (blas_workspace) cudaFree(blas_workspace);
    if (stats) cudaFree(stats);
  }

  void init() {
    IRIS_CUDA_CHECK(cudaSetDevice(ctx.device()));
    IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, ctx.device()));
    check_cublas(cublasCreate(&blas), "cublasCreate");
    // cublasSetStream resets the workspace to cuBLAS's default pool, so the stream goes first. A
    // workspace of our own (32 MiB, cuBLAS's recommendation for Hopper) keeps graph captures from
    // allocating one.
    check_cublas(cublasSetStream(blas, ctx.stream()), "cublasSetStream");
    constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
    IRIS_CUDA_CHECK(cudaMalloc(&blas_workspace, kBlasWorkspaceBytes));
    check_cublas(cublasSetWorkspace(blas, blas_workspace, kBlasWorkspaceBytes), "cublasSetWorkspace");
    IRIS_CUDA_CHECK(cudaMalloc(&stats, sizeof(DeviceStats)));
  }

  // Row-major C (m x n, row stride ldc) = A (m x k) @ B, B k x n or (b_nk) n x k: bf16 in and out, fp32
  // accumulation. cuBLAS is column-major, where the same memory holds C^T = B^T A^T: B goes first.
  void gemm(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, int64_t ldc) {
    const float one = 1.0f, zero = 0.0f;
    const bool nk = o.fused_b_nk;
    check_cublas(cublasGemmEx(blas, nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                              static_cast<int>(m), static_cast<int>(k), &one, b, CUDA_R_16BF,
                              static_cast<int>(nk ? k : n), a, CUDA_R_16BF, static_cast<int>(k), &zero, c, CUDA_R_16BF,
                              static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }

  void fill(void* p, size_t n, uint64_t seed) {
    fill_uniform_kernel<<<blocks_for(n), kThreads, 0, ctx.stream()>>>(static_cast<Bf16*>(p), n, seed);
    IRIS_CUDA_CHECK(cudaGetLastError());
  }

  Diff compare(const void* out, const void* ref, size_t n) {
    cudaStream_t stream = ctx.stream();
    const auto* o_ptr = static_cast<const Bf16*>(out);
    const auto* r_ptr = static_cast<const Bf16*>(ref);
    IRIS_CUDA_CHECK(cudaMemsetAsync(stats, 0, sizeof(DeviceStats), stream));
    max_diff_kernel<<<blocks_for(n), kThreads, 0, stream>>>(o_ptr, r_ptr, n, stats->maxima);
    count_beyond_kernel<<<blocks_for(n), kThreads, 0, stream>>>(o_ptr, r_ptr, n, stats->maxima,
                                                                static_cast<float>(kFusedRelTolerance), &stats->beyond);
    IRIS_CUDA_CHECK(cudaGetLastError());
    DeviceStats host{};
    IRIS_CUDA_CHECK(cudaMemcpyAsync(&host, stats, sizeof host, cudaMemcpyDeviceToHost, stream));
    wait_stream(stream, "fused check", o.gpu_timeout_s, ctx.rank());
    float ref_max = 0, diff_max = 0;
    std::memcpy(&ref_max, &host.maxima[0], sizeof ref_max);
    std::memcpy(&diff_max, &host.maxima[1], sizeof diff_max);
    Diff d;
    d.rel = ref_max > 0 ? diff_max / ref_max : diff_max;
    d.beyond = static_cast<int64_t>(host.beyond);
    return d;
  }

  // Without NCCL, the reference's collective: iris::ccl's (auto variant), eager, in a workspace of its own,
  // on the tensors the collective tables use. Its results are checked exactly against the host there.
  void iris_collective(Op op, size_t count, const void* in, void* out) {
    const Problem p = nccl_problem(op, count, ctx.world_size());
    const iris::Tensor tin = input_tensor(p, const_cast<void*>(in)), tout = output_tensor(p, out);
    const iris::ccl::Config cfg;
    iris::ccl::Workspace ws;
    iris::ccl::ContextWorkspaceHost host(ctx);
    iris_preamble(ctx, p, tout, tin, cfg, ws);
    iris_call(ctx, p, tout, tin, cfg, ws, ctx.stream());
    wait_stream(ctx.stream(), "the reference's iris::ccl collective", o.gpu_timeout_s, ctx.rank());
    ctx.check_device_error();
    ws.release(host);
  }

  std::vector<FusedRecord> run(FusedOp op, const FusedShape& shape, uint64_t run_id);
  // Returns false when the inputs could not be set back after the check (set_inputs(false) failed).
  bool run_variant(FusedRecord& r, FusedOp op, const Layout& l, const Variant& v, void* a, void* b, void* c,
                   const void* ref, bool have_ref, const Timed& seq, const Timed& gemm_only,
                   const std::function<std::string(bool)>& set_inputs);
};

std::vector<FusedRecord> FusedRunner::Impl::run(FusedOp op, const FusedShape& shape, uint64_t run_id) {
  const int world = ctx.world_size();
  const int rank = ctx.rank();
  cudaStream_t stream = ctx.stream();
  const Layout l = layout_for(op, shape, world);
  const std::vector<Variant> variants = variants_for(op, o, l, device_sms);
  std::vector<FusedRecord> rows(variants.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    FusedRecord& r = rows[i];
    r.op = op;
    r.variant = variants[i].name;
    r.shape = shape;
    r.world = world;
    r.b_nk = o.fused_b_nk;
    const iris::ops::GemmTile t = variants[i].config.tile();
    r.tile = std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k);
  }
  auto fail_all = [&](const std::string& why) {
    for (FusedRecord& r : rows) {
      for (Column* c : {&r.fused, &r.seq, &r.gemm}) {
        c->ran = true;
        c->error = why;
      }
    }
    return rows;
  };
  if (!l.why_not.empty()) return fail_all(l.why_not);

  HeapBuffer a, b, c, scratch, ref;
  std::string err = agree(ctx, try_step([&] {
                            a.alloc(ctx, l.a_bytes());
                            b.alloc(ctx, l.b_bytes());
                            c.alloc(ctx, l.c_bytes());
                            if (l.scratch_elems > 0) scratch.alloc(ctx, l.scratch_bytes());
                            ref.alloc(ctx, l.c_bytes());
                          }));
  if (!err.empty()) return fail_all("heap: " + err);

  const uint64_t seed = mix64(run_id * 1000003ull + static_cast<uint64_t>(op) * 131ull);
  const uint64_t a_seed = mix64(seed ^ (uint64_t{'A'} << 56) ^ static_cast<uint64_t>(rank));
  // matmul_all_gather and all_gather_matmul_k_sharded multiply by one B; the other ops' B is a per-rank shard.
  const int b_rank = op == FusedOp::kMatmulAllGather || op == FusedOp::kAllGatherMatmulKSharded ? 0 : rank;
  err = agree(
      ctx, try_step([&] {
        fill(a.get(), l.a_bytes() / kElemBytes, a_seed);
        fill(b.get(), l.b_bytes() / kElemBytes, mix64(seed ^ (uint64_t{'B'} << 56) ^ static_cast<uint64_t>(b_rank)));
        if (l.scratch_elems > 0) IRIS_CUDA_CHECK(cudaMemsetAsync(scratch.get(), 0, l.scratch_bytes(), stream));
        wait_stream(stream, "fused input fill", o.gpu_timeout_s, rank);
      }));
  if (!err.empty()) return fail_all("input fill: " + err);

  // The sequential path: this rank's GEMM and the collective, as the layout places them.
  void* const pa = a.get();
  void* const pb = b.get();
  void* const pc = c.get();
  void* const ps = scratch.get();
  std::function<void()> gemm_call, seq_call;
  // NCCL's collective, or without NCCL iris::ccl's: then the sequential path serves as the check's
  // reference only (one eager call), and is neither captured nor timed.
  NcclComm* const nc = nccl;
  const std::function<void(Op, size_t, const void*, void*)> collective = [=, this](Op cop, size_t count, const void* in,
                                                                                   void* out) {
    if (nc)
      nc->call(nccl_problem(cop, count, world), in, out, stream);
    else
      iris_collective(cop, count, in, out);
  };
  const SeqCollective sc = seq_collective(op, l);
  switch (op) {
    case FusedOp::kMatmulAllReduce:
      gemm_call = [=, this] { gemm(pa, pb, pc, l.gemm_m, l.gemm_n, l.gemm_k, l.c_cols); };
      seq_call = [=, this] {
        gemm_call();
        collective(sc.op, sc.count, pc, pc);
      };
      break;
    case FusedOp::kMatmulReduceScatter:
      gemm_call = [=, this] { gemm(pa, pb, ps, l.gemm_m, l.gemm_n, l.gemm_k, l.gemm_n); };
      seq_call = [=, this] {
        gemm_call();
        collective(sc.op, sc.count, ps, pc);
      };
      break;
    case FusedOp::kAllGatherMatmul:
      gemm_call = [=, this] { gemm(ps, pb, pc, l.gemm_m, l.gemm_n, l.gemm_k, l.c_cols); };
      seq_call = [=, this] {
        collective(sc.op, sc.count, pa, ps);
        gemm_call();
      };
      break;
    case FusedOp::kAllGatherMatmulKSharded: {
      // NCCL gathers the ranks' M x K/W blocks one after the other; W 2-D copies place block r at columns
      // [r K/W, (r + 1) K/W) of the M x K A the GEMM reads. Not W GEMMs of K/W accumulating in C (no copies,
      // suggested in a review): with a bf16 C they round between the partials, a less exact result than the
      // fused op's one float32 accumulation over K, so not the same work; with a float32 C they add a pass
      // over C larger than the copies.
      void* const gathered = static_cast<char*>(ps) + static_cast<size_t>(l.gemm_m * l.gemm_k) * kElemBytes;
      gemm_call = [=, this] { gemm(gathered, pb, pc, l.gemm_m, l.gemm_n, l.gemm_k, l.c_cols); };
      seq_call = [=, this] {
        collective(sc.op, sc.count, pa, ps);
        const size_t block_bytes = static_cast<size_t>(l.a_cols) * kElemBytes;
        for (int r = 0; r < world; ++r)
          IRIS_CUDA_CHECK(cudaMemcpy2DAsync(
              static_cast<char*>(gathered) + r * block_bytes, static_cast<size_t>(l.gemm_k) * kElemBytes,
              static_cast<const char*>(ps) + r * sc.count * kElemBytes, block_bytes, block_bytes,
              static_cast<size_t>(l.a_rows), cudaMemcpyDeviceToDevice, stream));
        gemm_call();
      };
      break;
    }
    case FusedOp::kMatmulAllGather: {
      // This rank's GEMM writes its own rows of C; NCCL's in-place all-gather then fills the others.
      void* const own = static_cast<char*>(pc) + static_cast<size_t>(rank * l.gemm_m * l.c_cols) * kElemBytes;
      gemm_call = [=, this] { gemm(pa, pb, own, l.gemm_m, l.gemm_n, l.gemm_k, l.c_cols); };
      seq_call = [=, this] {
        gemm_call();
        collective(sc.op, sc.count, own, pc);
      };
      break;
    }
  }

  const std::string what = std::string(fused_op_name(op)) + " " + shape_text(shape);
  // The sequential path and the GEMM alone are captured once and timed again in turns with each variant.
  Timed seq, gemm_only;
  seq.what = "sequential " + what;
  gemm_only.what = "cuBLAS GEMM " + what;
  gemm_only.call = gemm_call;
  bool have_ref = false;
  if (!nccl) {
    seq.error = no_nccl_reason;  // not timed: shown as n/a, the reason as a note
    if (o.check) {
      const std::string err =
          agree(ctx, try_step([&] {
                  seq_call();
                  IRIS_CUDA_CHECK(cudaMemcpyAsync(ref.get(), pc, l.c_bytes(), cudaMemcpyDeviceToDevice, stream));
                  wait_stream(stream, "saving the reference", o.gpu_timeout_s, rank);
                }));
      have_ref = err.empty();
      if (!have_ref) seq.error += "; the cuBLAS + iris::ccl reference failed: " + err;
    }
  } else {
    seq.call = seq_call;
    seq.after_drain = [&] { nccl->check_async_error(); };
    // The eager call also makes NCCL's lazy connection set-up happen before any capture.
    seq.error = agree(ctx, try_step([&] {
                        seq_call();
                        wait_stream(stream, seq.what + " (eager call)", o.gpu_timeout_s, rank);
                        nccl->check_async_error();
                        IRIS_CUDA_CHECK(cudaMemcpyAsync(ref.get(), pc, l.c_bytes(), cudaMemcpyDeviceToDevice, stream));
                        wait_stream(stream, "saving the sequential result", o.gpu_timeout_s, rank);
                      }));
    have_ref = seq.error.empty();
    if (have_ref)
      prepare_timed(ctx, seq, o.iters, o.gpu_timeout_s, o.eager, /*eager_first=*/false, /*direct_fallback=*/false);
  }
  prepare_timed(ctx, gemm_only, o.iters, o.gpu_timeout_s, o.eager, /*eager_first=*/true, /*direct_fallback=*/false);

  // The check after a row's timed turns runs on another A (`fresh`: a new seed on every rank), against the
  // sequential path's result for it, so that a fused op reading a peer's tile of an earlier call (a wait it
  // skipped) shows: every timed call has the same inputs. `fresh` false sets A and the reference back to
  // the timed inputs' for the next row. Collective (agreed), like the sequential path it runs.
  const std::function<std::string(bool)> set_inputs = [&](bool fresh) {
    return agree(ctx, try_step([&] {
                   fill(pa, l.a_bytes() / kElemBytes, fresh ? mix64(a_seed ^ 0xc0ffee) : a_seed);
                   seq_call();
                   wait_stream(stream, "the sequential path for the check's input", o.gpu_timeout_s, rank);
                   if (nccl) nccl->check_async_error();
                   IRIS_CUDA_CHECK(cudaMemcpyAsync(ref.get(), pc, l.c_bytes(), cudaMemcpyDeviceToDevice, stream));
                   wait_stream(stream, "saving the check's reference", o.gpu_timeout_s, rank);
                 }));
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (run_variant(rows[i], op, l, variants[i], pa, pb, pc, ref.get(), have_ref, seq, gemm_only, set_inputs))
      continue;
    for (size_t k = i + 1; k < rows.size(); ++k)  // their checks would read other inputs: not run
      for (Column* col : {&rows[k].fused, &rows[k].seq, &rows[k].gemm}) {
        col->ran = true;
        col->error = "not run: setting the inputs back after the previous row's check failed";
      }
    break;
  }
  return rows;
}

bool FusedRunner::Impl::run_variant(FusedRecord& r, FusedOp op, const Layout& l, const Variant& v, void* a, void* b,
                                    void* c, const void* ref, bool have_ref, const Timed& seq, const Timed& gemm_only,
                                    const std::function<std::string(bool)>& set_inputs) {
  cudaStream_t stream = ctx.stream();
  const int rank = ctx.rank();
  const iris::ops::MatmulOperands mm = operands(l, a, b, c, o.fused_b_nk);
  try {  // the SM split, for the JSON; a plan that throws fails the preamble below, on every rank
    const iris::ops::FusedPlan plan = plan_for(op, mm, v.config, ctx.world_size(), device_sms);
    r.gemm_sms = plan.gemm_sms;
    r.comm_sms = plan.comm_sms;
  } catch (const std::exception&) {
  }
  const bool check = o.check && have_ref;
  // 0x7F in every byte is bf16 ~3.4e38: no output the check accepts.
  auto poison = [&] { IRIS_CUDA_CHECK(cudaMemsetAsync(c, 0x7F, l.c_bytes(), stream)); };

  iris::ops::FusedWorkspace ws;
  Timed fused;
  fused.what =
      std::string("fused ") + fused_op_name(op) + (v.name == "-" ? "" : "/" + v.name) + " " + shape_text(r.shape);
  fused.call = [&] { fused_call(op, ctx, mm, v.config, ws, stream); };
  fused.after_drain = [&] { ctx.check_device_error(); };
  Diff eager, replay;
  std::string err = agree(ctx, try_step([&] { fused_preamble(op, ctx, mm, v.config, ws); }));
  if (!err.empty()) {
    fused.error = "preamble: " + err;
  } else {
    fused.error = agree(ctx, try_step([&] {
                          poison();
                          fused.call();
                          wait_stream(stream, fused.what + " (eager call)", o.gpu_timeout_s, rank);
                          fused.after_drain();
                          if (check) eager = compare(c, ref, l.c_elems());
                        }));
  }
  if (fused.error.empty())
    prepare_timed(ctx, fused, o.iters, o.gpu_timeout_s, o.eager, /*eager_first=*/false, /*direct_fallback=*/true);

  // The three paths in turns, so that none gains from running first on a GPU at its power limit.
  const std::vector<TurnTime> times =
      time_together(ctx, {&seq, &gemm_only, &fused}, o.iters, o.warmup, o.repeats, o.gpu_timeout_s, &align);
  if (nccl)
    record_time(times[0], r.seq);
  else
    r.seq.error = seq.error;
  record_time(times[1], r.gemm);
  r.fused.ran = true;
  if (fused.ready()) {
    record_time(times[2], r.fused);
    if (r.fused.error.empty() && fused.direct && !o.eager) {
      r.fused_direct = true;
      r.fused.note = "timed as direct launches (marked *): the CUDA graph capture failed: " + fused.capture_error;
    }
  } else {
    r.fused.error = fused.error;
  }
  // Collective: the eager call's wrong elements, summed over the ranks, into the column where the timing
  // or the later check failed too, so that a wrong result is never shown only as an error.
  auto record_eager_wrong = [&] {
    const double beyond_eager = sum_over_ranks(ctx, static_cast<double>(eager.beyond));
    if (beyond_eager > 0) {
      r.fused.wrong = static_cast<int64_t>(beyond_eager);
      r.wrong_where = wrong_where(beyond_eager, 0);
    }
  };
  bool inputs_back = true;
  if (!r.fused.error.empty() && check && fused.ready()) record_eager_wrong();  // the timing failed
  if (r.fused.error.empty() && check) {
    // The sequential path and the GEMM wrote C between the fused replays: one more replay, on a new A and
    // into a poisoned C, is what the check sees (set_inputs), against the sequential result for that A.
    err = set_inputs(/*fresh=*/true);
    if (err.empty())
      err = agree(ctx, try_step([&] {
                    // The first call on the new A: the one that would read a peer's tiles of the A before.
                    poison();
                    fused.call();
                    wait_stream(stream, fused.what + " (first call after the timed turns)", o.gpu_timeout_s, rank);
                    fused.after_drain();
                    const Diff first = compare(c, ref, l.c_elems());
                    poison();
                    fused.turn(stream, o.iters).launch();
                    wait_stream(stream, fused.what + " (replay after the timed turns)", o.gpu_timeout_s, rank);
                    fused.after_drain();
                    replay = compare(c, ref, l.c_elems());
                    replay.rel = std::max(replay.rel, first.rel);
                    replay.beyond += first.beyond;
                  }));
    else
      err = "changing the input: " + err;
    inputs_back = set_inputs(/*fresh=*/false).empty();
    if (!err.empty()) {
      r.fused.error = "check after the replays: " + err;
      record_eager_wrong();
    } else {
      // The same number of collective calls on every rank: `check` and the error above were agreed.
      const double beyond_eager = sum_over_ranks(ctx, static_cast<double>(eager.beyond));
      const double beyond_replay = sum_over_ranks(ctx, static_cast<double>(replay.beyond));
      r.rel_diff = std::max(0.0, max_over_ranks(ctx, std::max(eager.rel, replay.rel)));
      r.fused.wrong = static_cast<int64_t>(beyond_eager + beyond_replay);
      r.wrong_where = wrong_where(beyond_eager, beyond_replay);
    }
  }
  if (!r.fused.error.empty()) r.fused.time_us = std::nan("");  // a failed check voids the time, as in the tables
  // Collective free of the workspace's arrays, in the same order on every rank (nothing when never prepared).
  iris::ccl::ContextWorkspaceHost host(ctx);
  const std::string rel = agree(ctx, try_step([&] { ws.release(host); }));
  if (!rel.empty() && r.fused.error.empty())
    r.fused.note += (r.fused.note.empty() ? "" : "; ") + ("workspace release: " + rel);
  return inputs_back;
}

FusedRunner::FusedRunner(iris::Context& ctx, const Options& o, NcclComm* nccl, std::string no_nccl_reason,
                         Aligner& align)
    : impl_(std::make_unique<Impl>(ctx, o, nccl, std::move(no_nccl_reason), align)) {
  impl_->init();
}

FusedRunner::~FusedRunner() = default;

std::vector<FusedRecord> FusedRunner::run(FusedOp op, const FusedShape& shape, uint64_t run) {
  return impl_->run(op, shape, run);
}

}  // namespace iris_bench
