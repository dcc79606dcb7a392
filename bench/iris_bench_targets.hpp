// iris-bench: the performance targets iris is held to, checked against a run's rows at the end of the run
// (printed, and in the JSON file's "targets"), so that a run on the target machine says which it met.
//
// The targets are those of the project's collectives and fused-op issues, for 2 x H200, bf16, timed over
// CUDA-graph replays:
//   all_reduce (auto)         at most 3 us at 8 KiB, 6 us at 1 MiB, 15 us at 4 MiB; at least 355 GB/s busbw
//                             at 256 MiB; at least 1.0x the best NCCL at every size from 1 KiB to 1 GiB
//   all_gather, reduce_scatter at least 1.0x the best NCCL at every size from 1 KiB to 1 GiB, and 350 GB/s
//                             busbw at 256 MiB
//   matmul_reduce_scatter, all_gather_matmul
//                             at least 1.30x over sequential (cuBLAS + NCCL) at (8192, 8192, 8192) and
//                             (16384, 4096, 8192), and faster there than PyTorch's fused async-TP ops
//                             (BASELINES.md's figures: another run, through Python)
//   matmul_all_reduce         at least 1.25x over sequential at those two shapes
//   every fused op            at least 1.0x over sequential at every shape of the fused tables
// Sizes are the table's `size` column (BASELINES.md's conventions: all_gather one rank's input,
// reduce_scatter the whole input). "The best NCCL" is the faster of plain buffers and symmetric windows; a
// size without both is not compared. A fused op's verdict is its fastest correct row at the shape (the
// variant and the copy path named) against the fastest of the shape's sequential timings (one per row: the
// same work, timed in each row's turns), and its default config's row is named beside it where that is
// another.
#pragma once

#include <string>
#include <vector>

#include "iris_bench_options.hpp"
#include "iris_bench_report.hpp"

namespace iris_bench {

enum class Verdict { kMet, kMissed, kNotMeasured };
const char* verdict_name(Verdict v);  // "met", "MISSED", "not measured"

struct TargetCheck {
  std::string target;  // "all_reduce auto at 8 KiB: at most 3 us"
  Verdict verdict = Verdict::kNotMeasured;
  std::string measured;  // "5.91 us", what missed it, or what the run lacks
};

// "2 x NVIDIA H200", or "2 ranks on 1 x NVIDIA H100 ..." where ranks share GPUs (MachineInfo::gpus_used).
std::string ranks_and_gpus(const MachineInfo& m);

// Why this run is not held to the targets ("" when it is): another GPU or world size, eager timing, ranks
// sharing GPUs, or results not checked (-c 0).
std::string targets_not_applicable(const MachineInfo& m, const Options& o);

// The checks, from a run's rows (rows of other dtypes, reductions and world sizes are not read). A
// target none of whose rows ran is kNotMeasured, saying what the run lacks; a target over a range of sizes
// or shapes that the run covered in part is kMissed when a covered one missed, else kNotMeasured.
std::vector<TargetCheck> check_collective_targets(const std::vector<Record>& rows);
std::vector<TargetCheck> check_fused_targets(const std::vector<FusedRecord>& rows);

// The checks of this run's tables: the collectives' when it ran them (Options::collectives), the fused ops'
// when it ran those (Options::fused).
std::vector<TargetCheck> check_targets(const Options& o, const std::vector<Record>& records,
                                       const std::vector<FusedRecord>& fused);

// "8 KiB", "1 MiB", "1 GiB", "1000 B": the sizes of the targets' texts.
std::string size_text(size_t bytes);

}  // namespace iris_bench
