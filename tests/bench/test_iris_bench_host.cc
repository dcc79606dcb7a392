// Host tests of iris-bench's own logic, which decides what every table measures and every #wrong column
// says: the command line, the problem sizes, the input values and their bits in each dtype, and the host
// reference of each reduction (in the element type's arithmetic, as NCCL computes it). No GPU needed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "iris/ccl/collectives.hpp"
#include "iris/ccl/config.hpp"
#include "iris_bench_data.hpp"
#include "iris_bench_options.hpp"
#include "iris_bench_report.hpp"
#include "support/error_text.hpp"

namespace iris_bench {
namespace {

using iris::DType;
using iris::ccl::ReduceOp;

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "iris-bench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  bool help = false;
  return parse_options(static_cast<int>(args.size()), argv.data(), &help);
}

std::string parse_error(std::vector<std::string> args) {
  return iris::test::error_text<std::invalid_argument>([&] { parse(std::move(args)); });
}

constexpr DType kAll[] = {DType::kFloat64, DType::kFloat32, DType::kFloat16, DType::kBFloat16,   DType::kInt32,
                          DType::kInt64,   DType::kUInt8,   DType::kInt8,    DType::kFloat8E4M3, DType::kFloat8E5M2};

TEST(BenchOptions, RedopTakesEveryReductionByName) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg, ReduceOp::kProd})
    EXPECT_EQ(parse({"--redop", iris::ccl::reduce_op_name(op)}).redop, op) << iris::ccl::reduce_op_name(op);
  EXPECT_EQ(parse({}).redop, ReduceOp::kSum);
  EXPECT_EQ(parse_error({"--redop", "mean"}),
            "iris-bench: bad value 'mean' for --redop: expected sum, max, min, avg or prod.");
}

TEST(BenchOptions, DtypesByShortNameInTheOrderGiven) {
  const Options o = parse({"-d", "fp64,fp32,fp16,bf16,int32,int64,uint8,int8,fp8_e4m3,fp8_e5m2,fp32"});
  EXPECT_EQ(o.dtypes, std::vector<DType>(std::begin(kAll), std::end(kAll)));  // the repeated fp32 once
  for (DType t : kAll) EXPECT_EQ(parse({"-d", dtype_short_name(t)}).dtypes, std::vector<DType>{t});
  EXPECT_EQ(parse_error({"-d", "fp4"}),
            "iris-bench: bad value 'fp4' for -d/--dtype: expected bf16, fp16, fp32, int32, int64, fp64, uint8, int8, "
            "fp8_e4m3 or fp8_e5m2 (comma-separated for several).");
}

// The fused tables' shapes: the five of the targets unless --fused-shapes gives others (decode shapes, whose
// plans changed on 2026-12-05 and were never measured on 2 GPUs), in the order given, each once.
TEST(BenchOptions, FusedShapesAreTheTargetsFiveUnlessGiven) {
  EXPECT_EQ(parse({}).fused_shapes, std::vector<FusedShape>(std::begin(kFusedShapes), std::end(kFusedShapes)));
  EXPECT_EQ(parse({"--fused-shapes", "16x8192x8192,1x4096x4096,16x8192x8192"}).fused_shapes,
            (std::vector<FusedShape>{{16, 8192, 8192}, {1, 4096, 4096}}));
  const std::string expected =
      ": expected global shapes MxNxK, each from 1 to 1048576, comma-separated, e.g. 16x8192x8192.";
  for (const char* bad : {"16x8192", "16x8192x8192x1", "0x8192x8192", "16*8192*8192", "-16x8192x8192",
                          "16x8192x2097152", "16x8192x8192 ", "x8192x8192"})
    EXPECT_EQ(parse_error({"--fused-shapes", bad}),
              std::string("iris-bench: bad value '") + bad + "' for --fused-shapes" + expected);
  EXPECT_EQ(parse_error({"--fused-shapes", ","}),
            "iris-bench: bad value ',' for --fused-shapes: expected at least one shape MxNxK.");
}

