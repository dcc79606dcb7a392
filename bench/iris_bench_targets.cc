#include "iris_bench_targets.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace iris_bench {
namespace {

constexpr int kTargetWorld = 2;
constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
constexpr FusedShape kTargetShapes[] = {{8192, 8192, 8192}, {16384, 4096, 8192}};
constexpr size_t kMisses = 6;  // missed sizes or shapes named in a verdict before "and N more"

TargetCheck named(std::string target) {
  TargetCheck t;
  t.target = std::move(target);
  return t;
}

// Why a measured column cannot meet a target: it failed, or its results were wrong ("" when neither).
std::string failure(const Column& c) {
  if (!c.error.empty()) return "failed: " + c.error;
  if (c.wrong > 0) return std::to_string(c.wrong) + " wrong elements";
  if (c.ran && !c.measured()) return "not measured";
  return "";
}

// "a, b, c and 3 more".
std::string list_of(const std::vector<std::string>& items) {
  std::string out;
  const size_t shown = std::min(items.size(), kMisses);
  for (size_t i = 0; i < shown; ++i) out += (i == 0 ? "" : ", ") + items[i];
  if (items.size() > shown) out += " and " + std::to_string(items.size() - shown) + " more";
  return out;
}

// ---- collectives -------------------------------------------------------------------------------------

// The rows a collective's targets read: bf16 on 2 ranks, sum, all_reduce's auto row.
bool target_row(const Record& r, Op op) {
  if (r.problem.op != op || r.problem.dtype != iris::DType::kBFloat16 || r.problem.world != kTargetWorld) return false;
  if (is_reduction(op) && r.problem.redop != iris::ccl::ReduceOp::kSum) return false;
  return op == Op::kAllReduce ? r.variant == "auto" : true;
}

std::string subject(Op op) { return std::string(op_name(op)) + (op == Op::kAllReduce ? " auto" : ""); }

std::string sizes_run(const std::vector<Record>& rows, Op op) {
  size_t lo = 0, hi = 0;
  for (const Record& r : rows)
    if (target_row(r, op)) {
      const size_t s = r.problem.size_bytes();
      lo = lo == 0 ? s : std::min(lo, s);
      hi = std::max(hi, s);
    }
  if (hi == 0) return "the run has no bf16 " + subject(op) + " rows on 2 ranks";
  return "the run's " + subject(op) + " rows span " + size_text(lo) + " to " + size_text(hi);
}

const Record* row_at(const std::vector<Record>& rows, Op op, size_t bytes) {
  for (const Record& r : rows)
    if (target_row(r, op) && r.problem.size_bytes() == bytes) return &r;
  return nullptr;
}

std::string resolved(const Record& r) { return r.resolved.empty() ? "" : " (" + r.resolved + ")"; }

// The row at `bytes` where iris measured it; otherwise null, with t saying why (a failure or wrong results
// at that size miss the target; a size the run lacks is not measured).
const Record* measured_row(const std::vector<Record>& rows, Op op, size_t bytes, TargetCheck& t) {
  const Record* r = row_at(rows, op, bytes);
  if (r == nullptr) {
    t.measured = "no row at " + size_text(bytes) + " (" + sizes_run(rows, op) + ")";
  } else if (const std::string why = failure(r->iris); !why.empty()) {
    t.verdict = Verdict::kMissed;
    t.measured = "iris " + why;
  } else if (!r->iris.measured()) {
    t.measured = "iris did not run at " + size_text(bytes);
  } else {
    return r;
  }
  return nullptr;
}

// iris's time at `bytes` at most `us`.
TargetCheck latency(const std::vector<Record>& rows, Op op, size_t bytes, double us) {
  TargetCheck t = named(subject(op) + " at " + size_text(bytes) + ": at most " + format_number("%g", us) + " us");
  if (const Record* r = measured_row(rows, op, bytes, t)) {
    t.verdict = r->iris.time_us <= us ? Verdict::kMet : Verdict::kMissed;
    t.measured = format_number("%.2f us", r->iris.time_us) + resolved(*r);
  }
  return t;
}

// iris's bus bandwidth at `bytes` at least `gbps`.
TargetCheck bandwidth(const std::vector<Record>& rows, Op op, size_t bytes, double gbps) {
  TargetCheck t =
      named(subject(op) + " at " + size_text(bytes) + ": at least " + format_number("%g", gbps) + " GB/s busbw");
  if (const Record* r = measured_row(rows, op, bytes, t)) {
    const double bw = r->busbw(r->iris);
    t.verdict = bw >= gbps ? Verdict::kMet : Verdict::kMissed;
    t.measured = format_number("%.1f GB/s", bw) + resolved(*r);
  }
  return t;
}

// At least 1.0x the best NCCL at every size from 1 KiB to 1 GiB.
TargetCheck parity(const std::vector<Record>& rows, Op op) {
  TargetCheck t = named(subject(op) + ": at least 1.0x the best NCCL at every size from 1 KiB to 1 GiB");
  std::vector<std::string> missed;
  size_t compared = 0, failed = 0, lo = 0, hi = 0, no_nccl = 0;
  double lowest = INFINITY;
  for (const Record& r : rows) {
    if (!target_row(r, op)) continue;
    const size_t s = r.problem.size_bytes();
    if (s < kKiB || s > kGiB) continue;
    if (const std::string why = failure(r.iris); !why.empty()) {
      missed.push_back("iris " + why.substr(0, why.find(':')) + " at " + size_text(s));
      ++failed;
      continue;
    }
    // The best NCCL is the faster of plain buffers and symmetric windows (NCCL has symmetric kernels for
    // each op these targets name): a row that lacks either (--no-nccl-symmetric, windows that could not be
    // registered) is not compared, or the target would be held against the slower NCCL alone.
    const double ratio = r.nccl.measured() && r.nccl_sym.measured() ? r.ratio() : std::nan("");
    if (!std::isfinite(ratio)) {
      if (r.iris.measured()) ++no_nccl;
      continue;
    }
    ++compared;
    lo = lo == 0 ? s : std::min(lo, s);
    hi = std::max(hi, s);
    lowest = std::min(lowest, ratio);
    // Printed to two decimals: 0.995 rounds to 1.00, but it missed.
    if (ratio < 1.0) missed.push_back(format_number("%.3fx", ratio) + " at " + size_text(s));
  }
  const std::string nccl_gaps = no_nccl > 0 ? "; NCCL (plain and symmetric windows) not both measured at " +
                                                  std::to_string(no_nccl) + (no_nccl == 1 ? " size" : " sizes")
                                            : "";
  if (!missed.empty()) {
    t.verdict = Verdict::kMissed;
    t.measured = "missed at " + std::to_string(missed.size()) + " of " + std::to_string(compared + failed) +
                 " sizes: " + list_of(missed) + nccl_gaps;
    return t;
  }
  if (compared == 0) {
    t.measured = "no size with both iris and NCCL measured (" + sizes_run(rows, op) + ")" + nccl_gaps;
    return t;
  }
  const std::string seen = format_number("%.2fx", lowest) + " or more at " + std::to_string(compared) + " sizes from " +
                           size_text(lo) + " to " + size_text(hi) + nccl_gaps;
  const bool covered = lo <= kKiB && hi >= kGiB && no_nccl == 0;
  t.verdict = covered ? Verdict::kMet : Verdict::kNotMeasured;
  t.measured = covered ? seen : seen + " (not the whole range)";
  return t;
}

// ---- fused ops ---------------------------------------------------------------------------------------

// The row users get without choosing: FusedConfig's defaults (two_shot for matmul_all_reduce, copy engines).
bool default_row(const FusedRecord& r) { return r.variant == (r.op == FusedOp::kMatmulAllReduce ? "two_shot" : "-"); }

std::string row_name(const FusedRecord& r) {
  if (r.variant == "-") return "default config";
  return r.variant + (default_row(r) ? ", the default" : "");
}

// A fused op's rows at one shape. Every row's sequential path is the same work (cuBLAS + NCCL does not
// depend on the fused variant or copy path) timed again in that row's turns, so the targets compare each
// fused time with the fastest of those timings: taking each row's own would let the best of several noisy
// ratios decide.
struct Best {
  const FusedRecord* best = nullptr;      // the fastest correct fused row, where a sequential path was timed
  const FusedRecord* fallback = nullptr;  // the default row, where it is not the best
  const FusedRecord* seq = nullptr;       // the row with the fastest sequential timing
  size_t seq_timings = 0;                 // rows whose sequential path was timed
  std::vector<std::string> failed;        // rows that failed or were wrong
  bool any = false;                       // any row of the op at the shape

