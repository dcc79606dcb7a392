#include "iris_bench_options.hpp"

#include <getopt.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "iris/ccl/collectives.hpp"
#include "iris/context.hpp"
#include "iris/core/error.hpp"

namespace iris_bench {

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kAllGather:
      return "all_gather";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAllToAll:
      return "all_to_all";
    case Op::kBroadcast:
      return "broadcast";
  }
  return "unknown";
}

const char* fused_op_name(FusedOp op) {
  switch (op) {
    case FusedOp::kMatmulAllReduce:
      return "matmul_all_reduce";
    case FusedOp::kMatmulReduceScatter:
      return "matmul_reduce_scatter";
    case FusedOp::kAllGatherMatmul:
      return "all_gather_matmul";
    case FusedOp::kMatmulAllGather:
      return "matmul_all_gather";
    case FusedOp::kAllGatherMatmulKSharded:
      return "all_gather_matmul_k_sharded";
  }
  return "unknown";
}

double bus_factor(Op op, int world) {
  const double n = world;
  switch (op) {
    case Op::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllToAll:
      return (n - 1) / n;
    case Op::kBroadcast:
      return 1.0;
  }
  return 1.0;
}

bool is_reduction(Op op) { return op == Op::kAllReduce || op == Op::kReduceScatter; }

const char* dtype_short_name(iris::DType t) {
  switch (t) {
    case iris::DType::kBFloat16:
      return "bf16";
    case iris::DType::kFloat16:
      return "fp16";
    case iris::DType::kFloat32:
      return "fp32";
    case iris::DType::kInt32:
      return "int32";
    case iris::DType::kInt64:
      return "int64";
    case iris::DType::kFloat64:
      return "fp64";
    case iris::DType::kUInt8:
      return "uint8";
    case iris::DType::kInt8:
      return "int8";
    case iris::DType::kFloat8E4M3:
      return "fp8_e4m3";
    case iris::DType::kFloat8E5M2:
      return "fp8_e5m2";
  }
  return "unknown";
}

size_t Problem::out_count() const {
  switch (op) {
    case Op::kAllGather:
      return count * static_cast<size_t>(world);
    case Op::kReduceScatter:
      return count / static_cast<size_t>(world);
    default:
      return count;
  }
}

Problem make_problem(Op op, iris::DType dtype, size_t bytes, int world, int root, iris::ccl::ReduceOp redop) {
  Problem p;
  p.op = op;
  p.dtype = dtype;
  p.world = world;
  p.root = root;
  p.redop = redop;
  p.count = bytes / iris::dtype_size(dtype);
  if (op == Op::kReduceScatter || op == Op::kAllToAll) p.count -= p.count % static_cast<size_t>(world);
  return p;
}

std::string Problem::exchange_path() const {
  using iris::ccl::OpKind;
  const size_t esz = iris::dtype_size(dtype);
  OpKind kind = OpKind::kBroadcast;
  size_t block = size_bytes();
  switch (op) {
    case Op::kAllReduce:
      return "";
    case Op::kAllGather:
      kind = OpKind::kAllGather;
      block = in_bytes();
      break;
    case Op::kReduceScatter:
      kind = OpKind::kReduceScatter;
      block = out_bytes();
      break;
    case Op::kAllToAll:
      kind = OpKind::kAllToAll;
      block = block_count() * esz;
      break;
    case Op::kBroadcast:
      break;
  }
  if (world == 1) return "copy";
  return iris::ccl::uses_ll_exchange(kind, block, world) ? "ll" : "chunked";
}

const char* Problem::redop_name() const { return is_reduction(op) ? iris::ccl::reduce_op_name(redop) : "none"; }

std::string AllReduceRow::name() const {
  std::string n = iris::ccl::variant_name(variant);
  if (protocol != iris::ccl::OneShotProtocol::kAuto) n += std::string("/") + iris::ccl::protocol_name(protocol);
  return n;
}

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

[[noreturn]] void bad(const std::string& flag, const std::string& value, const std::string& expected) {
  throw iris::InvalidArgument("iris-bench: bad value '" + value + "' for " + flag + ": expected " + expected + ".");
}