TEST(BenchOptions, VariantRowsAndTheirErrors) {
  using V = iris::ccl::AllReduceVariant;
  using P = iris::ccl::OneShotProtocol;
  EXPECT_EQ(parse({"-v", "all"}).variants.size(), 6u);
  const auto rows = parse({"-v", "one_shot/simple,two_shot,one_shot/simple"}).variants;
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (AllReduceRow{V::kOneShot, P::kSimple}));
  EXPECT_EQ(rows[0].name(), "one_shot/simple");
  EXPECT_EQ(rows[1], (AllReduceRow{V::kTwoShot}));
  const std::string expected =
      ": expected auto, one_shot, one_shot/ll, one_shot/simple, two_shot, ring, atomic, spinlock or all "
      "(comma-separated).";
  EXPECT_EQ(parse_error({"-v", "two_shot/ll"}), "iris-bench: bad value 'two_shot/ll' for -v/--variants" + expected);
  EXPECT_EQ(parse_error({"-v", "one_shot/ll128"}),
            "iris-bench: bad value 'one_shot/ll128' for -v/--variants" + expected);
}

// atomic takes sum and avg only: for the other reductions its rows leave the table (the preamble says so),
// and a run of nothing but atomic is refused.
TEST(BenchOptions, AtomicRowsLeaveTheTablesOfReductionsItCannotDo) {
  EXPECT_EQ(parse({"-v", "all", "--redop", "avg"}).variants.size(), 6u);
  EXPECT_EQ(parse({"-v", "all", "--redop", "avg"}).variants_left_out, "");
  const Options o = parse({"-v", "all", "--redop", "prod"});
  EXPECT_EQ(o.variants.size(), 5u);
  for (const AllReduceRow& r : o.variants) EXPECT_NE(r.variant, iris::ccl::AllReduceVariant::kAtomic);
  EXPECT_EQ(o.variants_left_out, "atomic (it takes sum and avg only, not prod)");
  EXPECT_EQ(parse({"--redop", "max"}).variants_left_out, "");  // the default rows have no atomic
  EXPECT_EQ(parse_error({"-v", "atomic", "--redop", "min"}),
            "iris-bench: --redop min: all_reduce variant 'atomic' takes sum and avg only; pick another with -v.");
  EXPECT_TRUE(parse({"-v", "atomic", "--redop", "min", "-o", "reduce_scatter"}).variants.empty());
}

// --eager times direct launches (no graph) and is off unless given; it leaves the other settings alone.
TEST(BenchOptions, EagerIsOffUnlessGiven) {
  EXPECT_FALSE(parse({}).eager);
  EXPECT_FALSE(parse({"--quick"}).eager);
  const Options o = parse({"--eager", "-n", "7"});
  EXPECT_TRUE(o.eager);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(parse_error({"--eager=1"}),
            "iris-bench: unknown option or missing value: '--eager=1' (iris-bench --help lists the options).");
}

// --targets is the run the targets need (bench/iris_bench_targets.hpp): its sizes, ops and the fused tables,
// which flags given as well override wherever they stand; --quick's sizes contradict it.
TEST(BenchOptions, TargetsPicksTheTargetsRunAndGivenFlagsOverrideIt) {
  EXPECT_FALSE(parse({}).targets);
  const Options o = parse({"--targets"});
  EXPECT_TRUE(o.targets);
  EXPECT_EQ(o.sizes.front(), size_t{1} << 10);
  EXPECT_EQ(o.sizes.back(), size_t{1} << 30);
  EXPECT_EQ(o.sizes.size(), 21u);
  EXPECT_EQ(o.ops, (std::vector<Op>{Op::kAllReduce, Op::kAllGather, Op::kReduceScatter}));
  EXPECT_EQ(o.dtypes, std::vector<DType>{DType::kBFloat16});
  EXPECT_TRUE(o.collectives);
  EXPECT_TRUE(o.fused);
  EXPECT_EQ(o.repeats, Options{}.repeats);
  const Options narrowed = parse({"-e", "4M", "--targets", "-o", "all_reduce"});
  EXPECT_EQ(narrowed.sizes.back(), size_t{4} << 20);
  EXPECT_EQ(narrowed.ops, std::vector<Op>{Op::kAllReduce});
  EXPECT_FALSE(parse({"--targets", "--fused-only"}).collectives);
  EXPECT_EQ(parse_error({"--targets", "--quick"}),
            "iris-bench: --quick and --targets pick different sizes; pick one (--targets checks the targets from 1K to "
            "1G).");
}

