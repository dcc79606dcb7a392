// iris-bench: iris::ccl collectives against NCCL, side by side on the same buffers, in nccl-tests' columns;
// with --fused, also the iris::ops fused GEMM + communication ops against cuBLAS + NCCL one after the other.
//
//   iris-bench --quick                      # the README's command: a handful of sizes, all ops, < 1 minute
//   iris-bench -b 8K -e 256M -o all_reduce -v auto,one_shot,two_shot,ring -J ar.json
//   python3 scripts/plot_bench.py ar.json plots/
//   iris-bench --fused-only -J fused.json   # the fused tables alone (bf16, five global GEMM shapes)
//
// One thread per GPU (iris::run_threads), each with its own iris::Context and NCCL communicator. For each
// operation and size, every rank allocates the input and output on the iris heap and fills the input with
// small integers (exact sums, see iris_bench_data.hpp); then each implementation in turn (NCCL on those
// buffers, NCCL on buffers in registered symmetric windows, iris per variant):
//   1. prepares (iris: the op's preamble into a fresh workspace; NCCL symmetric: copies the input in),
//   2. runs one eager call into a poisoned output and counts wrong elements against the host reference,
//   3. captures `iters` calls into a CUDA graph on the context's stream,
//   4. after a host barrier, replays it `warmup` times untimed and `repeats` times timed (CUDA events),
//   5. checks the output of the last replay (poisoned before the replays) again.
// The per-call time of a rank is the median over the timed replays; the table shows the maximum over ranks.
// Every fallible step ends with an agreement between the ranks (agree()), so a failure (an op that is
// not implemented, an exhausted heap) skips that column on every rank instead of leaving a peer waiting.
//
// The fused tables (iris_bench_fused.cu has the steps) follow the collectives on the same contexts and
// NCCL communicators: per op and global (M, N, K), the fused op, the sequential cuBLAS + NCCL path and
// its GEMM alone, each timed over CUDA-graph replays, and the fused output compared with the sequential
// one. The heap is sized for whichever of the two runs needs more (heap_size_for).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "iris/ccl/collectives.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris_bench_data.hpp"
#include "iris_bench_fused.hpp"
#include "iris_bench_nccl.hpp"
#include "iris_bench_options.hpp"
#include "iris_bench_report.hpp"
#include "iris_bench_util.hpp"

namespace iris_bench {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// State shared by the rank threads; written by rank 0 only, read by main after the threads joined.
struct Shared {
  MachineInfo machine;
  std::vector<Record> records;
  std::vector<FusedRecord> fused;
};

// Rewrites the JSON file with every row so far (rank 0), so a run stopped by a hang keeps what it had.
void save_json(const Options& o, const Shared& shared) {
  if (o.json_path.empty()) return;
  try {
    write_json(o.json_path, shared.machine, o, shared.records, shared.fused);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "iris-bench: %s\n", ex.what());
  }
}

iris::Tensor input_tensor(const Problem& p, void* data) {
  if (p.op == Op::kReduceScatter || p.op == Op::kAllToAll) {
    return iris::Tensor::matrix(data, p.dtype, p.world, static_cast<int64_t>(p.block_count()));
  }
  return iris::Tensor::vector(data, p.dtype, static_cast<int64_t>(p.count));
}

iris::Tensor output_tensor(const Problem& p, void* data) {
  switch (p.op) {
    case Op::kAllGather:
      return iris::Tensor::matrix(data, p.dtype, p.world, static_cast<int64_t>(p.count));
    case Op::kReduceScatter:
      return iris::Tensor::vector(data, p.dtype, static_cast<int64_t>(p.block_count()));
    case Op::kAllToAll:
      return iris::Tensor::matrix(data, p.dtype, p.world, static_cast<int64_t>(p.block_count()));
    default:
      return iris::Tensor::vector(data, p.dtype, static_cast<int64_t>(p.count));
  }
}

void iris_preamble(iris::Context& ctx, const Problem& p, const iris::Tensor& out, const iris::Tensor& in,
                   const iris::ccl::Config& cfg, iris::ccl::Workspace& ws) {
  switch (p.op) {
    case Op::kAllReduce:
      iris::ccl::all_reduce_preamble(ctx, out, in, cfg, ws);
      break;
    case Op::kAllGather:
      iris::ccl::all_gather_preamble(ctx, out, in, cfg, ws);
      break;
    case Op::kReduceScatter:
      iris::ccl::reduce_scatter_preamble(ctx, out, in, cfg, ws);
      break;
    case Op::kAllToAll:
      iris::ccl::all_to_all_preamble(ctx, out, in, cfg, ws);
      break;
    case Op::kBroadcast:
      iris::ccl::broadcast_preamble(ctx, out, in, p.root, cfg, ws);
      break;
  }
}