  double speedup(const FusedRecord& r) const { return seq->seq.time_us / r.fused.time_us; }
};

Best best_at(const std::vector<FusedRecord>& rows, FusedOp op, const FusedShape& shape) {
  Best b;
  auto at = [&](const FusedRecord& r) { return r.op == op && r.world == kTargetWorld && r.shape == shape; };
  auto correct = [](const FusedRecord& r) { return r.fused.measured() && failure(r.fused).empty(); };
  for (const FusedRecord& r : rows) {
    if (!at(r)) continue;
    b.any = true;
    if (r.seq.measured()) {
      ++b.seq_timings;
      if (b.seq == nullptr || r.seq.time_us < b.seq->seq.time_us) b.seq = &r;
    }
    if (const std::string why = failure(r.fused); !why.empty()) {
      b.failed.push_back(row_name(r) + " " + why.substr(0, why.find(':')));
      continue;
    }
    // Direct launches, host cost included, against the sequential path's graph replays: no fair speed-up
    // (and an op that cannot be captured misses what its users need).
    if (r.fused.measured() && r.fused_direct) {
      b.failed.push_back(row_name(r) + " timed as direct launches (its CUDA graph capture failed)");
      continue;
    }
    if (correct(r) && (b.best == nullptr || r.fused.time_us < b.best->fused.time_us)) b.best = &r;
  }
  if (b.seq == nullptr) {
    b.best = nullptr;  // no speedup without a sequential timing
    return b;
  }
  for (const FusedRecord& r : rows)
    if (at(r) && default_row(r) && &r != b.best && correct(r)) b.fallback = &r;
  return b;
}

std::string best_text(const Best& b) {
  const FusedRecord& r = *b.best;
  std::string s = format_number("%.2fx", b.speedup(r)) + " (" + row_name(r) + ": " +
                  format_number("%.1f", r.fused.time_us) + " us against " + format_number("%.1f", b.seq->seq.time_us) +
                  " us sequential" +
                  (b.seq_timings > 1 ? ", the fastest of " + std::to_string(b.seq_timings) + " timings" : "") + ")";
  if (b.fallback != nullptr) s += "; " + row_name(*b.fallback) + " " + format_number("%.2fx", b.speedup(*b.fallback));
  if (!b.failed.empty()) s += "; " + list_of(b.failed);
  return s;
}

// The best row at the shape; otherwise null, with t saying why (rows that failed or were wrong miss the
// target; a shape the run lacks, or lacks the sequential path of, is not measured).
const FusedRecord* best_row(const Best& b, const FusedShape& shape, TargetCheck& t) {
  if (b.best != nullptr) return b.best;
  t.verdict = b.failed.empty() ? Verdict::kNotMeasured : Verdict::kMissed;
  t.measured = !b.any              ? "no row at " + shape_text(shape) + " on 2 ranks"
               : !b.failed.empty() ? list_of(b.failed)
                                   : "no row with both the fused op and the sequential path measured";
  return nullptr;
}

TargetCheck speedup_at(const std::vector<FusedRecord>& rows, FusedOp op, const FusedShape& shape, double at_least) {
  TargetCheck t = named(std::string(fused_op_name(op)) + " at " + shape_text(shape) + ": at least " +
                        format_number("%.2f", at_least) + "x over cuBLAS + NCCL");
  const Best b = best_at(rows, op, shape);
  if (const FusedRecord* r = best_row(b, shape, t)) {
    t.verdict = b.speedup(*r) >= at_least ? Verdict::kMet : Verdict::kMissed;
    t.measured = best_text(b);
  }
  return t;
}

// PyTorch's fused async-TP ops on 2 x H200, bf16 (BASELINES.md: PyTorch eager, one process per GPU).
struct TorchFigure {
  FusedOp op;
  FusedShape shape;
  double us;
};
constexpr TorchFigure kTorchFused[] = {{FusedOp::kMatmulReduceScatter, kTargetShapes[0], 916.8},
                                       {FusedOp::kAllGatherMatmul, kTargetShapes[0], 856.3},
                                       {FusedOp::kMatmulReduceScatter, kTargetShapes[1], 964.8},
                                       {FusedOp::kAllGatherMatmul, kTargetShapes[1], 922.1}};

TargetCheck faster_than_torch(const std::vector<FusedRecord>& rows, const TorchFigure& torch) {
  TargetCheck t = named(std::string(fused_op_name(torch.op)) + " at " + shape_text(torch.shape) +
                        ": faster than PyTorch's fused op (" + format_number("%.1f", torch.us) +
                        " us in BASELINES.md: another run, through Python)");
  const Best b = best_at(rows, torch.op, torch.shape);
  if (const FusedRecord* r = best_row(b, torch.shape, t)) {
    t.verdict = r->fused.time_us < torch.us ? Verdict::kMet : Verdict::kMissed;
    t.measured = format_number("%.1f us", r->fused.time_us) + " (" + row_name(*r) + ")";
  }
  return t;
}

TargetCheck every_shape(const std::vector<FusedRecord>& rows, FusedOp op) {
  TargetCheck t =
      named(std::string(fused_op_name(op)) + ": at least 1.0x over cuBLAS + NCCL at every shape of the table");
  std::vector<std::string> missed;
  size_t compared = 0;
  bool any = false;
  double lowest = INFINITY;
  for (const FusedShape& shape : kFusedShapes) {
    const Best b = best_at(rows, op, shape);
    any = any || b.any;
    if (b.best == nullptr) {
      if (!b.failed.empty()) missed.push_back(shape_text(shape) + " " + list_of(b.failed));
      continue;
    }
    ++compared;
    const double speedup = b.speedup(*b.best);
    lowest = std::min(lowest, speedup);
    if (speedup < 1.0)
      missed.push_back(format_number("%.3fx", speedup) + " at " + shape_text(shape) + " (" + row_name(*b.best) + ")");
  }
  const size_t shapes = std::size(kFusedShapes);
  if (!missed.empty()) {
    t.verdict = Verdict::kMissed;
    t.measured =
        "missed at " + std::to_string(missed.size()) + " of " + std::to_string(shapes) + " shapes: " + list_of(missed);
  } else if (!any) {
    t.measured = "the run has no " + std::string(fused_op_name(op)) + " rows on 2 ranks";
  } else if (compared == 0) {
    t.measured = "no shape with both the fused op and the sequential path measured on 2 ranks";
  } else {
    t.verdict = compared == shapes ? Verdict::kMet : Verdict::kNotMeasured;
    t.measured = format_number("%.2fx", lowest) + " or more (best row) at " + std::to_string(compared) + " of " +
                 std::to_string(shapes) + " shapes";
  }
  return t;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kMet:
      return "met";
    case Verdict::kMissed:
      return "MISSED";
    case Verdict::kNotMeasured:
      return "not measured";
  }
  return "?";
}