TEST(BenchOptions, StrayArgumentsAndUnknownOptionsAreRefused) {
  EXPECT_EQ(parse_error({"--redop", "sum", "extra"}),
            "iris-bench: unexpected argument 'extra' (iris-bench --help lists the options).");
  EXPECT_EQ(parse_error({"--frobnicate"}),
            "iris-bench: unknown option or missing value: '--frobnicate' (iris-bench --help lists the options).");
  EXPECT_EQ(parse({"-g", "2"}).gpus, 2);  // a parse after a failed one starts afresh
}

// reduce_scatter and all_to_all round the count down to a multiple of the world; a size below one element
// per rank is a count of 0 (the table skips it).
TEST(BenchProblems, CountsFollowTheSizeConventions) {
  EXPECT_EQ(make_problem(Op::kAllReduce, DType::kBFloat16, 1000, 3, 0).count, 500u);
  EXPECT_EQ(make_problem(Op::kReduceScatter, DType::kBFloat16, 1000, 3, 0).count, 498u);
  EXPECT_EQ(make_problem(Op::kReduceScatter, DType::kFloat64, 16, 3, 0).count, 0u);
  const Problem ag = make_problem(Op::kAllGather, DType::kUInt8, 1024, 4, 0);
  EXPECT_EQ(ag.in_count(), 1024u);
  EXPECT_EQ(ag.out_count(), 4096u);
  EXPECT_EQ(std::string(make_problem(Op::kAllGather, DType::kInt8, 8, 2, 0, ReduceOp::kProd).redop_name()), "none");
  EXPECT_EQ(std::string(make_problem(Op::kAllReduce, DType::kInt8, 8, 2, 0, ReduceOp::kProd).redop_name()), "prod");
}

// The variant column of an exchange or broadcast says how iris moves it: the library's own rule
// (iris::ccl::uses_ll_exchange) on the op's block, which each size convention places differently: all_gather's
// is the size, reduce_scatter's and all_to_all's a world's share of it, broadcast's the tensor. Not with
// IRIS_LL_MAX_BYTES, which moves the bounds (4 KiB for the copies, 64 KiB for reduce_scatter and broadcast).
TEST(BenchProblems, ExchangeRowsNameTheirPathByTheLibrarysRule) {
  if (std::getenv("IRIS_LL_MAX_BYTES") != nullptr) GTEST_SKIP() << "IRIS_LL_MAX_BYTES moves the bounds";
  auto path = [](Op op, size_t bytes, int world) {
    return make_problem(op, DType::kBFloat16, bytes, world, 0).exchange_path();
  };
  EXPECT_EQ(path(Op::kAllGather, 4096, 2), "ll");
  EXPECT_EQ(path(Op::kAllGather, 8192, 2), "chunked");
  EXPECT_EQ(path(Op::kAllToAll, 8192, 2), "ll") << "4 KiB to each rank";
  EXPECT_EQ(path(Op::kAllToAll, 16384, 2), "chunked");
  EXPECT_EQ(path(Op::kReduceScatter, 262144, 4), "ll") << "a 64 KiB output";
  EXPECT_EQ(path(Op::kReduceScatter, 524288, 4), "chunked");
  EXPECT_EQ(path(Op::kBroadcast, 65536, 8), "ll");
  EXPECT_EQ(path(Op::kBroadcast, 131072, 8), "chunked");
  EXPECT_EQ(path(Op::kBroadcast, 1024, 1), "copy");
  EXPECT_EQ(path(Op::kAllReduce, 1024, 2), "") << "all_reduce rows name their variant";
  EXPECT_THROW(iris::ccl::uses_ll_exchange(iris::ccl::OpKind::kAllReduce, 1024, 2), std::invalid_argument);
  EXPECT_THROW(iris::ccl::uses_ll_exchange(iris::ccl::OpKind::kBroadcast, 1024, 0), std::invalid_argument);
}