void iris_call(iris::Context& ctx, const Problem& p, const iris::Tensor& out, const iris::Tensor& in,
               const iris::ccl::Config& cfg, iris::ccl::Workspace& ws, cudaStream_t stream) {
  switch (p.op) {
    case Op::kAllReduce:
      iris::ccl::all_reduce(ctx, out, in, cfg, ws, stream);
      break;
    case Op::kAllGather:
      iris::ccl::all_gather(ctx, out, in, cfg, ws, stream);
      break;
    case Op::kReduceScatter:
      iris::ccl::reduce_scatter(ctx, out, in, cfg, ws, stream);
      break;
    case Op::kAllToAll:
      iris::ccl::all_to_all(ctx, out, in, cfg, ws, stream);
      break;
    case Op::kBroadcast:
      iris::ccl::broadcast(ctx, out, in, p.root, cfg, ws, stream);
      break;
  }
}

// What one implementation needs to be measured.
struct Subject {
  std::string what;                   // for messages: "iris all_reduce one_shot 8192 B"
  void* out = nullptr;                // device output of p.out_bytes()
  std::function<void()> prepare;      // may be empty
  std::function<void()> call;         // enqueues one call on the context's stream
  std::function<void()> after_drain;  // surfaces asynchronous errors once the stream drained; may be empty
};

// Steps 1-5 of the header comment, for one implementation. Collective.
Column measure(iris::Context& ctx, const Options& o, const Expectation& e, const Subject& s) {
  Column c;
  c.ran = true;
  cudaStream_t stream = ctx.stream();
  const int rank = ctx.rank();
  const size_t out_bytes = e.problem.out_bytes();
  auto drain = [&] {
    wait_stream(stream, s.what + " (eager call)", o.gpu_timeout_s, rank);
    if (s.after_drain) s.after_drain();
  };
  // 0x7F in every byte is no value a check accepts (bf16/fp32 ~3.4e38, fp16 NaN, int32 2139062143).
  auto poison = [&] { IRIS_CUDA_CHECK(cudaMemsetAsync(s.out, 0x7F, out_bytes, stream)); };

  std::string err = agree(ctx, try_step([&] {
                            if (s.prepare) s.prepare();
                          }));
  if (!err.empty()) {
    c.error = err;
    return c;
  }

  // One eager call: the check, and NCCL's lazy connection set-up before any capture.
  int64_t wrong_eager = 0;
  err = agree(ctx, try_step([&] {
                poison();
                s.call();
                drain();
                if (o.check) wrong_eager = static_cast<int64_t>(count_wrong(s.out, e, stream));
              }));
  if (!err.empty()) {
    c.error = err;
    return c;
  }

  Graph graph;
  err = agree(ctx, try_step([&] { graph.capture(stream, o.iters, s.call); }));
  if (!err.empty()) {
    c.error = "CUDA graph capture: " + err;
    return c;
  }

  err = agree(ctx, try_step([&] {
                if (o.check) poison();
              }));
  if (!err.empty()) {
    c.error = err;
    return c;
  }
  ctx.barrier();  // every rank starts replaying together (collective; throws on every rank)
  std::vector<double> times;
  err = agree(ctx, try_step([&] {
                times =
                    graph.time_replays(stream, o.warmup, o.repeats, o.gpu_timeout_s, rank, s.what + " (graph replays)");
                if (s.after_drain) s.after_drain();
              }));
  if (!err.empty()) {
    c.error = "graph replay: " + err;
    return c;
  }

  int64_t wrong_replay = 0;
  if (o.check) {
    err = agree(ctx, try_step([&] { wrong_replay = static_cast<int64_t>(count_wrong(s.out, e, stream)); }));
    if (!err.empty()) {
      c.error = "check after replays: " + err;
      return c;
    }
  }

  double slowest = 0;
  for (double t : allgather_double(ctx, median(times))) slowest = std::max(slowest, t);
  c.time_us = slowest;
  if (o.check) {
    double eager = 0, replay = 0;
    for (double w : allgather_double(ctx, static_cast<double>(wrong_eager))) eager += w;
    for (double w : allgather_double(ctx, static_cast<double>(wrong_replay))) replay += w;
    c.wrong = static_cast<int64_t>(eager + replay);
    if (eager > 0 && replay > 0)
      c.note = "eager call and last replay";
    else if (eager > 0)
      c.note = "eager call";
    else if (replay > 0)
      c.note = "last graph replay";
  }
  return c;
}

