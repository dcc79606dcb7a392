#include "iris_bench_report.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "iris/ccl/config.hpp"
#include "iris/context.hpp"
#include "iris/core/error.hpp"
#include "iris_bench_nccl.hpp"
#include "iris_bench_targets.hpp"

namespace iris_bench {

namespace {

std::string driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!f || !std::getline(f, line)) return "unknown";
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..." (or the Open Kernel Module's
  // wording): the first token made of digits and at least one dot.
  std::istringstream in(line);
  std::string tok;
  while (in >> tok) {
    bool digits_and_dots = !tok.empty() && std::isdigit(static_cast<unsigned char>(tok[0]));
    bool has_dot = false;
    for (char c : tok) {
      if (c == '.')
        has_dot = true;
      else if (!std::isdigit(static_cast<unsigned char>(c)))
        digits_and_dots = false;
    }
    if (digits_and_dots && has_dot) return tok;
  }
  return "unknown";
}

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

// A time, bandwidth or ratio cell: the number, or "err" when the column failed, or "n/a" when not run.
std::string cell(const Column& c, double value, const char* format) {
  if (c.measured() && std::isfinite(value)) return format_number(format, value);
  return c.ran && !c.error.empty() ? "err" : "n/a";
}

std::string wrong_cell(const Column& c) {
  if (!c.ran || c.wrong < 0) return c.ran && !c.error.empty() ? "err" : "n/a";
  return std::to_string(c.wrong);
}

}  // namespace

MachineInfo collect_machine_info(int world) {
  MachineInfo m;
  m.world = world;
  cudaGetDeviceCount(&m.gpu_count);
  for (int d = 0; d < world && d < m.gpu_count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    std::string name = prop.name;
    if (m.gpu_name.empty())
      m.gpu_name = name;
    else if (m.gpu_name.find(name) == std::string::npos)
      m.gpu_name += " + " + name;
  }
  cudaGetLastError();
  m.driver = driver_version();
  cudaDriverGetVersion(&m.cuda_driver_api);
  cudaRuntimeGetVersion(&m.cuda_runtime);
  m.nccl_version = nccl_runtime_version();
  m.nccl_header_version = nccl_header_version();
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) m.hostname = host;
  std::time_t now = std::time(nullptr);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.timestamp_utc = ts;
  const char* pdl = std::getenv("IRIS_PDL");  // read as iris reads it (src/ccl/ccl_host.cc, pdl_enabled)
  m.iris_pdl = pdl == nullptr || std::strcmp(pdl, "0") != 0;
  m.iris_device_checks = iris::library_device_checks();
  if (const char* nvls = std::getenv("NCCL_NVLS_ENABLE")) m.nccl_nvls = nvls;
  return m;
}

