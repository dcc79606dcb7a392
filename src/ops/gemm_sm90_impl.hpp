// Definition of the GEMM core's kernels: CUTLASS 3.x collectives for sm90a, one type per (input
// type, output type, B layout, tile). Included only by the gemm_sm90_<in>_<layout>.cu files, each of
// which instantiates its share of the set listed in gemm_sm90_kernel.hpp.
//
//   mainloop  CollectiveBuilder: TMA loads of A and B tiles into a multi-stage shared-memory pipeline
//             (as many stages as fit beside the epilogue's storage), wgmma with float32 accumulators,
//             warp-specialized (a producer warp issues TMA, consumer warpgroups run wgmma)
//   epilogue  CollectiveBuilder with LinCombPerColBias: D = alpha * acc + beta * C + bias[n], TMA store
//             of D. In the kernels that read a source (kSource: gemm_sm90_kernel.hpp says which), C
//             (GemmProblem::c) has D's type and layout, and beta is 1 when a source is given and 0
//             otherwise (CUTLASS then issues no load of C); in the others C's element type is void.
//   schedule  the default persistent tile scheduler: a grid of at most sm_count CTAs walks the tiles;
//             kTileSmallStreamK: CUTLASS's stream-K scheduler (its heuristic splits K across CTAs when
//             the tiles are too few; partial sums meet in the workspace, reduced in a fixed order)
#pragma once

#include <cutlass/bfloat16.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/half.h>
#include <cutlass/kernel_hardware_info.h>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <type_traits>

#include "core/kernel_modules.hpp"
#include "iris/core/error.hpp"
#include "ops/gemm_sm90_kernel.hpp"

#if !defined(NDEBUG)
// Without NDEBUG, CUTLASS's device asserts are function calls inside the mainloop and ptxas
// serializes the wgmma pipeline (warning C7510): CMake compiles these files with -DNDEBUG.
#error "the GEMM core must be compiled with -DNDEBUG"
#endif

namespace iris::ops::detail {

template <DType>
struct CutlassElement;
template <>
struct CutlassElement<DType::kBFloat16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct CutlassElement<DType::kFloat16> {
  using type = cutlass::half_t;
};
template <>
struct CutlassElement<DType::kFloat32> {
  using type = float;
};

// A kernel configuration: CTA tile (M, N, K), cluster (M, N), and the warp-specialized schedule, ping-pong
// (two consumer warpgroups alternate tiles) or cooperative (both share one tile; M of 128 and up).
// With kSwapAB, the configuration is of CUTLASS's swapped problem C^T = B^T A^T: kM runs along C's
// columns, kN along its rows.
template <int kM, int kN, int kK, int kClusterM, int kClusterN, bool kPingpong, bool kSwap = false>
struct Sm90Config {
  static constexpr bool kSwapAB = kSwap;
  using TileShape = cute::Shape<cute::Int<kM>, cute::Int<kN>, cute::Int<kK>>;
  using ClusterShape = cute::Shape<cute::Int<kClusterM>, cute::Int<kClusterN>, cute::_1>;
  using MainloopSchedule = std::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                              cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
};

// Each tile id's configuration (the tiles of gemm.hpp's kGemmTiles, and the stream-K kernel).
template <int kTile>
struct Sm90TileConfig;
template <>
struct Sm90TileConfig<kTileLarge> : Sm90Config<128, 256, 64, 2, 1, false> {};
template <>
struct Sm90TileConfig<kTileSmall> : Sm90Config<128, 128, 64, 1, 2, true> {};
template <>
struct Sm90TileConfig<kTileSkinny> : Sm90Config<64, 128, 64, 1, 1, true> {};
template <>
struct Sm90TileConfig<kTileTiny> : Sm90Config<64, 64, 64, 1, 1, true> {};
template <>
struct Sm90TileConfig<kTileRows16> : Sm90Config<64, 16, 128, 1, 1, true, true> {};
template <>
struct Sm90TileConfig<kTileRows32> : Sm90Config<64, 32, 128, 1, 1, true, true> {};
template <>
struct Sm90TileConfig<kTileSmallStreamK> : Sm90Config<128, 128, 64, 1, 1, false> {};

// The tile scheduler: persistent data-parallel, or stream-K for kTileSmallStreamK.
template <int kTile>
using Sm90Scheduler = std::conditional_t<kTile == kTileSmallStreamK, cutlass::gemm::StreamKScheduler, void>;

template <DType kIn, DType kOut, bool kBIsNK, int kTile, bool kSourceKernel>
struct Sm90GemmTypes {
  using Config = Sm90TileConfig<kTile>;
  // Swapped (Config::kSwapAB): CUTLASS's problem is C^T (N x M) = B^T A^T; its A operand is our B, its B
  // operand our A, its D our C read column-major, and our per-column bias is a per-row bias of C^T.
  static constexpr bool kSwap = Config::kSwapAB;
  using ElementAB = typename CutlassElement<kIn>::type;
  using ElementD = typename CutlassElement<kOut>::type;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using RowMajor = cutlass::layout::RowMajor;
  using ColumnMajor = cutlass::layout::ColumnMajor;
  // CUTLASS's B is K x N: column-major is the N x K row-major storage (K contiguous). Swapped, CUTLASS's A
  // (M x K) is our B: row-major when it is stored N x K, column-major when K x N; CUTLASS's B (K x N) is
  // our A, M x K row-major: column-major.
  using LayoutA = std::conditional_t<kSwap && !kBIsNK, ColumnMajor, RowMajor>;
  using LayoutB = std::conditional_t<kSwap || kBIsNK, ColumnMajor, RowMajor>;
  using LayoutD = std::conditional_t<kSwap, ColumnMajor, RowMajor>;
  static constexpr int kAlignmentAB = 16 / sizeof(ElementAB);  // TMA: 16-byte rows
  static constexpr int kAlignmentD = 16 / sizeof(ElementD);
  // The source C, D's type and layout; void (never read) in the kernels without one.
  static constexpr bool kSource = kSourceKernel;
  static_assert(!kSource || !kSwap, "the swapped tiles take no source");
  using ElementC = std::conditional_t<kSource, ElementD, void>;