// The NCCL symmetric-window column is measured where NCCL has symmetric kernels (all_reduce, all_gather,
// reduce_scatter in 2.27/2.28). For broadcast and all_to_all NCCL 2.28.9 ran them at exactly its plain
// time, and its broadcast on registered windows hung now and then from 4 MiB on (after other
// collectives on windows; seen on 2 x H200), which stops the whole run. --nccl-symmetric-all measures
// them anyway.
constexpr const char* kSymmetricSkipped =
    "skipped for this op (NCCL has no symmetric kernel for it; --nccl-symmetric-all measures it anyway)";

bool symmetric_column(const Options& o, Op op) {
  return o.nccl_symmetric_all || (op != Op::kBroadcast && op != Op::kAllToAll);
}

uint64_t seed_for(const Problem& p, uint64_t run) {
  return mix64(run * 1000003ull + static_cast<uint64_t>(p.op) * 131ull + static_cast<uint64_t>(p.dtype) * 7ull +
               p.size_bytes());
}

// All rows of one (op, dtype, size): NCCL plain and symmetric once, then iris once per variant.
std::vector<Record> run_size(iris::Context& ctx, const Options& o, const Problem& p, NcclComm* nccl, uint64_t run) {
  std::vector<std::string> variants;
  if (p.op == Op::kAllReduce) {
    for (auto v : o.variants) variants.push_back(iris::ccl::variant_name(v));
  } else {
    variants.push_back("-");
  }
  std::vector<Record> rows(variants.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].problem = p;
    rows[i].variant = variants[i];
  }
  auto fail_all = [&](const std::string& why) {
    for (Record& r : rows) {
      for (Column* c : {&r.iris, &r.nccl, &r.nccl_sym}) {
        c->ran = true;
        c->error = why;
      }
    }
    return rows;
  };

  cudaStream_t stream = ctx.stream();
  const int rank = ctx.rank();
  const std::string size_text = std::to_string(p.size_bytes()) + " B";
  HeapBuffer in, out;
  std::string err = agree(ctx, try_step([&] {
                            in.alloc(ctx, p.in_bytes());
                            out.alloc(ctx, p.out_bytes());
                          }));
  if (!err.empty()) return fail_all("heap: " + err);

  Expectation e{p, seed_for(p, run), rank};
  err = agree(ctx, try_step([&] {
                fill_input(in.get(), p.dtype, p.in_count(), e.seed, rank, stream);
                wait_stream(stream, "input fill", o.gpu_timeout_s, rank);
              }));
  if (!err.empty()) return fail_all("input fill: " + err);

  Column nccl_plain, nccl_sym;
  if (nccl) {
    Subject s;
    s.what = std::string("nccl ") + op_name(p.op) + " " + size_text;
    s.out = out.get();
    s.call = [&] { nccl->call(p, in.get(), out.get(), stream); };
    s.after_drain = [&] { nccl->check_async_error(); };
    nccl_plain = measure(ctx, o, e, s);

    if (nccl->symmetric_ready()) {
      if (p.in_bytes() <= nccl->symmetric_in_bytes() && p.out_bytes() <= nccl->symmetric_out_bytes()) {
        Subject y;
        y.what = std::string("nccl symmetric ") + op_name(p.op) + " " + size_text;
        y.out = nccl->symmetric_out();
        y.prepare = [&] {
          IRIS_CUDA_CHECK(
              cudaMemcpyAsync(nccl->symmetric_in(), in.get(), p.in_bytes(), cudaMemcpyDeviceToDevice, stream));
          wait_stream(stream, "copy into the symmetric window", o.gpu_timeout_s, rank);
        };
        y.call = [&] { nccl->call(p, nccl->symmetric_in(), nccl->symmetric_out(), stream); };
        y.after_drain = s.after_drain;
        nccl_sym = measure(ctx, o, e, y);
      } else {
        nccl_sym.ran = true;
        nccl_sym.error = "larger than the registered symmetric window";
      }
    } else if (!symmetric_column(o, p.op)) {
      nccl_sym.error = kSymmetricSkipped;  // not run: shown as n/a, the reason goes to the note and the JSON
    }
  }

  const iris::Tensor tin = input_tensor(p, in.get());
  const iris::Tensor tout = output_tensor(p, out.get());
  for (size_t i = 0; i < rows.size(); ++i) {
    Record& r = rows[i];
    r.nccl = nccl_plain;
    r.nccl_sym = nccl_sym;
    iris::ccl::Config cfg;
    if (p.op == Op::kAllReduce) {
      cfg.all_reduce_variant = o.variants[i];
      if (o.variants[i] == iris::ccl::AllReduceVariant::kAuto) {
        try {
          r.resolved = iris::ccl::variant_name(
              iris::ccl::resolve_all_reduce_variant(cfg, p.world, p.size_bytes(), p.dtype, /*rows=*/1));
        } catch (const std::exception&) {
          r.resolved.clear();
        }
      }
    }
    iris::ccl::Workspace ws;
    iris::ccl::ContextWorkspaceHost host(ctx);
    Subject s;
    s.what = std::string("iris ") + op_name(p.op) + (r.variant == "-" ? "" : " " + r.variant) + " " + size_text;
    s.out = out.get();
    s.prepare = [&] { iris_preamble(ctx, p, tout, tin, cfg, ws); };
    s.call = [&] { iris_call(ctx, p, tout, tin, cfg, ws, stream); };
    s.after_drain = [&] { ctx.check_device_error(); };
    r.iris = measure(ctx, o, e, s);
    // Collective free of the workspace's arrays, in the same order on every rank.
    std::string rel = agree(ctx, try_step([&] { ws.release(host); }));
    if (!rel.empty() && r.iris.error.empty())
      r.iris.note += (r.iris.note.empty() ? "" : "; ") + ("workspace release: " + rel);
  }
  return rows;
}