std::string size_text(size_t bytes) {
  for (auto [unit, name] : {std::pair{kGiB, "GiB"}, std::pair{kMiB, "MiB"}, std::pair{kKiB, "KiB"}})
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + " " + name;
  return std::to_string(bytes) + " B";
}

std::string ranks_and_gpus(const MachineInfo& m) {
  if (m.gpus_used <= 0 || m.gpus_used == m.world) return std::to_string(m.world) + " x " + m.gpu_name;
  return std::to_string(m.world) + " ranks on " + std::to_string(m.gpus_used) + " x " + m.gpu_name;
}

std::string targets_not_applicable(const MachineInfo& m, const Options& o) {
  if (m.world != kTargetWorld || (m.gpus_used > 0 && m.gpus_used != m.world) ||
      m.gpu_name.find("H200") == std::string::npos)
    return "the targets are set for 2 x H200; this run has " + ranks_and_gpus(m);
  if (m.shared_gpus) return "ranks share GPUs in this run, so its times are not measurements";
  if (m.iris_device_checks)
    return "iris was built with IRIS_DEVICE_CHECKS (a debug build), so its times are not a release build's";
  if (o.eager) return "the targets are timed over CUDA-graph replays; this run timed direct calls (--eager)";
  if (!o.check) return "the targets hold checked results only; this run did not check them (-c 0)";
  return "";
}

