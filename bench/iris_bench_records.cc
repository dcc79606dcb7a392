// iris-bench: what a row's columns derive (bandwidths, ratio, speedup, TFLOP/s) and how a number prints; no
// GPU, so the host tests and the targets (iris_bench_targets.cc) read rows as the tables print them.
#include <cmath>
#include <cstdio>

#include "iris_bench_report.hpp"

namespace iris_bench {

std::string format_number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

double Record::algbw(const Column& c) const {
  if (!c.measured()) return std::nan("");
  return static_cast<double>(problem.bw_bytes()) / (c.time_us * 1e-6) / 1e9;
}

double Record::busbw(const Column& c) const { return algbw(c) * bus_factor(problem.op, problem.world); }

double Record::ratio() const {
  // The faster NCCL column whose check passed (or that was not checked: -c 0): a fast but wrong NCCL result is
  // no bar to hold iris to.
  double best = std::nan("");
  for (const Column* c : {&nccl, &nccl_sym}) {
    if (c->measured() && c->wrong <= 0 && !(best <= c->time_us)) best = c->time_us;
  }
  // Nor is a wrong iris result a speed: its row shows #wrong, no ratio.
  if (!iris.measured() || iris.wrong > 0 || !std::isfinite(best)) return std::nan("");
  return best / iris.time_us;
}

double FusedRecord::flop_per_gpu() const {
  const double product =
      2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) * static_cast<double>(shape.k);
  // all_gather_matmul_k_sharded gathers A's columns and multiplies the whole A by B on every rank.
  return op == FusedOp::kAllGatherMatmulKSharded ? product : product / world;
}

double FusedRecord::tflops(const Column& c) const {
  if (!c.measured()) return std::nan("");
  return flop_per_gpu() / (c.time_us * 1e-6) / 1e12;
}

double FusedRecord::speedup() const {
  if (!fused.measured() || fused.wrong > 0 || !seq.measured()) return std::nan("");  // wrong is no speed-up
  return seq.time_us / fused.time_us;
}

}  // namespace iris_bench