// The fused tables: one per op, a row per global shape (and all_reduce variant). Collective.
void run_fused_tables(iris::Context& ctx, const Options& o, NcclComm* nccl, const std::string& no_nccl_reason,
                      Shared& shared, uint64_t& run) {
  const bool lead = ctx.rank() == 0;
  if (lead) print_fused_preamble(o, shared.machine, nccl != nullptr);
  std::unique_ptr<FusedRunner> runner;
  std::string err = agree(ctx, try_step([&] { runner = std::make_unique<FusedRunner>(ctx, o, nccl, no_nccl_reason); }));
  if (!err.empty()) {
    if (lead) std::printf("# fused tables skipped: %s\n", err.c_str());
    return;
  }
  for (FusedOp op : kAllFusedOps) {
    std::set<std::string> printed_errors;
    if (lead) print_fused_table_header(op, o, shared.machine);
    for (const FusedShape& shape : kFusedShapes) {
      std::vector<FusedRecord> rows = runner->run(op, shape, ++run);
      ctx.barrier();
      if (lead) {
        for (const FusedRecord& r : rows) {
          print_fused_row(r, printed_errors);
          shared.fused.push_back(r);
        }
        save_json(o, shared);
      }
    }
  }
}

void run_rank(iris::Context& ctx, const Options& o, Shared& shared) {
  IRIS_CUDA_CHECK(cudaSetDevice(ctx.device()));
  const int world = ctx.world_size();
  const bool lead = ctx.rank() == 0;

  // ---- NCCL communicator and symmetric windows ----
  std::unique_ptr<NcclComm> nccl;
  std::string nccl_status = "yes";
  // Why there is no communicator, for the fused tables' sequential column.
  std::string no_nccl_reason = !o.nccl            ? "NCCL not used (--no-nccl)"
                               : !nccl_compiled() ? "iris-bench was built without NCCL"
                                                  : "";
  if (o.nccl && nccl_compiled()) {
    std::string err = agree(ctx, try_step([&] { nccl = std::make_unique<NcclComm>(ctx); }));
    if (!err.empty()) {
      if (nccl) nccl->abort();
      nccl.reset();
      no_nccl_reason = "NCCL communicator set-up failed: " + err;
      if (lead) std::printf("# NCCL: communicator set-up failed, NCCL columns skipped: %s\n", err.c_str());
    }
  }
  // Symmetric windows are allocated and registered per table (op and dtype), sized for its largest
  // size, and released after it, so no window outlives the operation it was registered for.
  const bool use_windows = nccl && o.nccl_symmetric && NcclComm::symmetric_compiled();
  if (!nccl) {
    nccl_status = "n/a";
  } else if (!o.collectives) {
    nccl_status = "not used (the fused tables' sequential path runs on plain buffers)";
  } else if (!o.nccl_symmetric) {
    nccl_status = "not used (--no-nccl-symmetric)";
  } else if (!NcclComm::symmetric_compiled()) {
    nccl_status = "unavailable (NCCL headers older than 2.27)";
  } else {
    nccl_status = "yes (ncclMemAlloc + ncclCommWindowRegister NCCL_WIN_COLL_SYMMETRIC, one window pair per table)";
    if (!o.nccl_symmetric_all) nccl_status += "; not for broadcast and all_to_all (--nccl-symmetric-all)";
  }

  if (lead) {
    shared.machine.nccl_symmetric = nccl_status;
    print_preamble(shared.machine, o, nccl != nullptr);
  }

  uint64_t run = 0;
  // --fused-only: no collective tables.
  for (iris::DType dtype : o.collectives ? o.dtypes : std::vector<iris::DType>{}) {
    for (Op op : o.ops) {
      std::set<std::string> printed_errors;
      if (lead) print_table_header(op, dtype, o, shared.machine);
      const bool table_windows = use_windows && symmetric_column(o, op);
      if (table_windows) {
        const Problem largest = make_problem(op, dtype, o.max_bytes, world, o.root);
        std::string err = agree(ctx, try_step([&] { nccl->alloc_symmetric(largest.in_bytes(), largest.out_bytes()); }));
        if (err.empty()) err = agree(ctx, try_step([&] { nccl->register_symmetric(); }));
        if (!err.empty()) {
          agree(ctx, try_step([&] { nccl->release_symmetric(); }));
          if (lead) std::printf("# nccl symmetric windows unavailable for this table: %s\n", err.c_str());
        }
      }
      for (size_t bytes : o.sizes) {
        Problem p = make_problem(op, dtype, bytes, world, o.root);
        if (p.count == 0) {
          if (lead)
            std::printf("#%11zu  too small for %s of %s on %d ranks; skipped\n", bytes, op_name(op),
                        iris::dtype_name(dtype), world);
          continue;
        }
        std::vector<Record> rows = run_size(ctx, o, p, nccl.get(), ++run);
        ctx.barrier();
        if (lead) {
          for (const Record& r : rows) {
            print_row(r, printed_errors);
            shared.records.push_back(r);
          }
          save_json(o, shared);
        }
      }
      if (table_windows) {
        std::string err = agree(ctx, try_step([&] { nccl->release_symmetric(); }));
        if (!err.empty() && lead) std::printf("# releasing the nccl symmetric windows failed: %s\n", err.c_str());
      }
    }
  }

  if (o.fused) run_fused_tables(ctx, o, nccl.get(), no_nccl_reason, shared, run);

  ctx.barrier();
}