void print_preamble(const MachineInfo& m, const Options& o, bool nccl_on) {
  std::printf("# iris-bench  %s\n", o.command_line.c_str());
  std::printf("# %s  host %s\n", m.timestamp_utc.c_str(), m.hostname.c_str());
  std::printf("# %s (%d visible), driver %s, CUDA driver API %s, runtime %s\n", ranks_and_gpus(m).c_str(), m.gpu_count,
              m.driver.c_str(), cuda_version_text(m.cuda_driver_api).c_str(),
              cuda_version_text(m.cuda_runtime).c_str());
  std::printf("# ranks: %s\n", m.launch.c_str());
  if (m.shared_gpus)
    std::printf(
        "# NOTE: ranks share GPUs: this run checks results (#wrong) only; the ranks take turns on a GPU (or, under "
        "MPS, split its SMs) and reach each other in that GPU's memory, so the times, bandwidths and ratios below are "
        "not NVLink measurements\n");
  std::printf("# iris heap per rank: %s\n", m.heap.c_str());
  std::printf(m.iris_pdl
                  ? "# iris kernels launched with programmatic dependent launch (IRIS_PDL=0 turns it off): in a graph "
                    "of back-to-back calls each iris call is launched while the one before it runs\n"
                  : "# iris kernels launched without programmatic dependent launch (IRIS_PDL=0)\n");
  if (m.iris_device_checks)
    std::printf(
        "# NOTE: iris built with IRIS_DEVICE_CHECKS (a debug build): its kernels check every translation, so the iris "
        "times below are not a release build's\n");
  if (m.iris_check_calls)
    std::printf(
        "# IRIS_CHECK_CALLS on: every iris call compares its arguments across the ranks on the host (a "
        "bootstrap round trip per call: in the --eager times, not in graph replays)\n");
  if (!nccl_compiled()) {
    std::printf("# NCCL: not built in (CMake found no NCCL); the NCCL columns are unavailable\n");
  } else if (!nccl_on) {
    std::printf("# NCCL: %s, not used (%s)\n", m.nccl_version.c_str(), o.nccl_off_reason.c_str());
  } else {
    std::printf("# NCCL: %s (NCCL_NVLS_ENABLE=%s); symmetric windows: %s\n", m.nccl_version.c_str(),
                m.nccl_nvls.c_str(), m.nccl_symmetric.c_str());
  }
  if (o.eager) {
    std::printf(
        "# timing (--eager): batches of %d direct calls, no CUDA graphs; %d warm-up + %d timed batches, NCCL's and "
        "iris's in turns; time = median us per call, max over ranks: the host's cost per call where it exceeds the "
        "GPU's; check %s (the eager call and a batch after the timing)\n",
        o.iters, o.warmup, o.repeats, o.check ? "on (#wrong summed over ranks)" : "off");
  } else {
    std::printf(
        "# timing: %d calls per CUDA graph, %d warm-up + %d timed replays, NCCL's and iris's graphs in turns; time = "
        "median us per call, max over ranks; check %s\n",
        o.iters, o.warmup, o.repeats, o.check ? "on (#wrong summed over ranks)" : "off");
  }
  if (o.collectives) std::printf("# ratio = best NCCL time / iris time (>1: iris faster)\n");
  if (o.collectives && !o.variants_left_out.empty())
    std::printf("# all_reduce rows left out: %s\n", o.variants_left_out.c_str());
  if (m.world == 1) {
    std::printf(
        "# NOTE: 1 GPU: nothing crosses NVLink; times and ratios measure launch and kernel overhead only, "
        "and busbw is 0 (factor (n-1)/n)\n");
  }
  std::fflush(stdout);
}