std::vector<TargetCheck> check_collective_targets(const std::vector<Record>& rows) {
  return {latency(rows, Op::kAllReduce, 8 * kKiB, 3),
          latency(rows, Op::kAllReduce, kMiB, 6),
          latency(rows, Op::kAllReduce, 4 * kMiB, 15),
          bandwidth(rows, Op::kAllReduce, 256 * kMiB, 355),
          parity(rows, Op::kAllReduce),
          parity(rows, Op::kAllGather),
          bandwidth(rows, Op::kAllGather, 256 * kMiB, 350),
          parity(rows, Op::kReduceScatter),
          bandwidth(rows, Op::kReduceScatter, 256 * kMiB, 350)};
}

std::vector<TargetCheck> check_fused_targets(const std::vector<FusedRecord>& rows) {
  constexpr std::pair<FusedOp, double> kSpeedups[] = {
      {FusedOp::kMatmulReduceScatter, 1.30}, {FusedOp::kAllGatherMatmul, 1.30}, {FusedOp::kMatmulAllReduce, 1.25}};
  std::vector<TargetCheck> out;
  for (const FusedShape& shape : kTargetShapes) {
    for (auto [op, at_least] : kSpeedups) out.push_back(speedup_at(rows, op, shape, at_least));
    for (const TorchFigure& torch : kTorchFused)
      if (torch.shape == shape) out.push_back(faster_than_torch(rows, torch));
  }
  for (FusedOp op : kAllFusedOps) out.push_back(every_shape(rows, op));
  return out;
}

std::vector<TargetCheck> check_targets(const Options& o, const std::vector<Record>& records,
                                       const std::vector<FusedRecord>& fused) {
  std::vector<TargetCheck> out;
  if (o.collectives) out = check_collective_targets(records);
  if (o.fused)
    for (TargetCheck& t : check_fused_targets(fused)) out.push_back(std::move(t));
  return out;
}

}  // namespace iris_bench
