// iris-bench: rows, the nccl-tests-style table, machine information and the JSON file.
#pragma once

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "iris_bench_options.hpp"

namespace iris_bench {

// One measured implementation (iris with one variant, NCCL plain, NCCL with symmetric windows).
struct Column {
  bool ran = false;               // attempted at all
  double time_us = std::nan("");  // median per call over replays, max over ranks; NaN when not measured
  int64_t wrong = -1;             // elements that differ from the reference, summed over ranks; -1: not checked
  std::string error;              // why it was not measured ("" when measured)
  std::string note;               // extra information (e.g. "wrong after replays")
  double sm_mhz = std::nan("");   // SM clock while timed (TurnTime::sm_mhz); NaN: not sampled
  double power_capped = std::nan("");  // share of those samples limited by the power cap

  bool measured() const { return std::isfinite(time_us) && time_us > 0; }
};

struct Record {
  Problem problem;
  std::string variant = "-";  // all_reduce variant requested ("-" for other ops)
  std::string resolved;       // what "auto" resolved to ("" when unknown or not auto)
  Column iris, nccl, nccl_sym;

  double algbw(const Column& c) const;  // GB/s (1e9 B/s); NaN when not measured
  double busbw(const Column& c) const;
  // Best measured NCCL time / iris time (>1: iris faster); NaN when either side is missing.
  double ratio() const;
};

// One row of a fused table: an iris::ops fused op (one all_reduce variant) against the sequential path
// (cuBLAS GEMM, then the NCCL collective) on the same buffers, at a global (M, N, K).
struct FusedRecord {
  FusedOp op = FusedOp::kMatmulAllReduce;
  std::string variant = "-";  // matmul_all_reduce: one_shot or two_shot ("-" for the other ops)
  FusedShape shape;           // global
  int world = 1;
  bool b_nk = true;  // B stored N x K
  std::string tile;  // the fused op's GEMM tile, "128x256x64"
  int gemm_sms = 0;  // the fused op's SM split (from its plan)
  int comm_sms = 0;
  Column fused;                    // wrong: elements beyond the tolerance, summed over ranks and checks
  Column seq;                      // cuBLAS GEMM + NCCL collective, one after the other
  Column gemm;                     // the sequential path's GEMM alone
  double rel_diff = std::nan("");  // max over ranks of max |fused - seq| / max |seq|; NaN when not compared
  bool fused_direct = false;       // fused timed as direct launches (its CUDA graph capture failed)
  std::string wrong_where;  // which checks found wrong elements ("eager call", "calls after the timing" (the first call
                            // on a new input and a replay), both)

  // The GEMM work of one rank: 1/W of the global 2*M*N*K, whichever dimension the op splits, except for
  // all_gather_matmul_k_sharded, whose every rank multiplies the whole gathered A by B (2*M*N*K).
  double flop_per_gpu() const;
  double tflops(const Column& c) const;  // per GPU; NaN when not measured
  double speedup() const;                // seq / fused (>1: fused faster); NaN when either is missing
  bool wrong() const { return fused.wrong > 0; }
};

// The fused tables' tolerance: |fused - seq| above this times max |seq| counts as wrong (bf16 outputs:
// a few units in the last place of the largest element, far below any real error).
constexpr double kFusedRelTolerance = 1.0 / 64;

struct MachineInfo {
  std::string gpu_name;
  int gpu_count = 0;         // visible CUDA devices
  int world = 0;             // ranks used
  std::string driver;        // kernel-module version, e.g. 580.159.04
  int cuda_driver_api = 0;   // cudaDriverGetVersion
  int cuda_runtime = 0;      // cudaRuntimeGetVersion
  std::string nccl_version;  // "" without NCCL
  int nccl_header_version = 0;
  std::string nccl_symmetric;  // "yes", or why not
  std::string hostname;
  std::string timestamp_utc;
  std::string heap;  // iris heap per rank, as set
  // Programmatic dependent launch of iris's collective kernels (IRIS_PDL, on unless "0"): in a graph of
  // back-to-back iris calls, each call's grid is launched while the one before it runs, which a call that
  // follows other work does not gain; the tables say which way they were timed.
  bool iris_pdl = true;
  // Context::check_calls() (IRIS_CHECK_CALLS): every iris call compares its arguments across the ranks on the
  // host, a bootstrap round trip per call, which --eager times include (graph replays repeat no host work).
  bool iris_check_calls = false;
  // iris::library_device_checks(): this iris library's kernels check every translation (CMake option
  // IRIS_DEVICE_CHECKS=ON, a debug build), so its times are not a release build's.
  bool iris_device_checks = false;
  // How the ranks run: "threads, one per GPU", "processes (...), one per GPU" or, when ranks share GPUs,
  // a text that says the times are not measurements (shared_gpus).
  std::string launch = "threads, one per GPU";
  bool shared_gpus = false;
  int gpus_used = 0;  // the distinct GPUs the ranks run on; 0: one per rank (world)
  // NCCL_NVLS_ENABLE as the run had it (iris-bench sets "0" unless given: see nccl_set_environment), or
  // "unset".
  std::string nccl_nvls = "unset";
};

MachineInfo collect_machine_info(int world);

// Printing happens on rank 0 only.
void print_preamble(const MachineInfo& m, const Options& o, bool nccl_on);
void print_table_header(Op op, iris::DType dtype, const Options& o, const MachineInfo& m);
// Prints the row and, once per distinct message within a table, a comment line with each error.
void print_row(const Record& r, std::set<std::string>& printed_errors);

// The fused tables: the explanation once, then one header per op.
void print_fused_preamble(const Options& o, const MachineInfo& m, bool nccl_on);
void print_fused_table_header(FusedOp op, const Options& o, const MachineInfo& m);
// Prints the row and, once per distinct message within a table, a comment line with each error or note.
void print_fused_row(const FusedRecord& r, std::set<std::string>& printed_errors);

// printf of one number ("%.2f", "%g"...) into a string, for the tables and the targets' texts.
std::string format_number(const char* format, double v);

// The targets' verdicts (iris_bench_targets.hpp: check_targets) for this run, with a count of each, or why
// the run is not held to them.
void print_targets(const MachineInfo& m, const Options& o, const std::vector<Record>& records,
                   const std::vector<FusedRecord>& fused);

// Writes everything so far (rewritten after every size, so a run stopped by a hang keeps what it had).
// Collectives go to "results" (what scripts/plot_bench.py reads), fused rows to "fused_results", the verdicts
// of print_targets to "targets".
void write_json(const std::string& path, const MachineInfo& m, const Options& o, const std::vector<Record>& records,
                const std::vector<FusedRecord>& fused);

}  // namespace iris_bench