// TF per GPU is one rank's GEMM work: 1/W of 2*M*N*K where the op splits a dimension across ranks, the whole
// product for all_gather_matmul_k_sharded (every rank multiplies the gathered A by B).
TEST(BenchProblems, FusedTflopsCountOneRanksGemmWork) {
  FusedRecord r;
  r.shape = FusedShape{8192, 8192, 8192};
  r.world = 2;
  r.fused.time_us = 1000;
  const double product = 2.0 * 8192 * 8192 * 8192;
  for (FusedOp op : kAllFusedOps) {
    r.op = op;
    const double per_gpu = op == FusedOp::kAllGatherMatmulKSharded ? product : product / 2;
    EXPECT_DOUBLE_EQ(r.flop_per_gpu(), per_gpu) << fused_op_name(op);
    EXPECT_DOUBLE_EQ(r.tflops(r.fused), per_gpu / 1e-3 / 1e12) << fused_op_name(op);
  }
}

// The inputs are the integers -2..2; each dtype's bits of them must be the bits the CUDA conversions give,
// and decode_value must read them back (uint8: the bytes of -2..2, i.e. 254, 255, 0, 1, 2).
TEST(BenchData, InputBitsAreTheDtypesOwnAndDecodeBack) {
  for (int v = -256; v <= 256; ++v) {
    SCOPED_TRACE(v);
    const float f = static_cast<float>(v);
    EXPECT_EQ(decode_value(DType::kFloat32, encode_int(DType::kFloat32, v)), v);
    EXPECT_EQ(decode_value(DType::kFloat64, encode_int(DType::kFloat64, v)), v);
    EXPECT_EQ(decode_value(DType::kInt32, encode_int(DType::kInt32, v)), v);
    EXPECT_EQ(decode_value(DType::kInt64, encode_int(DType::kInt64, v)), v);
    const __half h = __float2half_rn(f);
    const __nv_bfloat16 b = __float2bfloat16_rn(f);
    uint16_t hb, bb;
    std::memcpy(&hb, &h, 2);
    std::memcpy(&bb, &b, 2);
    EXPECT_EQ(encode_int(DType::kFloat16, v), hb);
    EXPECT_EQ(encode_int(DType::kBFloat16, v), bb);
    EXPECT_EQ(decode_value(DType::kFloat16, hb), v);
    EXPECT_EQ(decode_value(DType::kBFloat16, bb), v);
  }
  for (int v = -2; v <= 2; ++v) {
    SCOPED_TRACE(v);
    const float f = static_cast<float>(v);
    EXPECT_EQ(encode_int(DType::kFloat8E4M3, v), __nv_fp8_e4m3(f).__x);
    EXPECT_EQ(encode_int(DType::kFloat8E5M2, v), __nv_fp8_e5m2(f).__x);
    EXPECT_EQ(decode_value(DType::kFloat8E4M3, encode_int(DType::kFloat8E4M3, v)), v);
    EXPECT_EQ(decode_value(DType::kFloat8E5M2, encode_int(DType::kFloat8E5M2, v)), v);
    EXPECT_EQ(decode_value(DType::kInt8, encode_int(DType::kInt8, v)), v);
    EXPECT_EQ(decode_value(DType::kUInt8, encode_int(DType::kUInt8, v)), static_cast<uint8_t>(v));
  }
}

