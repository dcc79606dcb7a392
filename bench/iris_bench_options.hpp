// iris-bench: the command line (nccl-tests' flags where they exist) and the operations it measures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "iris/ccl/config.hpp"
#include "iris/core/tensor.hpp"

namespace iris_bench {

enum class Op { kAllReduce = 0, kAllGather, kReduceScatter, kAllToAll, kBroadcast };
constexpr Op kAllOps[] = {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kAllToAll, Op::kBroadcast};

const char* op_name(Op op);
// Bus-bandwidth factor of nccl-tests: 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and
// all_to_all, 1 for broadcast.
double bus_factor(Op op, int world);
bool is_reduction(Op op);
// Short dtype names on the command line: bf16, fp16, fp32, int32.
const char* dtype_short_name(iris::DType t);

// The fused GEMM + communication ops of iris::ops (include/iris/ops/fused.hpp) that --fused measures.
enum class FusedOp {
  kMatmulAllReduce = 0,
  kMatmulReduceScatter,
  kAllGatherMatmul,
  kMatmulAllGather,
  kAllGatherMatmulKSharded
};
constexpr FusedOp kAllFusedOps[] = {FusedOp::kMatmulAllReduce, FusedOp::kMatmulReduceScatter, FusedOp::kAllGatherMatmul,
                                    FusedOp::kMatmulAllGather, FusedOp::kAllGatherMatmulKSharded};
const char* fused_op_name(FusedOp op);

// A global GEMM shape: the whole problem C (M x N) = A (M x K) @ B (K x N), before it is split over the ranks.
struct FusedShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool operator==(const FusedShape&) const = default;
};
// "8192x4096x8192" (M x N x K).
std::string shape_text(const FusedShape& s);
// The shapes of the fused tables (the GEMM core's benchmark shapes: large square, tall, mid-sized, decode).
constexpr FusedShape kFusedShapes[] = {
    {8192, 8192, 8192}, {16384, 4096, 8192}, {4096, 8192, 4096}, {2048, 8192, 8192}, {128, 8192, 8192}};

// One measured problem. `count` is in elements, with the size conventions of BASELINES.md:
//   all_reduce, broadcast: the tensor;  all_gather: one rank's input (output = world x count);
//   reduce_scatter: the whole input (output = count / world);  all_to_all: one rank's whole input.
// So the input always holds `count` elements; tensors are one row per rank block.
struct Problem {
  Op op = Op::kAllReduce;
  iris::DType dtype = iris::DType::kBFloat16;
  int world = 1;
  int root = 0;  // broadcast
  iris::ccl::ReduceOp redop = iris::ccl::ReduceOp::kSum;  // all_reduce, reduce_scatter
  size_t count = 0;

  size_t in_count() const { return count; }
  size_t out_count() const;
  size_t in_bytes() const { return in_count() * iris::dtype_size(dtype); }
  size_t out_bytes() const { return out_count() * iris::dtype_size(dtype); }
  // The `size` column.
  size_t size_bytes() const { return count * iris::dtype_size(dtype); }
  // Bytes the bandwidth columns divide by the time (nccl-tests: the gathered output for all_gather).
  size_t bw_bytes() const { return op == Op::kAllGather ? out_bytes() : size_bytes(); }
  // Rows per rank block for reduce_scatter and all_to_all (count / world).
  size_t block_count() const { return count / static_cast<size_t>(world); }
  // The `redop` column: the reduction's name, "none" for data movement.
  const char* redop_name() const;
  // How iris moves an all_gather, reduce_scatter, all_to_all or broadcast of this size (iris::ccl::uses_ll_exchange
  // on the op's block): "ll", "chunked", or "copy" at one rank; empty for all_reduce (its rows name their variant).
  std::string exchange_path() const;
};

// The problem for a requested size in bytes: count rounded down to whole elements (reduce_scatter and
// all_to_all: to a multiple of world). count == 0 when the size is too small.
Problem make_problem(Op op, iris::DType dtype, size_t bytes, int world, int root,
                     iris::ccl::ReduceOp redop = iris::ccl::ReduceOp::kSum);