void print_table_header(Op op, iris::DType dtype, const Options& o, const MachineInfo& m) {
  (void)o;
  const char* size_rule = "";
  switch (op) {
    case Op::kAllReduce:
      size_rule = "size = the tensor; busbw = algbw x 2(n-1)/n";
      break;
    case Op::kAllGather:
      size_rule = "size = one rank's input; algbw counts the gathered output (n x size); busbw = algbw x (n-1)/n";
      break;
    case Op::kReduceScatter:
      size_rule = "size = the whole input; busbw = algbw x (n-1)/n";
      break;
    case Op::kAllToAll:
      size_rule = "size = one rank's whole input; busbw = algbw x (n-1)/n";
      break;
    case Op::kBroadcast:
      size_rule = "size = the tensor; busbw = algbw";
      break;
  }
  std::printf("\n# %s, %s, %d rank%s (%s)\n", op_name(op), iris::dtype_name(dtype), m.world, m.world == 1 ? "" : "s",
              size_rule);
  // Group labels centred over their columns (widths from the row format in print_row).
  auto centred = [](const std::string& label, size_t width) {
    std::string dashes = " " + label + " ";
    size_t left = width > dashes.size() ? (width - dashes.size()) / 2 : 0;
    std::string out = std::string(left, '-') + dashes;
    return out + std::string(width > out.size() ? width - out.size() : 0, '-');
  };
  std::printf("#%48s  %s  %s  %s\n", "", centred("iris", 32).c_str(), centred("nccl", 17).c_str(),
              centred("nccl-sym", 17).c_str());
  std::printf("#%11s %12s %9s %6s %5s  %9s %7s %7s %6s  %9s %7s  %9s %7s  %6s  %s\n", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong", "time", "busbw", "time", "busbw", "ratio", "variant");
  std::printf("#%11s %12s %9s %6s %5s  %9s %7s %7s %6s  %9s %7s  %9s %7s  %6s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(us)", "(GB/s)", "");
  std::fflush(stdout);
}

void print_row(const Record& r, std::set<std::string>& printed_errors) {
  const Problem& p = r.problem;
  std::string variant = r.variant;
  if (variant == "-" && !r.resolved.empty())
    variant = r.resolved;  // an exchange's path
  else if (!r.resolved.empty() && r.resolved != r.variant)
    variant += "(" + r.resolved + ")";
  std::printf("%12zu %12zu %9s %6s %5d  %9s %7s %7s %6s  %9s %7s  %9s %7s  %6s  %s\n", p.size_bytes(), p.count,
              iris::dtype_name(p.dtype), p.redop_name(), p.op == Op::kBroadcast ? p.root : -1,
              cell(r.iris, r.iris.time_us, "%.2f").c_str(), cell(r.iris, r.algbw(r.iris), "%.2f").c_str(),
              cell(r.iris, r.busbw(r.iris), "%.2f").c_str(), wrong_cell(r.iris).c_str(),
              cell(r.nccl, r.nccl.time_us, "%.2f").c_str(), cell(r.nccl, r.busbw(r.nccl), "%.2f").c_str(),
              cell(r.nccl_sym, r.nccl_sym.time_us, "%.2f").c_str(),
              cell(r.nccl_sym, r.busbw(r.nccl_sym), "%.2f").c_str(),
              std::isfinite(r.ratio()) ? format_number("%.2f", r.ratio()).c_str() : "n/a", variant.c_str());
  struct Named {
    const char* name;
    const Column* c;
  };
  for (Named n : {Named{"iris", &r.iris}, Named{"nccl", &r.nccl}, Named{"nccl symmetric", &r.nccl_sym}}) {
    std::string msg;
    if (!n.c->error.empty())
      msg = n.c->error;
    else if (n.c->wrong > 0)
      msg = std::to_string(n.c->wrong) + " wrong elements" + (n.c->note.empty() ? "" : " (" + n.c->note + ")");
    if (msg.empty()) continue;
    std::string key = std::string(n.name) + " " + r.variant + ": " + msg;
    if (n.c->wrong > 0 || printed_errors.insert(key).second) {
      std::printf("#   ^ %s%s%s at %zu B: %s\n", n.name, r.variant == "-" ? "" : " ",
                  r.variant == "-" ? "" : r.variant.c_str(), p.size_bytes(), msg.c_str());
    }
  }
  std::fflush(stdout);
}

namespace {

// What each fused op computes from each rank's operands, and the sequential path it is compared with.
const char* fused_op_rule(FusedOp op) {
  switch (op) {
    case FusedOp::kMatmulAllReduce:
      return "C (M x N) = sum over ranks of A_r (M x K/W) @ B_r (K/W x N)\n"
             "#   sequential: cuBLAS GEMM (M x N x K/W) into C, then ncclAllReduce in place on C";
    case FusedOp::kMatmulReduceScatter:
      return "C_r (M/W x N) = rank r's rows of the sum over ranks of A_r (M x K/W) @ B_r (K/W x N)\n"
             "#   sequential: cuBLAS GEMM (M x N x K/W) into an M x N buffer, then ncclReduceScatter into C";
    case FusedOp::kAllGatherMatmul:
      return "C_r (M x N/W) = the rows of every A_r (M/W x K), gathered, @ B_r (K x N/W: a column shard)\n"
             "#   sequential: ncclAllGather of A into an M x K buffer, then cuBLAS GEMM (M x N/W x K) into C";
    case FusedOp::kMatmulAllGather:
      return "C (M x N) = the rows of every A_r (M/W x K) @ B (K x N, the same on every rank)\n"
             "#   sequential: cuBLAS GEMM (M/W x N x K) into this rank's rows of C, then ncclAllGather in place";
    case FusedOp::kAllGatherMatmulKSharded:
      return "C (M x N) = the columns of every A_r (M x K/W), gathered, @ B (K x N, the same on every rank)\n"
             "#   sequential: ncclAllGather of A into W blocks of M x K/W, W copies of them into the columns\n"
             "#   of an M x K buffer, then cuBLAS GEMM (M x N x K) into C";
  }
  return "";
}

std::string fused_op_label(const FusedRecord& r) {
  return std::string(fused_op_name(r.op)) + (r.variant == "-" ? "" : "/" + r.variant);
}

}  // namespace

void print_fused_preamble(const Options& o, const MachineInfo& m, bool nccl_on) {
  std::printf("\n# ==== fused GEMM + communication (iris::ops) against cuBLAS + NCCL one after the other ====\n");
  std::printf("# bf16 in and out, fp32 accumulation; random inputs, different on every rank; B stored %s (--fused-b)\n",
              o.fused_b_nk ? "N x K" : "K x N");
  std::printf(
      "# M, N, K are global; W = %d ranks; each rank's GEMM does 1/W of the work, except in "
      "all_gather_matmul_k_sharded, where every rank multiplies the whole gathered A by B\n",
      m.world);
  if (o.fused_comm_sms > 0)
    std::printf("# comm_sms = %d (--fused-comm-sms): blocks of the kernels beside the GEMM\n", o.fused_comm_sms);
  if (o.fused_min_band_tiles > 0)
    std::printf("# min_band_tiles = %d (--fused-min-band-tiles): the fusion threshold\n", o.fused_min_band_tiles);
  std::printf(
      o.eager ? "# fused_us, seq_us, gemm_us (--eager): median us per call over %d timed batches of %d direct calls "
                "(after %d untimed), no CUDA graphs, the three in turns, max over ranks\n"
              : "# fused_us, seq_us, gemm_us: median us per call over %d timed replays of a CUDA graph of %d calls "
                "(after %d untimed), the three in turns, max over ranks\n",
      o.repeats, o.iters, o.warmup);
  std::printf(
      "# TF = TFLOP/s per GPU = one rank's GEMM work / time: 2*M*N*K / W (all_gather_matmul_k_sharded: 2*M*N*K); "
      "speedup = seq_us / fused_us (>1: fused faster)\n");
  std::printf(
      "# SM_MHz: median SM clock (NVML, sampled every ms) while each path was timed, slowest rank; '-' where not "
      "sampled (no NVML, or turns too short). A GPU at its power limit lowers it: a speedup with unequal clocks "
      "is partly the power budget's\n");
  if (o.check) {
    std::printf(
        "# rel_diff = max over ranks of max |fused - seq| / max |seq| (the eager call, and the first call and a replay "
        "after the timing on a new A, against the sequential path's result for it); "
        "#wrong = elements with |fused - seq| > 2^-6 max |seq|, summed over ranks\n");
  } else {
    std::printf("# check off (-c 0): rel_diff and #wrong not computed\n");
  }
  if (!nccl_on)
    std::printf(
        "# NCCL unavailable: no sequential path timed, so no seq_us or speedup;%s\n",
        o.check
            ? " the check compares with cuBLAS + iris::ccl's collective (auto, one eager call), which the collective "
              "tables check exactly against the host"
            : " no check either");
  std::fflush(stdout);
}

void print_fused_table_header(FusedOp op, const Options& o, const MachineInfo& m) {
  (void)o;
  std::printf("\n# %s, bf16, %d rank%s: %s\n", fused_op_name(op), m.world, m.world == 1 ? "" : "s", fused_op_rule(op));
  std::printf("#%6s %6s %6s  %-26s %9s %9s %9s %9s %9s %7s %9s %6s %15s\n", "M", "N", "K", "op/variant", "fused_us",
              "seq_us", "gemm_us", "fused_TF", "seq_TF", "speedup", "rel_diff", "#wrong", "SM_MHz");
  std::printf("#%6s %6s %6s  %-26s %9s %9s %9s %9s %9s %7s %9s %6s %15s\n", "", "", "", "", "(us)", "(us)", "(us)",
              "(per GPU)", "(per GPU)", "", "", "", "fused/seq/gemm");
  std::fflush(stdout);
}

void print_fused_row(const FusedRecord& r, std::set<std::string>& printed_errors) {
  const std::string label = fused_op_label(r);
  std::string fused_time = cell(r.fused, r.fused.time_us, "%.1f");
  if (r.fused_direct && r.fused.measured()) fused_time += "*";  // the note below says why
  std::string rel = "n/a";
  if (std::isfinite(r.rel_diff))
    rel = format_number("%.2e", r.rel_diff);
  else if (r.fused.ran && !r.fused.error.empty())
    rel = "err";
  auto mhz = [](const Column& c) {
    return std::isfinite(c.sm_mhz) ? format_number("%.0f", c.sm_mhz) : std::string("-");
  };
  const std::string clocks = mhz(r.fused) + "/" + mhz(r.seq) + "/" + mhz(r.gemm);
  std::printf("%7lld %6lld %6lld  %-26s %9s %9s %9s %9s %9s %7s %9s %6s %15s\n", static_cast<long long>(r.shape.m),
              static_cast<long long>(r.shape.n), static_cast<long long>(r.shape.k), label.c_str(), fused_time.c_str(),
              cell(r.seq, r.seq.time_us, "%.1f").c_str(), cell(r.gemm, r.gemm.time_us, "%.1f").c_str(),
              cell(r.fused, r.tflops(r.fused), "%.1f").c_str(), cell(r.seq, r.tflops(r.seq), "%.1f").c_str(),
              std::isfinite(r.speedup()) ? format_number("%.2f", r.speedup()).c_str() : "n/a", rel.c_str(),
              wrong_cell(r.fused).c_str(), clocks.c_str());
  struct Named {
    const char* name;
    const Column* c;
  };
  const std::string where = " " + label + " at " + shape_text(r.shape) + ": ";
  for (Named n : {Named{"fused", &r.fused}, Named{"seq", &r.seq}, Named{"gemm", &r.gemm}}) {
    std::vector<std::string> messages;
    if (!n.c->error.empty()) messages.push_back(n.c->error);
    if (!n.c->note.empty()) messages.push_back(n.c->note);
    for (const std::string& msg : messages) {
      // Once per table for each column and message (an op that is not implemented says so once); the
      // sequential and GEMM paths are the same for every variant, the fused one is not.
      const std::string key = std::string(n.name) + (n.c == &r.fused ? " " + r.variant : "") + ": " + msg;
      if (printed_errors.insert(key).second) std::printf("#   ^ %s%s%s\n", n.name, where.c_str(), msg.c_str());
    }
  }
  if (r.wrong()) {
    std::printf(
        "#   ^ fused%s%lld elements differ from the sequential result by more than 2^-6 max |seq| "
        "(rel_diff %.3g; %s)\n",
        where.c_str(), static_cast<long long>(r.fused.wrong), r.rel_diff, r.wrong_where.c_str());
  }
  std::fflush(stdout);
}

void print_targets(const MachineInfo& m, const Options& o, const std::vector<Record>& records,
                   const std::vector<FusedRecord>& fused) {
  const std::string why_not = targets_not_applicable(m, o);
  if (!why_not.empty()) {
    std::printf("\n# targets: not checked: %s\n", why_not.c_str());
    return;
  }
  const std::vector<TargetCheck> checks = check_targets(o, records, fused);
  std::printf("\n# ==== targets (2 x H200, bf16, CUDA-graph replays; bench/iris_bench_targets.hpp) ====\n");
  size_t counts[3] = {0, 0, 0};
  for (const TargetCheck& t : checks) {
    ++counts[static_cast<int>(t.verdict)];
    std::printf("# %-12s  %s: %s\n", verdict_name(t.verdict), t.target.c_str(), t.measured.c_str());
  }
  std::printf("# targets: %zu met, %zu missed, %zu not measured\n", counts[static_cast<int>(Verdict::kMet)],
              counts[static_cast<int>(Verdict::kMissed)], counts[static_cast<int>(Verdict::kNotMeasured)]);
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The SM clock while a column was timed.
void json_clock(std::ostream& os, const char* prefix, const Column& c) {
  os << ", \"" << prefix << "_sm_mhz\": " << json_number(c.sm_mhz) << ", \"" << prefix
     << "_power_capped\": " << json_number(c.power_capped);
}

void json_column(std::ostream& os, const char* prefix, const Record& r, const Column& c) {
  json_clock(os, prefix, c);
  os << ", \"" << prefix << "_time_us\": " << json_number(c.time_us) << ", \"" << prefix
     << "_algbw_gbps\": " << json_number(r.algbw(c)) << ", \"" << prefix << "_busbw_gbps\": " << json_number(r.busbw(c))
     << ", \"" << prefix << "_wrong\": " << (c.wrong >= 0 ? std::to_string(c.wrong) : "null") << ", \"" << prefix
     << "_error\": " << (c.error.empty() ? (c.ran ? "null" : json_string("not run")) : json_string(c.error));
}

// A fused table's column: time, per-GPU TFLOP/s and error.
void json_fused_column(std::ostream& os, const char* prefix, const FusedRecord& r, const Column& c) {
  json_clock(os, prefix, c);
  os << ", \"" << prefix << "_time_us\": " << json_number(c.time_us) << ", \"" << prefix
     << "_tflops_per_gpu\": " << json_number(r.tflops(c)) << ", \"" << prefix
     << "_error\": " << (c.error.empty() ? (c.ran ? "null" : json_string("not run")) : json_string(c.error));
}

}  // namespace

void write_json(const std::string& path, const MachineInfo& m, const Options& o, const std::vector<Record>& records,
                const std::vector<FusedRecord>& fused) {
  std::ostringstream os;
  os << "{\n  \"tool\": \"iris-bench\",\n  \"format\": 1,\n";
  os << "  \"machine\": {\"gpu\": " << json_string(m.gpu_name) << ", \"gpu_count\": " << m.gpu_count
     << ", \"world\": " << m.world << ", \"launch\": " << json_string(m.launch)
     << ", \"shared_gpus\": " << (m.shared_gpus ? "true" : "false") << ", \"driver\": " << json_string(m.driver)
     << ", \"cuda_driver_api\": " << m.cuda_driver_api << ", \"cuda_runtime\": " << m.cuda_runtime
     << ", \"nccl\": " << (m.nccl_version.empty() ? "null" : json_string(m.nccl_version))
     << ", \"nccl_header_version\": " << m.nccl_header_version
     << ", \"nccl_symmetric\": " << json_string(m.nccl_symmetric)
     << ", \"nccl_nvls_enable\": " << json_string(m.nccl_nvls)
     << ", \"gpus_used\": " << (m.gpus_used > 0 ? m.gpus_used : m.world)
     << ", \"hostname\": " << json_string(m.hostname) << ", \"timestamp_utc\": " << json_string(m.timestamp_utc)
     << ", \"iris_heap\": " << json_string(m.heap) << "},\n";
  os << "  \"settings\": {\"command\": " << json_string(o.command_line) << ", \"iters\": " << o.iters
     << ", \"warmup\": " << o.warmup << ", \"repeats\": " << o.repeats
     << ", \"check\": " << (o.check ? "true" : "false") << ", \"quick\": " << (o.quick ? "true" : "false")
     << ", \"targets\": " << (o.targets ? "true" : "false") << ", \"iris_pdl\": " << (m.iris_pdl ? "true" : "false")
     << ", \"iris_check_calls\": " << (m.iris_check_calls ? "true" : "false")
     << ", \"iris_device_checks\": " << (m.iris_device_checks ? "true" : "false")
     << ", \"collectives\": " << (o.collectives ? "true" : "false") << ", \"fused\": " << (o.fused ? "true" : "false")
     << ", \"fused_b\": " << json_string(o.fused_b_nk ? "nk" : "kn")
     << ", \"fused_rel_tolerance\": " << json_number(kFusedRelTolerance)
     << ", \"eager\": " << (o.eager ? "true" : "false") << ", \"time\": \"median us per call over timed "
     << (o.eager ? "batches of direct calls" : "graph replays")
     << ", max over ranks\", \"tflops\": \"per GPU: one rank's GEMM work / time: 2*M*N*K / world "
        "(all_gather_matmul_k_sharded: 2*M*N*K)\"},\n";
  os << "  \"results\": [";
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    const Problem& p = r.problem;
    os << (i ? ",\n    " : "\n    ") << "{\"op\": " << json_string(op_name(p.op))
       << ", \"variant\": " << json_string(r.variant)
       << ", \"variant_resolved\": " << (r.resolved.empty() ? "null" : json_string(r.resolved))
       << ", \"dtype\": " << json_string(dtype_short_name(p.dtype)) << ", \"size_bytes\": " << p.size_bytes()
       << ", \"count\": " << p.count << ", \"bw_bytes\": " << p.bw_bytes()
       << ", \"bus_factor\": " << json_number(bus_factor(p.op, p.world))
       << ", \"redop\": " << json_string(p.redop_name()) << ", \"root\": " << (p.op == Op::kBroadcast ? p.root : -1)
       << ", \"world\": " << p.world << ", \"gpu\": " << json_string(m.gpu_name)
       << ", \"nccl_version\": " << (m.nccl_version.empty() ? "null" : json_string(m.nccl_version));
    json_column(os, "iris", r, r.iris);
    json_column(os, "nccl", r, r.nccl);
    json_column(os, "nccl_sym", r, r.nccl_sym);
    os << ", \"ratio\": " << json_number(r.ratio()) << "}";
  }
  os << (records.empty() ? "],\n" : "\n  ],\n");
  os << "  \"fused_results\": [";
  for (size_t i = 0; i < fused.size(); ++i) {
    const FusedRecord& r = fused[i];
    os << (i ? ",\n    " : "\n    ") << "{\"op\": " << json_string(fused_op_name(r.op))
       << ", \"variant\": " << json_string(r.variant) << ", \"dtype\": \"bf16\", \"m\": " << r.shape.m
       << ", \"n\": " << r.shape.n << ", \"k\": " << r.shape.k << ", \"world\": " << r.world
       << ", \"b_layout\": " << json_string(r.b_nk ? "nk" : "kn") << ", \"tile\": " << json_string(r.tile)
       << ", \"gemm_sms\": " << r.gemm_sms << ", \"comm_sms\": " << r.comm_sms
       << ", \"gpu\": " << json_string(m.gpu_name)
       << ", \"nccl_version\": " << (m.nccl_version.empty() ? "null" : json_string(m.nccl_version));
    json_fused_column(os, "fused", r, r.fused);
    os << ", \"fused_timing\": " << json_string(o.eager || r.fused_direct ? "direct launches" : "graph replays")
       << ", \"fused_note\": " << (r.fused.note.empty() ? "null" : json_string(r.fused.note));
    json_fused_column(os, "seq", r, r.seq);
    json_fused_column(os, "gemm", r, r.gemm);
    os << ", \"speedup\": " << json_number(r.speedup()) << ", \"max_rel_diff\": " << json_number(r.rel_diff)
       << ", \"wrong\": " << (r.fused.wrong >= 0 ? std::to_string(r.fused.wrong) : "null") << "}";
  }
  os << (fused.empty() ? "],\n" : "\n  ],\n");
  const std::string why_not = targets_not_applicable(m, o);
  os << "  \"targets\": {\"checked\": " << (why_not.empty() ? "true" : "false")
     << ", \"not_checked_because\": " << (why_not.empty() ? "null" : json_string(why_not)) << ", \"checks\": [";
  const std::vector<TargetCheck> checks =
      why_not.empty() ? check_targets(o, records, fused) : std::vector<TargetCheck>{};
  for (size_t i = 0; i < checks.size(); ++i)
    os << (i ? ",\n    " : "\n    ") << "{\"target\": " << json_string(checks[i].target)
       << ", \"verdict\": " << json_string(verdict_name(checks[i].verdict))
       << ", \"measured\": " << json_string(checks[i].measured) << "}";
  os << (checks.empty() ? "]}\n}\n" : "\n  ]}\n}\n");
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) throw iris::Error("iris-bench: cannot write " + tmp);
    f << os.str();
    if (!f) throw iris::Error("iris-bench: writing " + tmp + " failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw iris::Error("iris-bench: cannot rename " + tmp + " to " + path);
}

}  // namespace iris_bench