  using FusionOp = std::conditional_t<
      kSwap,
      cutlass::epilogue::fusion::LinCombPerRowBias<ElementD, ElementCompute, /*ElementBias=*/ElementD,
                                                   /*ElementSource=*/ElementC, /*ElementScalar=*/float>,
      cutlass::epilogue::fusion::LinCombPerColBias<ElementD, ElementCompute, /*ElementBias=*/ElementD,
                                                   /*ElementSource=*/ElementC, /*ElementScalar=*/float>>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::TileShape, typename Config::ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute, ElementC, LayoutD,
      kAlignmentD, ElementD, LayoutD, kAlignmentD, typename Config::EpilogueSchedule, FusionOp>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, LayoutA, kAlignmentAB, ElementAB, LayoutB,
      kAlignmentAB, ElementAccumulator, typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, Sm90Scheduler<kTile>>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const GemmProblem& p) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideD = typename Kernel::StrideD;
    using RowStride = cute::Stride<int64_t, cute::Int<1>, int64_t>;  // (i, k, l) -> i * ld + k + l * batch
    using ColStride = cute::Stride<cute::Int<1>, int64_t, int64_t>;  // (i, k, l) -> i + k * ld + l * batch
    // One batch (L = 1): its stride is the matrix's extent, as a packed batch would have, so every TMA
    // descriptor stride is a real, 16-byte multiple pitch. Split K (L = splits): batch s of A and B is the
    // s-th slice of K (their batch strides step along K, by a 16-byte multiple), batch s of D the s-th
    // packed partial.
    const bool split = p.splits > 1;
    const int depth = p.k / p.splits;
    // Our A as (m, k, l) and our B as (n, k, l), whichever CUTLASS operand each is.
    const RowStride stride_our_a{p.lda, cute::Int<1>{}, split ? int64_t{depth} : p.m * p.lda};
    const auto stride_our_b = [&] {
      if constexpr (kBIsNK)  // (n, k) -> n * ldb + k
        return RowStride{p.ldb, cute::Int<1>{}, split ? int64_t{depth} : p.n * p.ldb};
      else  // (n, k) -> k * ldb + n
        return ColStride{cute::Int<1>{}, p.ldb, split ? depth * p.ldb : p.k * p.ldb};
    }();
    cutlass::KernelHardwareInfo hw;
    hw.device_id = p.device;
    hw.sm_count = p.sm_count;
    const auto* a = static_cast<const ElementAB*>(p.a);
    const auto* b = static_cast<const ElementAB*>(p.b);
    typename Gemm::Arguments args = [&] {
      if constexpr (kSwap) {
        static_assert(std::is_same_v<StrideD, ColStride>, "C^T is column-major");
        const StrideD stride_d{cute::Int<1>{}, p.ldd, p.m * p.ldd};  // (n, m, l) -> m * ldd + n
        return typename Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGemm,
                                        {p.n, p.m, depth, p.splits},
                                        {b, StrideA(stride_our_b), a, StrideB(stride_our_a)},
                                        {{}, nullptr, stride_d, static_cast<ElementD*>(p.d), stride_d},
                                        hw};
      } else {
        static_assert(std::is_same_v<StrideA, RowStride>, "A is row-major");
        static_assert(std::is_same_v<StrideD, RowStride>, "D is row-major");
        const StrideD stride_d{p.ldd, cute::Int<1>{}, p.m * p.ldd};
        const StrideD stride_c{p.ldc, cute::Int<1>{}, p.m * p.ldc};
        // A kernel that can read a source encodes a TMA descriptor for it whether or not there is one, and the
        // driver refuses a null address (CUTLASS then prints the descriptor to stderr on every call and,
        // under -DNDEBUG, goes on; a reviewer's finding, cf. NVIDIA/cutlass#947). Without a source the
        // descriptor describes D, which has C's type and layout and which beta = 0 never reads.
        const ElementC* c = nullptr;
        if constexpr (kSource) c = static_cast<const ElementC*>(p.c != nullptr ? p.c : p.d);
        return typename Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGemm,
                                        {p.m, p.n, depth, p.splits},
                                        {a, stride_our_a, b, StrideB(stride_our_b)},
                                        {{}, c, p.c ? stride_c : stride_d, static_cast<ElementD*>(p.d), stride_d},
                                        hw};
      }
    }();
    args.epilogue.thread.alpha = p.alpha;
    if constexpr (!kSource) IRIS_ASSERT(p.c == nullptr, "a kernel without a source operand was given one");
    args.epilogue.thread.beta = p.c != nullptr ? 1.0f : 0.0f;
    args.epilogue.thread.bias_ptr = static_cast<const ElementD*>(p.bias);  // null: no bias
    return args;
  }
};