// One all_reduce row: a variant, and for one_shot a protocol (auto: the library's choice by size).
struct AllReduceRow {
  iris::ccl::AllReduceVariant variant = iris::ccl::AllReduceVariant::kAuto;
  iris::ccl::OneShotProtocol protocol = iris::ccl::OneShotProtocol::kAuto;
  bool operator==(const AllReduceRow&) const = default;
  // "two_shot", "one_shot" (protocol auto), "one_shot/simple".
  std::string name() const;
  // Config with this row's variant and protocol.
  void apply(iris::ccl::Config& cfg) const {
    cfg.all_reduce_variant = variant;
    cfg.all_reduce_one_shot_protocol = protocol;
  }
};

struct Options {
  size_t min_bytes = size_t{8} << 10;
  size_t max_bytes = size_t{256} << 20;
  double step_factor = 2.0;
  int iters = 20;    // calls captured in one graph
  int warmup = 2;    // untimed graph replays
  int repeats = 10;  // timed graph replays; the median is reported
  // --eager: every path timed as direct launches (batches of `iters` calls, as an application without CUDA
  // graphs makes them), so the host's cost per call counts wherever it exceeds the GPU's; no capture.
  bool eager = false;
  bool check = true;
  std::vector<iris::DType> dtypes{iris::DType::kBFloat16};
  std::vector<Op> ops{std::begin(kAllOps), std::end(kAllOps)};
  // all_reduce rows: one_shot in both protocols, so one run shows where simple overtakes LL.
  std::vector<AllReduceRow> variants{{iris::ccl::AllReduceVariant::kAuto},
                                     {iris::ccl::AllReduceVariant::kOneShot, iris::ccl::OneShotProtocol::kLL},
                                     {iris::ccl::AllReduceVariant::kOneShot, iris::ccl::OneShotProtocol::kSimple},
                                     {iris::ccl::AllReduceVariant::kTwoShot}};
  int gpus = 0;  // 0: every local GPU
  bool processes = false;  // one process per rank, started by iris-bench (--processes)
  int ranks_per_gpu = 1;   // processes: how many ranks may share one GPU (--ranks-per-gpu)
  std::string json_path;
  bool quick = false;
  // --targets: the sizes, ops and tables the targets need (iris_bench_targets.hpp), 1 KiB to 1 GiB.
  bool targets = false;
  bool nccl = true;
  std::string nccl_off_reason = "--no-nccl";  // why nccl is false, for the preamble and the fused tables
  bool nccl_symmetric = true;
  bool nccl_symmetric_all = false;  // also for broadcast and all_to_all (no NCCL symmetric kernel there)
  int root = 0;                     // broadcast root
  iris::ccl::ReduceOp redop = iris::ccl::ReduceOp::kSum;  // all_reduce and reduce_scatter (--redop)
  bool collectives = true;          // the iris::ccl tables (off with --fused-only)
  bool fused = false;               // the iris::ops fused tables (--fused, --fused-only)
  bool fused_b_nk = true;           // fused tables: B stored N x K (as LLM layers keep weights), else K x N
  bool fused_copy_engine = true;    // fused tables: rows with FusedConfig::copy_engine (--fused-copy ce|sm|both)
  bool fused_copy_sm = false;       // fused tables: rows with copy kernels beside the GEMM
  int fused_comm_sms = 0;           // fused tables: FusedConfig::comm_sms (0: the default split)
  int fused_min_band_tiles = 0;     // fused tables: FusedConfig::min_band_tiles (0: the default threshold)
  // fused tables: the global shapes of their rows (--fused-shapes), kFusedShapes unless given. The targets
  // are checked at kFusedShapes alone, whatever rows a run has.
  std::vector<FusedShape> fused_shapes{std::begin(kFusedShapes), std::end(kFusedShapes)};
  double gpu_timeout_s = 120;       // a stream that does not drain within this is a hang: report and exit
  std::vector<size_t> sizes;        // filled by parse_options from the above
  std::string variants_left_out;    // rows parse_options dropped for --redop, and why ("" if none)
  std::string command_line;
};

// Parses argv. Throws iris::InvalidArgument with a message naming the flag on bad input.
// Sets *help when -h/--help was given (usage() has the text).
Options parse_options(int argc, char** argv, bool* help);
std::string usage();

}  // namespace iris_bench
