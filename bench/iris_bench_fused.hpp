// iris-bench --fused: the iris::ops fused GEMM + communication ops against the sequential path they
// replace (a cuBLAS GEMM, then the NCCL collective, one after the other), on the same heap buffers.
// cuBLAS stays behind this header (only iris_bench_fused.cu includes it).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "iris/context.hpp"
#include "iris_bench_nccl.hpp"
#include "iris_bench_options.hpp"
#include "iris_bench_report.hpp"
#include "iris_bench_util.hpp"

namespace iris_bench {

// Heap bytes per rank that the largest fused row needs: its A, B and C, the sequential path's buffers
// (the M x N GEMM output of matmul_reduce_scatter, the gathered A of all_gather_matmul, the saved
// sequential result), and the op's workspace arrays as iris::ops::plan_* sizes them for a device of
// device_sms SMs. Pure: no GPU, so main can size the heap before the contexts exist. Rows the plans
// reject (a shape that does not split over `world`) count nothing; they fail visibly when run.
size_t fused_heap_bytes(const Options& o, int world, int device_sms);

class FusedRunner {
 public:
  // Creates this rank's cuBLAS handle on ctx's device and stream (throws iris::Error on failure).
  // nccl may be null: the sequential column is then skipped with `no_nccl_reason`, and with it the check.
  // Each timed turn starts after a crossing of `align` (kept by the caller, outliving the runner).
  FusedRunner(iris::Context& ctx, const Options& o, NcclComm* nccl, std::string no_nccl_reason, Aligner& align);
  ~FusedRunner();
  FusedRunner(const FusedRunner&) = delete;
  FusedRunner& operator=(const FusedRunner&) = delete;

  // Collective: the rows of one op at one global shape (one per all_reduce variant). `run` numbers the
  // call, for the input seeds. Failures land in the rows' columns; only a broken CUDA context throws.
  std::vector<FusedRecord> run(FusedOp op, const FusedShape& shape, uint64_t run);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace iris_bench