size_t parse_bytes(const std::string& flag, const std::string& value) {
  try {
    return iris::parse_byte_size(value);
  } catch (const iris::InvalidArgument&) {
    bad(flag, value, "a positive byte count with an optional K, M or G suffix (powers of 1024), e.g. 8K or 64M");
  }
}

long parse_int(const std::string& flag, const std::string& value, long lo, long hi) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < lo || v > hi) {
    bad(flag, value, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

double parse_double(const std::string& flag, const std::string& value, double lo) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(v >= lo) || !std::isfinite(v)) {
    bad(flag, value, "a number >= " + std::to_string(lo));
  }
  return v;
}

iris::DType parse_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return iris::DType::kBFloat16;
  if (name == "fp16" || name == "half" || name == "float16") return iris::DType::kFloat16;
  if (name == "fp32" || name == "float" || name == "float32") return iris::DType::kFloat32;
  if (name == "int32" || name == "int") return iris::DType::kInt32;
  if (name == "int64") return iris::DType::kInt64;
  if (name == "fp64" || name == "double" || name == "float64") return iris::DType::kFloat64;
  if (name == "uint8") return iris::DType::kUInt8;
  if (name == "int8") return iris::DType::kInt8;
  if (name == "fp8_e4m3" || name == "float8_e4m3" || name == "e4m3") return iris::DType::kFloat8E4M3;
  if (name == "fp8_e5m2" || name == "float8_e5m2" || name == "e5m2") return iris::DType::kFloat8E5M2;
  bad("-d/--dtype", name,
      "bf16, fp16, fp32, int32, int64, fp64, uint8, int8, fp8_e4m3 or fp8_e5m2 (comma-separated for several)");
}

Op parse_op(const std::string& name) {
  for (Op op : kAllOps) {
    if (name == op_name(op)) return op;
  }
  if (name == "allreduce") return Op::kAllReduce;
  if (name == "allgather") return Op::kAllGather;
  if (name == "reducescatter") return Op::kReduceScatter;
  if (name == "alltoall") return Op::kAllToAll;
  bad("-o/--op", name, "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast or all (comma-separated)");
}

template <typename T>
void push_unique(std::vector<T>& v, T x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

}  // namespace