// The reference of each reduction, element by element against the same reduction written out directly
// over the ranks' inputs in the element type, at 2 and 3 ranks.
TEST(BenchData, ReductionReferenceComputesInTheElementType) {
  const uint64_t seed = 77;
  const size_t n = 4096;
  for (int world : {2, 3}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg, ReduceOp::kProd}) {
      for (DType t : {DType::kUInt8, DType::kInt8, DType::kInt32, DType::kFloat16}) {
        SCOPED_TRACE(std::string(dtype_short_name(t)) + " " + iris::ccl::reduce_op_name(op) + " world " +
                     std::to_string(world));
        const Expectation e{make_problem(Op::kAllReduce, t, n * iris::dtype_size(t), world, 0, op), seed, 0};
        size_t wrapped = 0;
        for (size_t i = 0; i < n; ++i) {
          double want = 0;
          if (t == DType::kUInt8) {  // bytes 254, 255, 0, 1, 2; uint8 arithmetic
            uint8_t acc = static_cast<uint8_t>(input_value(seed, 0, i));
            unsigned wide = acc;
            for (int r = 1; r < world; ++r) {
              const auto v = static_cast<uint8_t>(input_value(seed, r, i));
              wide += v;
              acc = op == ReduceOp::kMax    ? std::max(acc, v)
                    : op == ReduceOp::kMin  ? std::min(acc, v)
                    : op == ReduceOp::kProd ? static_cast<uint8_t>(acc * v)
                                            : static_cast<uint8_t>(acc + v);
            }
            wrapped += (op == ReduceOp::kSum || op == ReduceOp::kAvg) && wide > 255;
            want = op == ReduceOp::kAvg ? acc / world : acc;
          } else {  // -2..2: no wrap at 3 ranks in int8 or int32, exact in fp16
            int acc = input_value(seed, 0, i);
            for (int r = 1; r < world; ++r) {
              const int v = input_value(seed, r, i);
              acc = op == ReduceOp::kMax    ? std::max(acc, v)
                    : op == ReduceOp::kMin  ? std::min(acc, v)
                    : op == ReduceOp::kProd ? acc * v
                                            : acc + v;
            }
            want = op != ReduceOp::kAvg   ? acc
                   : t == DType::kFloat16 ? static_cast<double>(acc) / world
                                          : static_cast<double>(acc / world);  // truncated toward zero
          }
          ASSERT_EQ(reduced_at(e, i), want) << "element " << i;
        }
        // uint8 sums of the bytes 254 and 255 wrap: the case the reference exists to get right.
        if (t == DType::kUInt8 && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) EXPECT_GT(wrapped, n / 4);
      }
    }
  }
}

// The poison is no value a check accepts: for the 1-byte types, no result of any op at 2 to 8 ranks and no
// input (what all_gather, all_to_all and broadcast deliver); for the wider ones not -2..2 nor a sum of them.
TEST(BenchData, PoisonIsNoResultACheckAccepts) {
  for (DType t : {DType::kUInt8, DType::kInt8, DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    const auto poison = static_cast<uint64_t>(poison_byte(t));
    const double bad = decode_value(t, poison);
    for (int world = 2; world <= 8; ++world)
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg, ReduceOp::kProd}) {
        const Expectation e{make_problem(Op::kAllReduce, t, 4096, world, 0, op), 11, 0};
        for (size_t i = 0; i < 4096; ++i)
          ASSERT_NE(reduced_at(e, i), bad)
              << dtype_short_name(t) << " " << iris::ccl::reduce_op_name(op) << " world " << world << " element " << i;
      }
    for (int v = -2; v <= 2; ++v) EXPECT_NE(encode_int(t, v), poison) << v;
  }
  for (DType t : kAll) {
    if (iris::dtype_size(t) == 1) continue;
    uint64_t bits = 0;
    std::memset(&bits, poison_byte(t), iris::dtype_size(t));
    for (int v = -16; v <= 16; ++v) EXPECT_NE(encode_int(t, v), bits) << dtype_short_name(t) << " " << v;
  }
}

}  // namespace
}  // namespace iris_bench