// Headroom over the largest fused row's exact need (its buffers plus the workspace its plan asks for).
constexpr size_t kFusedHeapHeadroom = 64 * kMiB;

// The heap per rank, and how it was chosen (for the preamble and the JSON).
size_t heap_size_for(const Options& o, int world, int device_sms, std::string* why) {
  size_t bytes = 0;
  std::vector<std::string> parts;
  if (o.collectives) {
    size_t footprint = 0;
    for (iris::DType t : o.dtypes) {
      for (Op op : o.ops) {
        Problem p = make_problem(op, t, o.max_bytes, world, o.root);
        footprint = std::max(footprint, p.in_bytes() + p.out_bytes());
      }
    }
    // Input + output + workspace staging, generously: one_shot keeps a slot per rank and parity
    // (2 W x the tensor), which 6 x max bytes did not hold at 256 MiB on 4 ranks.
    const size_t w = static_cast<size_t>(std::max(world, 1));
    bytes = std::max((4 + 2 * w) * o.max_bytes, 3 * footprint) + 256 * kMiB;
    parts.push_back("collectives: (4 + 2 x ranks) x max bytes + 256 MiB or more");
  }
  if (o.fused) {
    // Exact, since the plans say what each op's workspace takes; every row frees all it allocated.
    bytes = std::max(bytes, fused_heap_bytes(o, world, device_sms) + kFusedHeapHeadroom);
    parts.push_back("fused: the largest row's buffers + iris::ops::plan_* workspace + 64 MiB");
  }
  why->clear();
  for (const std::string& p : parts) *why += (why->empty() ? "" : "; ") + p;
  if (parts.size() > 1) *why = "the larger of " + *why;
  return (bytes + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
}

// The largest SM count among the devices the ranks use (the fused plans split SMs by it).
int max_device_sms(int world) {
  int most = 0;
  for (int d = 0; d < world; ++d) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d) == cudaSuccess) most = std::max(most, sms);
  }
  cudaGetLastError();
  return most > 0 ? most : 132;
}