std::string shape_text(const FusedShape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

std::string usage() {
  return R"(usage: iris-bench [options]

Times iris::ccl collectives against NCCL on the same buffers, one thread per local GPU (or one
process per rank), and prints nccl-tests columns plus NCCL's figures and ratio = best NCCL time /
iris time (>1: iris faster).
With --fused, also times the iris::ops fused GEMM + communication ops against cuBLAS + NCCL run one
after the other on the same buffers.

  -b, --min-bytes SIZE      smallest size (K/M/G suffixes, powers of 1024)        [8K]
  -e, --max-bytes SIZE      largest size                                          [256M]
  -f, --step-factor F       multiply the size by F between rows                   [2]
  -n, --iters N             collective calls captured in one CUDA graph           [20]
  -w, --warmup N            untimed graph replays before timing                   [2]
  -r, --repeats N           timed graph replays; the median per call is reported  [10]
  -c, --check 0|1           check one eager call and one replay (collectives      [1]
                            exactly, avg within a rounding; fused: see below)
      --eager               time direct launches instead of CUDA-graph replays, every
                            path alike (iris, NCCL, cuBLAS + NCCL): -n calls per timed
                            batch, so the host's cost per call shows where it exceeds
                            the GPU's, as in an application that captures no graphs
  -d, --dtype LIST          bf16, fp16, fp32, fp64, int32, int64, uint8, int8,    [bf16]
                            fp8_e4m3, fp8_e5m2; comma-separated
  -o, --op LIST             all_reduce, all_gather, reduce_scatter, all_to_all,
                            broadcast, or all                                     [all]
  -v, --variants LIST       all_reduce variants: auto, one_shot, two_shot, ring,
                            atomic, spinlock, or all; one_shot/ll and one_shot/simple
                            fix one_shot's protocol   [auto,one_shot/ll,one_shot/simple,two_shot]
  -g, --gpus N              number of GPUs (ranks)                                [all local]
      --processes           one process per rank, started by iris-bench with torchrun's
                            environment, instead of one thread per GPU. Started by torchrun,
                            mpirun or srun, iris-bench runs as the launcher's rank anyway
      --ranks-per-gpu N     processes: up to N ranks share each GPU (rank r on GPU r % GPUs),
                            so -g may exceed the GPUs. For checking results only: the ranks
                            take turns on the GPU (under MPS they split its SMs) and reach each
                            other in its memory, so the times are not NVLink's, and NCCL (one
                            rank per GPU) is not run                              [1]
  -J, --json FILE           also write every row as JSON (scripts/plot_bench.py plots it)
      --quick               short suite: 8K, 64K, 256K, 1M, 4M, 16M, 64M; 5 repeats, 1 warm-up
      --targets             the run the project's targets are checked on (2 x H200): -b 1K
                            -e 1G -o all_reduce,all_gather,reduce_scatter --fused; flags
                            given as well override it (not --quick). Every run ends with
                            the targets its rows can check, met, MISSED or not measured
      --root R              broadcast root                                        [0]
      --redop OP            reduction of all_reduce and reduce_scatter: sum, max, min,
                            avg or prod (the same NCCL reduction; atomic: sum, avg) [sum]
      --no-nccl             measure iris only
      --no-nccl-symmetric   skip the NCCL column on registered symmetric windows
      --nccl-symmetric-all  measure that column for broadcast and all_to_all too (NCCL has
                            no symmetric kernel for them; its broadcast there hung at times)
      --gpu-timeout S       seconds a stream may take to drain before the run is
                            declared hung and stopped                             [120]
      --fused               also run the fused-op tables (after the collectives)
      --fused-only          run the fused-op tables only (no collectives)
      --fused-b nk|kn       fused tables: B stored N x K (weights as LLM layers keep
                            them) or K x N                                        [nk]
      --fused-copy ce|sm|both  fused tables: bands move by copy engine, by copy kernels
                            beside the GEMM (FusedConfig::copy_engine false), or both [ce]
      --fused-comm-sms N    fused tables: FusedConfig::comm_sms, the blocks of the kernels
                            beside the GEMM (copy kernels; atomic/spinlock adds); 0 = default [0]
      --fused-min-band-tiles N  fused tables: FusedConfig::min_band_tiles, the fusion threshold
                            (a call whose bands would have fewer tiles runs unfused); 0 = default [0]
      --fused-shapes LIST   fused tables: global shapes MxNxK, comma-separated, instead of the
                            five below (e.g. decode: 1x8192x8192,16x8192x8192); the targets are
                            checked at the five only
  -h, --help                this text

Sizes: all_reduce and broadcast: the tensor; all_gather: one rank's input (bandwidth counts the
gathered output, world x size); reduce_scatter: the whole input; all_to_all: one rank's whole input.
Times are us per call: median over the timed replays on each rank, then the maximum over ranks.

Fused tables (bf16 whatever -d says; -n, -w, -r, -c, -g, -J and --no-nccl apply): one per op and
variant (matmul_all_reduce atomic, spinlock, one_shot and two_shot, matmul_reduce_scatter,
all_gather_matmul, all_gather_matmul_k_sharded, matmul_all_gather), a row per global (M, N, K) in
(8192, 8192, 8192), (16384, 4096, 8192), (4096, 8192, 4096), (2048, 8192, 8192), (128, 8192, 8192),
split over the W ranks as in include/iris/ops/fused.hpp. Columns: fused_us (the fused op), seq_us
(cuBLAS GEMM and the NCCL collective one after the other; with --no-nccl, iris::ccl's), gemm_us
(that GEMM alone), TFLOP/s per GPU = 2*M*N*K / W / time, speedup = seq_us / fused_us (>1: fused
faster), rel_diff = max |fused - seq| / max |seq| and #wrong =
elements whose difference exceeds 2^-6 max |seq| (random inputs, different on every rank).
)";
}