inline void check_cutlass(cutlass::Status status, const char* step) {
  if (status != cutlass::Status::kSuccess) {
    const cudaError_t cuda = cudaGetLastError();
    throw Error(iris::detail::str_cat(
        "gemm: CUTLASS ", step, " failed: ", cutlassGetStatusString(status),
        cuda != cudaSuccess ? iris::detail::str_cat(" (", cudaGetErrorName(cuda), ": ", cudaGetErrorString(cuda), ")")
                            : std::string()));
  }
}

template <DType kIn, DType kOut, bool kBIsNK, int kTile, bool kSource>
const bool Sm90Gemm<kIn, kOut, kBIsNK, kTile, kSource>::kernel_registered =
    iris::detail::register_kernel_module(reinterpret_cast<const void*>(
        &cutlass::device_kernel<typename Sm90GemmTypes<kIn, kOut, kBIsNK, kTile, kSource>::Kernel>));

template <DType kIn, DType kOut, bool kBIsNK, int kTile, bool kSource>
size_t Sm90Gemm<kIn, kOut, kBIsNK, kTile, kSource>::workspace_size(const GemmProblem& p) {
  using Types = Sm90GemmTypes<kIn, kOut, kBIsNK, kTile, kSource>;
  return Types::Gemm::get_workspace_size(Types::arguments(p));
}

template <DType kIn, DType kOut, bool kBIsNK, int kTile, bool kSource>
void Sm90Gemm<kIn, kOut, kBIsNK, kTile, kSource>::run(const GemmProblem& p, void* workspace, cudaStream_t stream) {
  using Types = Sm90GemmTypes<kIn, kOut, kBIsNK, kTile, kSource>;
  const auto args = Types::arguments(p);
  typename Types::Gemm op;
  check_cutlass(op.can_implement(args), "can_implement");
  check_cutlass(op.initialize(args, workspace, stream), "initialize");
  check_cutlass(op.run(stream), "run");
}

}  // namespace iris::ops::detail
