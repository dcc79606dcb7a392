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
};

MachineInfo collect_machine_info(int world);

// Printing happens on rank 0 only.
void print_preamble(const MachineInfo& m, const Options& o, bool nccl_on);
void print_table_header(Op op, iris::DType dtype, const Options& o, const MachineInfo& m);
// Prints the row and, once per distinct message within a table, a comment line with each error.
void print_row(const Record& r, std::set<std::string>& printed_errors);

// Writes everything so far (rewritten after every size, so a run stopped by a hang keeps what it had).
void write_json(const std::string& path, const MachineInfo& m, const Options& o, const std::vector<Record>& records);

}  // namespace iris_bench