Options parse_options(int argc, char** argv, bool* help) {
  Options o;
  *help = false;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) o.command_line += ' ';
    o.command_line += argv[i];
  }
  enum LongOnly {
    kQuick = 1000,
    kRoot,
    kRedop,
    kNoNccl,
    kNoNcclSymmetric,
    kNcclSymmetricAll,
    kGpuTimeout,
    kFused,
    kFusedOnly,
    kFusedB,
    kFusedCopy,
    kFusedCommSms,
    kFusedMinBandTiles,
    kFusedShapeList,
    kProcesses,
    kRanksPerGpu,
    kEager,
    kTargets
  };
  static const option long_options[] = {{"min-bytes", required_argument, nullptr, 'b'},
                                        {"max-bytes", required_argument, nullptr, 'e'},
                                        {"step-factor", required_argument, nullptr, 'f'},
                                        {"iters", required_argument, nullptr, 'n'},
                                        {"warmup", required_argument, nullptr, 'w'},
                                        {"repeats", required_argument, nullptr, 'r'},
                                        {"check", required_argument, nullptr, 'c'},
                                        {"dtype", required_argument, nullptr, 'd'},
                                        {"op", required_argument, nullptr, 'o'},
                                        {"variants", required_argument, nullptr, 'v'},
                                        {"gpus", required_argument, nullptr, 'g'},
                                        {"json", required_argument, nullptr, 'J'},
                                        {"quick", no_argument, nullptr, kQuick},
                                        {"eager", no_argument, nullptr, kEager},
                                        {"targets", no_argument, nullptr, kTargets},
                                        {"root", required_argument, nullptr, kRoot},
                                        {"redop", required_argument, nullptr, kRedop},
                                        {"no-nccl", no_argument, nullptr, kNoNccl},
                                        {"no-nccl-symmetric", no_argument, nullptr, kNoNcclSymmetric},
                                        {"nccl-symmetric-all", no_argument, nullptr, kNcclSymmetricAll},
                                        {"gpu-timeout", required_argument, nullptr, kGpuTimeout},
                                        {"fused", no_argument, nullptr, kFused},
                                        {"fused-only", no_argument, nullptr, kFusedOnly},
                                        {"fused-b", required_argument, nullptr, kFusedB},
                                        {"fused-copy", required_argument, nullptr, kFusedCopy},
                                        {"fused-comm-sms", required_argument, nullptr, kFusedCommSms},
                                        {"fused-min-band-tiles", required_argument, nullptr, kFusedMinBandTiles},
                                        {"fused-shapes", required_argument, nullptr, kFusedShapeList},
                                        {"processes", no_argument, nullptr, kProcesses},
                                        {"ranks-per-gpu", required_argument, nullptr, kRanksPerGpu},
                                        {"help", no_argument, nullptr, 'h'},
                                        {nullptr, 0, nullptr, 0}};
  const char* short_options = "b:e:f:n:w:r:c:d:o:v:g:J:h";

  // First pass: --quick and --targets set defaults that explicit flags then override, wherever they appear.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") o.quick = true;
    if (std::string(argv[i]) == "--targets") o.targets = true;
  }
  if (o.quick && o.targets)
    throw iris::InvalidArgument(
        "iris-bench: --quick and --targets pick different sizes; pick one (--targets checks the targets from 1K to "
        "1G).");
  if (o.quick) {
    o.repeats = 5;
    o.warmup = 1;
  }
  if (o.targets) {
    o.min_bytes = size_t{1} << 10;
    o.max_bytes = size_t{1} << 30;
    o.ops = {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter};
    o.fused = true;
  }
  bool sizes_given = false;
  optind = 0;  // glibc: 0 rescans from argv[1] with fresh state (the tests parse many command lines)
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, short_options, long_options, nullptr)) != -1) {
    std::string arg = optarg ? optarg : "";
    switch (c) {
      case 'b':
        o.min_bytes = parse_bytes("-b/--min-bytes", arg);
        sizes_given = true;
        break;
      case 'e':
        o.max_bytes = parse_bytes("-e/--max-bytes", arg);
        sizes_given = true;
        break;
      case 'f':
        o.step_factor = parse_double("-f/--step-factor", arg, 1.0);
        sizes_given = true;
        break;
      case 'n':
        o.iters = static_cast<int>(parse_int("-n/--iters", arg, 1, 100000));
        break;
      case 'w':
        o.warmup = static_cast<int>(parse_int("-w/--warmup", arg, 0, 100000));
        break;
      case 'r':
        o.repeats = static_cast<int>(parse_int("-r/--repeats", arg, 1, 100000));
        break;
      case 'c':
        o.check = parse_int("-c/--check", arg, 0, 1) != 0;
        break;
      case 'd':
        o.dtypes.clear();
        for (const auto& s : split_list(arg)) push_unique(o.dtypes, parse_dtype(s));
        if (o.dtypes.empty()) bad("-d/--dtype", arg, "at least one dtype");
        break;
      case 'o':
        o.ops.clear();
        for (const auto& s : split_list(arg)) {
          if (s == "all") {
            for (Op op : kAllOps) push_unique(o.ops, op);
          } else {
            push_unique(o.ops, parse_op(s));
          }
        }
        if (o.ops.empty()) bad("-o/--op", arg, "at least one operation");
        break;
      case 'v':
        o.variants.clear();
        for (const auto& s : split_list(arg)) {
          if (s == "all") {
            using V = iris::ccl::AllReduceVariant;
            for (V v : {V::kAuto, V::kAtomic, V::kSpinlock, V::kOneShot, V::kTwoShot, V::kRing})
              push_unique(o.variants, AllReduceRow{v});
            continue;
          }
          try {
            AllReduceRow row;
            const size_t slash = s.find('/');
            row.variant = iris::ccl::parse_all_reduce_variant(s.substr(0, slash));
            if (slash != std::string::npos) {
              if (row.variant != iris::ccl::AllReduceVariant::kOneShot) throw iris::InvalidArgument("protocol");
              row.protocol = iris::ccl::parse_one_shot_protocol(s.substr(slash + 1));
            }
            push_unique(o.variants, row);
          } catch (const iris::InvalidArgument&) {
            bad("-v/--variants", s,
                "auto, one_shot, one_shot/ll, one_shot/simple, two_shot, ring, atomic, spinlock or all "
                "(comma-separated)");
          }
        }
        if (o.variants.empty()) bad("-v/--variants", arg, "at least one variant");
        break;
      case 'g':
        o.gpus = static_cast<int>(parse_int("-g/--gpus", arg, 1, 4096));
        break;
      case 'J':
        o.json_path = arg;
        break;
      case kQuick:
      case kTargets:
        break;  // handled above
      case kEager:
        o.eager = true;
        break;
      case kRoot:
        o.root = static_cast<int>(parse_int("--root", arg, 0, 4095));
        break;
      case kRedop:
        try {
          o.redop = iris::ccl::parse_reduce_op(arg);
        } catch (const iris::InvalidArgument&) {
          bad("--redop", arg, "sum, max, min, avg or prod");
        }
        break;
      case kNoNccl:
        o.nccl = false;
        break;
      case kNoNcclSymmetric:
        o.nccl_symmetric = false;
        break;
      case kNcclSymmetricAll:
        o.nccl_symmetric_all = true;
        break;
      case kGpuTimeout:
        o.gpu_timeout_s = parse_double("--gpu-timeout", arg, 1.0);
        break;
      case kFused:
        o.fused = true;
        break;
      case kFusedOnly:
        o.fused = true;
        o.collectives = false;
        break;
      case kFusedB:
        if (arg != "nk" && arg != "kn") bad("--fused-b", arg, "nk (B stored N x K) or kn (B stored K x N)");
        o.fused_b_nk = arg == "nk";
        break;
      case kFusedCopy:
        if (arg != "ce" && arg != "sm" && arg != "both")
          bad("--fused-copy", arg, "ce (copy engines), sm (copy kernels beside the GEMM) or both");
        o.fused_copy_engine = arg != "sm";
        o.fused_copy_sm = arg != "ce";
        break;
      case kFusedCommSms:
        o.fused_comm_sms = static_cast<int>(parse_int("--fused-comm-sms", arg, 0, 1024));
        break;
      case kFusedMinBandTiles:
        o.fused_min_band_tiles = static_cast<int>(parse_int("--fused-min-band-tiles", arg, 0, 1 << 30));
        break;
      case kFusedShapeList:
        o.fused_shapes.clear();
        for (const auto& item : split_list(arg)) {
          FusedShape shape;
          char x1 = 0, x2 = 0;
          std::istringstream in(item);
          if (!(in >> shape.m >> x1 >> shape.n >> x2 >> shape.k) || x1 != 'x' || x2 != 'x' || in.peek() != EOF ||
              shape.m < 1 || shape.n < 1 || shape.k < 1 || shape.m > (1 << 20) || shape.n > (1 << 20) ||
              shape.k > (1 << 20) || item.find_first_not_of("0123456789x") != std::string::npos)
            bad("--fused-shapes", item,
                "global shapes MxNxK, each from 1 to 1048576, comma-separated, e.g. 16x8192x8192");
          if (std::find(o.fused_shapes.begin(), o.fused_shapes.end(), shape) == o.fused_shapes.end())
            o.fused_shapes.push_back(shape);
        }
        if (o.fused_shapes.empty()) bad("--fused-shapes", arg, "at least one shape MxNxK");
        break;
      case kProcesses:
        o.processes = true;
        break;
      case kRanksPerGpu:
        o.ranks_per_gpu = static_cast<int>(parse_int("--ranks-per-gpu", arg, 1, 64));
        break;
      case 'h':
        *help = true;
        return o;
      default: {
        std::string what = optind > 0 && optind - 1 < argc ? argv[optind - 1] : "?";
        throw iris::InvalidArgument("iris-bench: unknown option or missing value: '" + what +
                                    "' (iris-bench --help lists the options).");
      }
    }
  }
  if (optind < argc) {
    throw iris::InvalidArgument(std::string("iris-bench: unexpected argument '") + argv[optind] +
                                "' (iris-bench --help lists the options).");
  }
  if (o.min_bytes > o.max_bytes) {
    throw iris::InvalidArgument("iris-bench: -b/--min-bytes (" + std::to_string(o.min_bytes) +
                                ") is larger than -e/--max-bytes (" + std::to_string(o.max_bytes) + ").");
  }

  // atomic adds with remote atomics: it takes sum and avg only, so its rows leave the other reductions' tables.
  if (o.redop != iris::ccl::ReduceOp::kSum && o.redop != iris::ccl::ReduceOp::kAvg) {
    const auto atomic = [](const AllReduceRow& r) { return r.variant == iris::ccl::AllReduceVariant::kAtomic; };
    if (std::find_if(o.variants.begin(), o.variants.end(), atomic) != o.variants.end()) {
      std::erase_if(o.variants, atomic);
      const std::string redop = iris::ccl::reduce_op_name(o.redop);
      if (o.variants.empty() && std::find(o.ops.begin(), o.ops.end(), Op::kAllReduce) != o.ops.end())
        throw iris::InvalidArgument("iris-bench: --redop " + redop +
                                    ": all_reduce variant 'atomic' takes sum and avg only; pick another with -v.");
      o.variants_left_out = "atomic (it takes sum and avg only, not " + redop + ")";
    }
  }

  if (o.quick && !sizes_given) {
    o.sizes = {size_t{8} << 10, size_t{64} << 10, size_t{256} << 10, size_t{1} << 20,
               size_t{4} << 20, size_t{16} << 20, size_t{64} << 20};
    o.min_bytes = o.sizes.front();
    o.max_bytes = o.sizes.back();
  } else if (o.step_factor <= 1.0) {
    // nccl-tests semantics of -f 1 would loop forever; take it as "min and max only".
    o.sizes.push_back(o.min_bytes);
    if (o.max_bytes != o.min_bytes) o.sizes.push_back(o.max_bytes);
  } else {
    for (double s = static_cast<double>(o.min_bytes); s <= static_cast<double>(o.max_bytes) * (1 + 1e-9);
         s *= o.step_factor) {
      size_t b = static_cast<size_t>(std::llround(s));
      if (o.sizes.empty() || b != o.sizes.back()) o.sizes.push_back(b);
    }
  }
  return o;
}

}  // namespace iris_bench