int main_impl(int argc, char** argv) {
  Options o;
  try {
    bool help = false;
    o = parse_options(argc, argv, &help);
    if (help) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }

  const int gpus = iris::local_device_count();
  if (gpus == 0) {
    std::printf("iris-bench: no CUDA GPU on this machine; nothing to measure.\n");
    return 2;
  }
  const int world = o.gpus > 0 ? o.gpus : gpus;
  if (world > gpus) {
    std::fprintf(stderr, "iris-bench: -g %d asks for more GPUs than the %d visible.\n", world, gpus);
    return 1;
  }
  for (Op op : o.collectives ? o.ops : std::vector<Op>{}) {
    if (op == Op::kBroadcast && o.root >= world) {
      std::fprintf(stderr, "iris-bench: --root %d is not a rank of %d.\n", o.root, world);
      return 1;
    }
  }
  if (o.nccl) nccl_set_environment();

  Shared shared;
  shared.machine = collect_machine_info(world);
  iris::ContextOptions copts;
  const char* env_heap = std::getenv("IRIS_HEAP_SIZE");
  std::string heap_why;
  copts.heap_size = env_heap && *env_heap ? 0 : heap_size_for(o, world, max_device_sms(world), &heap_why);
  shared.machine.heap = copts.heap_size ? std::to_string(copts.heap_size / kMiB) + " MiB (" + heap_why + ")"
                                        : std::string("IRIS_HEAP_SIZE=") + env_heap;

  int status = 0;
  const auto started = std::chrono::steady_clock::now();
  try {
    iris::run_threads(
        world, [&](iris::Context& ctx) { run_rank(ctx, o, shared); }, copts);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "iris-bench: stopped: %s\n", e.what());
    status = 1;
  }

  size_t failed = 0, wrong = 0, nccl_wrong = 0, fused_failed = 0, fused_wrong = 0;
  for (const Record& r : shared.records) {
    if (!r.iris.error.empty()) ++failed;
    if (r.iris.wrong > 0) ++wrong;
    if (r.nccl.wrong > 0 || r.nccl_sym.wrong > 0) ++nccl_wrong;
  }
  for (const FusedRecord& r : shared.fused) {
    if (!r.fused.error.empty()) ++fused_failed;
    if (r.wrong()) ++fused_wrong;
  }
  std::printf("\n#");
  if (o.collectives) {
    std::printf(" %zu rows; iris: %zu not measured (see the # ^ lines), %zu with wrong results", shared.records.size(),
                failed, wrong);
    if (nccl_wrong) std::printf("; NCCL: %zu with wrong results (a broken reference or a broken NCCL)", nccl_wrong);
    if (o.fused) std::printf(";");
  }
  if (o.fused) {
    std::printf(" %zu fused rows: %zu not measured, %zu with wrong results (beyond 2^-6 of the sequential path)",
                shared.fused.size(), fused_failed, fused_wrong);
  }
  std::printf("; %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (!o.json_path.empty()) {
    try {
      write_json(o.json_path, shared.machine, o, shared.records, shared.fused);
      std::printf("# JSON: %s\n", o.json_path.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "iris-bench: %s\n", e.what());
      status = 1;
    }
  }
  std::fflush(stdout);
  if ((wrong > 0 || fused_wrong > 0) && status == 0) status = 1;
  return status;
}

}  // namespace
}  // namespace iris_bench

int main(int argc, char** argv) { return iris_bench::main_impl(argc, argv); }
