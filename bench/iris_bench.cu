// iris-bench: iris::ccl collectives against NCCL, side by side on the same buffers, in nccl-tests' columns;
// with --fused, also the iris::ops fused GEMM + communication ops against cuBLAS + NCCL one after the other.
//
//   iris-bench --quick                      # the README's command: a handful of sizes, all ops, < 1 minute
//   iris-bench -b 8K -e 256M -o all_reduce -v auto,one_shot,two_shot,ring -J ar.json
//   python3 scripts/plot_bench.py ar.json plots/
//   iris-bench --fused-only -J fused.json   # the fused tables alone (bf16, five global GEMM shapes)
//
// One thread per GPU (iris::run_threads), each with its own iris::Context and NCCL communicator; or one
// process per rank (--processes starts them with iris::run_local_processes; under torchrun, mpirun or srun
// each process is the launcher's rank), where rank 0 prints and writes the JSON. For each
// operation and size, every rank allocates the input and output on the iris heap and fills the input with
// small integers (exact sums, see iris_bench_data.hpp); then each implementation (NCCL on those buffers,
// NCCL on buffers in registered symmetric windows, iris per variant):
//   1. prepares (iris: the op's preamble into a fresh workspace; NCCL symmetric: copies the input in),
//   2. runs one eager call into a poisoned output and counts wrong elements against the host reference,
//   3. captures `iters` calls into a CUDA graph on the context's stream;
//   4. after a host barrier, the two NCCL graphs and one iris variant's are replayed in turns, `warmup`
//      rounds untimed and `repeats` rounds timed (CUDA events between the replays), so that none gains
//      from its place in the run; NCCL's graphs are timed again with each iris variant;
//   5. the input changes (a new seed on every rank), and each makes one direct call into a poisoned output,
//      then is replayed once more into a poisoned output, each output checked against the new input's
//      results: a call that read a peer's data of an earlier call (a wait it skipped) would pass with the
//      timed replays' input, the same in every call. The direct call is the first on the new input, the
//      one such a read would get wrong; in the replay only the last of `iters` calls is seen, after calls
//      on the same input. The input is then set back for the next variant.
// The per-call time of a rank is the median over the timed replays; the table shows the maximum over ranks.
// With --eager, step 3 captures nothing: steps 4 and 5 make batches of `iters` direct calls instead of
// replays, for every implementation alike, so the times carry each one's host cost per call (launches,
// events, checks) wherever it exceeds the GPU's, as an application without CUDA graphs sees them.
// Every fallible step ends with an agreement between the ranks (agree()), so a failure (an op that is
// not implemented, an exhausted heap) skips that column on every rank instead of leaving a peer waiting.
//
// The fused tables (iris_bench_fused.cu has the steps) follow the collectives on the same contexts and
// NCCL communicators: per op and global (M, N, K), the fused op, the sequential cuBLAS + NCCL path and
// its GEMM alone, each timed over CUDA-graph replays, and the fused output compared with the sequential
// one. The heap is sized for whichever of the two runs needs more (heap_size_for).
#include <cuda_runtime_api.h>

#include <algorithm>
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
#include "iris/runtime/bootstrap.hpp"
#include "iris/runtime/local_launch.hpp"
#include "iris_bench_ccl.hpp"
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

// One implementation of a row: iris (one variant), NCCL on plain buffers or NCCL on symmetric windows.
struct Subject {
  Timed timed;                    // what, call, after_drain; the graph ready() captured
  void* out = nullptr;            // device output of p.out_bytes()
  std::function<void()> prepare;  // may be empty
  int64_t wrong_eager = 0;        // this rank's wrong elements in the eager call
  bool skipped = false;           // not run at all: the column shows n/a, with skipped_why as its reason
  std::string skipped_why;

  void skip(std::string why) {
    skipped = true;
    skipped_why = std::move(why);
    timed.error = "not run";  // never ready
  }
};

// poison_byte(dtype) in every byte: no value a check accepts.
void poison(const Problem& p, const Subject& s, cudaStream_t stream) {
  IRIS_CUDA_CHECK(cudaMemsetAsync(s.out, poison_byte(p.dtype), p.out_bytes(), stream));
}

// Collective. Steps 1-3 of the header comment; a failure sets s.timed.error on every rank.
void ready(iris::Context& ctx, const Options& o, const Expectation& e, Subject& s) {
  cudaStream_t stream = ctx.stream();
  s.timed.error = agree(ctx, try_step([&] {
                          if (s.prepare) s.prepare();
                        }));
  if (!s.timed.error.empty()) return;
  // One eager call: the check, and NCCL's lazy connection set-up before any capture.
  s.timed.error = agree(ctx, try_step([&] {
                          poison(e.problem, s, stream);
                          s.timed.call();
                          wait_stream(stream, s.timed.what + " (eager call)", o.gpu_timeout_s, ctx.rank());
                          if (s.timed.after_drain) s.timed.after_drain();
                          if (o.check) s.wrong_eager = static_cast<int64_t>(count_wrong(s.out, e, stream));
                        }));
  if (!s.timed.error.empty()) return;
  prepare_timed(ctx, s.timed, o.iters, o.gpu_timeout_s, o.eager, /*eager_first=*/false, /*direct_fallback=*/false);
}

// Collective (where o.check): the wrong elements the subject's eager call found, summed over the ranks, into
// the column even where its timing or later checks failed, so that a wrong result is never shown only as an
// error ("err"). Returns the sum.
double record_eager_wrong(iris::Context& ctx, const Options& o, const Subject& s, Column& c) {
  if (!o.check) return 0;
  const double eager = sum_over_ranks(ctx, static_cast<double>(s.wrong_eager));
  if (eager > 0) {
    c.wrong = static_cast<int64_t>(eager);
    c.note = wrong_where(eager, 0);
  }
  return eager;
}

// Collective. Step 5 for a subject step 4 timed without error, after the input changed to `e`'s: one direct
// call, then one more replay, each into a poisoned output (the subjects share buffers, so the last timed
// replay's output may be another's) and checked against `e`; then the column's wrong count (with the eager
// call's) and note.
void check_replay(iris::Context& ctx, const Options& o, const Expectation& e, const Subject& s, Column& c) {
  if (!o.check) return;
  cudaStream_t stream = ctx.stream();
  int64_t wrong_replay = 0;
  const std::string err =
      agree(ctx, try_step([&] {
              // The first call on the new input: the one that would read a peer's data of the input before.
              poison(e.problem, s, stream);
              s.timed.call();
              wait_stream(stream, s.timed.what + " (first call after the timing)", o.gpu_timeout_s, ctx.rank());
              if (s.timed.after_drain) s.timed.after_drain();
              wrong_replay = static_cast<int64_t>(count_wrong(s.out, e, stream));
              poison(e.problem, s, stream);
              s.timed.turn(stream, o.iters).launch();
              wait_stream(stream, s.timed.what + " (replay after the timing)", o.gpu_timeout_s, ctx.rank());
              if (s.timed.after_drain) s.timed.after_drain();
              wrong_replay += static_cast<int64_t>(count_wrong(s.out, e, stream));
            }));
  const double eager = record_eager_wrong(ctx, o, s, c);
  if (!err.empty()) {
    c.error = "check after the replays: " + err;
    c.time_us = std::nan("");
    return;
  }
  const double replay = sum_over_ranks(ctx, static_cast<double>(wrong_replay));
  c.wrong = static_cast<int64_t>(eager + replay);
  c.note = wrong_where(eager, replay);
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
std::vector<Record> run_size(iris::Context& ctx, const Options& o, const Problem& p, NcclComm* nccl, Aligner& align,
                             uint64_t run) {
  std::vector<std::string> variants;
  if (p.op == Op::kAllReduce) {
    for (const AllReduceRow& v : o.variants) variants.push_back(v.name());
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

  // NCCL's subjects are readied once and timed again in turns with each iris variant (step 4).
  Subject plain, sym;
  if (nccl) {
    plain.timed.what = std::string("nccl ") + op_name(p.op) + " " + size_text;
    plain.out = out.get();
    plain.timed.call = [&] { nccl->call(p, in.get(), out.get(), stream); };
    plain.timed.after_drain = [&] { nccl->check_async_error(); };
    ready(ctx, o, e, plain);

    if (nccl->symmetric_ready()) {
      sym.timed.what = std::string("nccl symmetric ") + op_name(p.op) + " " + size_text;
      if (p.in_bytes() <= nccl->symmetric_in_bytes() && p.out_bytes() <= nccl->symmetric_out_bytes()) {
        sym.out = nccl->symmetric_out();
        sym.prepare = [&] {
          IRIS_CUDA_CHECK(
              cudaMemcpyAsync(nccl->symmetric_in(), in.get(), p.in_bytes(), cudaMemcpyDeviceToDevice, stream));
          wait_stream(stream, "copy into the symmetric window", o.gpu_timeout_s, rank);
        };
        sym.timed.call = [&] { nccl->call(p, nccl->symmetric_in(), nccl->symmetric_out(), stream); };
        sym.timed.after_drain = plain.timed.after_drain;
        ready(ctx, o, e, sym);
      } else {
        sym.timed.error = "larger than the registered symmetric window";
      }
    } else {
      sym.skip(symmetric_column(o, p.op) ? "" : kSymmetricSkipped);
    }
  } else {
    plain.skip("");
    sym.skip("");
  }

  const iris::Tensor tin = input_tensor(p, in.get());
  const iris::Tensor tout = output_tensor(p, out.get());
  for (size_t i = 0; i < rows.size(); ++i) {
    Record& r = rows[i];
    iris::ccl::Config cfg;
    if (p.op == Op::kAllReduce) {
      o.variants[i].apply(cfg);
      // What `auto` (variant or protocol) resolved to, e.g. auto(one_shot/ll).
      try {
        AllReduceRow resolved = o.variants[i];
        resolved.variant = iris::ccl::resolve_all_reduce_variant(cfg, p.world, p.size_bytes(), p.dtype, /*rows=*/1);
        if (resolved.variant == iris::ccl::AllReduceVariant::kOneShot && p.world > 1)
          resolved.protocol = iris::ccl::resolve_one_shot_protocol(cfg, p.size_bytes());
        r.resolved = resolved == o.variants[i] ? std::string() : resolved.name();
      } catch (const std::exception&) {
        r.resolved.clear();
      }
    } else {
      r.resolved = p.exchange_path();  // "ll" or "chunked": the LL bounds are what these rows tune
    }
    iris::ccl::Workspace ws;
    iris::ccl::ContextWorkspaceHost host(ctx);
    Subject s;
    s.timed.what = std::string("iris ") + op_name(p.op) + (r.variant == "-" ? "" : " " + r.variant) + " " + size_text;
    s.out = out.get();
    s.prepare = [&] { iris_preamble(ctx, p, tout, tin, cfg, ws); };
    s.timed.call = [&] { iris_call(ctx, p, tout, tin, cfg, ws, stream); };
    s.timed.after_drain = [&] { ctx.check_device_error(); };
    ready(ctx, o, e, s);

    // Step 4: the three in turns, so that none gains from its place in the run.
    const std::vector<Subject*> subjects = {&plain, &sym, &s};
    const std::vector<Column*> columns = {&r.nccl, &r.nccl_sym, &r.iris};
    const std::vector<TurnTime> times =
        time_together(ctx, {&plain.timed, &sym.timed, &s.timed}, o.iters, o.warmup, o.repeats, o.gpu_timeout_s, &align);
    // Step 5's input: another seed on every rank (NCCL's window gets a copy), set back after the checks.
    Expectation fresh = e;
    fresh.seed = mix64(e.seed ^ 0xc0ffee);
    auto set_input = [&](const Expectation& x) {
      return agree(ctx, try_step([&] {
                     fill_input(in.get(), p.dtype, p.in_count(), x.seed, rank, stream);
                     wait_stream(stream, "input fill", o.gpu_timeout_s, rank);
                     if (!sym.skipped && sym.prepare) sym.prepare();  // the copy into the symmetric window
                   }));
    };
    const std::string refresh = o.check ? set_input(fresh) : std::string();
    for (size_t j = 0; j < subjects.size(); ++j) {
      Column& c = *columns[j];
      if (subjects[j]->skipped) {
        c.error = subjects[j]->skipped_why;
        continue;
      }
      c.ran = true;
      if (!times[j].error.empty()) {
        c.error = times[j].error;
        record_eager_wrong(ctx, o, *subjects[j], c);
        continue;
      }
      c.time_us = times[j].us;
      c.sm_mhz = times[j].sm_mhz;
      c.power_capped = times[j].power_capped;
      if (!refresh.empty()) {
        c.error = "check after the replays: changing the input: " + refresh;
        c.time_us = std::nan("");
        record_eager_wrong(ctx, o, *subjects[j], c);
        continue;
      }
      check_replay(ctx, o, fresh, *subjects[j], c);
    }
    const std::string back = o.check && refresh.empty() ? set_input(e) : std::string();
    // Collective free of the workspace's arrays, in the same order on every rank.
    std::string rel = agree(ctx, try_step([&] { ws.release(host); }));
    if (!rel.empty() && r.iris.error.empty())
      r.iris.note += (r.iris.note.empty() ? "" : "; ") + ("workspace release: " + rel);
    if (!back.empty()) {  // the next variants' checks would read another input: not run
      for (size_t k = i + 1; k < rows.size(); ++k)
        for (Column* c : {&rows[k].iris, &rows[k].nccl, &rows[k].nccl_sym}) {
          c->ran = true;
          c->error = "not run: setting the input back after the checks failed: " + back;
        }
      break;
    }
  }
  return rows;
}

// The fused tables: one per op, a row per global shape (and all_reduce variant). Collective.
void run_fused_tables(iris::Context& ctx, const Options& o, NcclComm* nccl, const std::string& no_nccl_reason,
                      Aligner& align, Shared& shared, uint64_t& run) {
  const bool lead = ctx.rank() == 0;
  if (lead) print_fused_preamble(o, shared.machine, nccl != nullptr);
  std::unique_ptr<FusedRunner> runner;
  std::string err =
      agree(ctx, try_step([&] { runner = std::make_unique<FusedRunner>(ctx, o, nccl, no_nccl_reason, align); }));
  if (!err.empty()) {
    if (lead) std::printf("# fused tables skipped: %s\n", err.c_str());
    return;
  }
  for (FusedOp op : kAllFusedOps) {
    std::set<std::string> printed_errors;
    if (lead) print_fused_table_header(op, o, shared.machine);
    for (const FusedShape& shape : o.fused_shapes) {
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
  std::string no_nccl_reason = !o.nccl            ? "NCCL not used (" + o.nccl_off_reason + ")"
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
    shared.machine.iris_check_calls = ctx.check_calls();
    print_preamble(shared.machine, o, nccl != nullptr);
  }

  uint64_t run = 0;
  // Each timed turn starts after a device barrier, so none is charged a peer's lag from the turn before.
  Aligner align(ctx);
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
        Problem p = make_problem(op, dtype, bytes, world, o.root, o.redop);
        if (p.count == 0) {
          if (lead)
            std::printf("#%11zu  too small for %s of %s on %d ranks; skipped\n", bytes, op_name(op),
                        iris::dtype_name(dtype), world);
          continue;
        }
        std::vector<Record> rows = run_size(ctx, o, p, nccl.get(), align, ++run);
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

  if (o.fused) run_fused_tables(ctx, o, nccl.get(), no_nccl_reason, align, shared, run);

  ctx.barrier();
}

// Headroom over the largest row's exact need (its buffers plus the workspace its plan asks for).
constexpr size_t kHeapHeadroom = 64 * kMiB;

// The heap bytes of the largest collective row: its input and output, and the workspace the preamble of
// its largest variant allocates (iris::ccl's *_needs; every row frees all it allocated).
size_t collective_heap_bytes(const Options& o, int world) {
  size_t most = 0;
  for (iris::DType t : o.dtypes) {
    for (Op op : o.ops) {
      for (size_t bytes : o.sizes) {
        const Problem p = make_problem(op, t, bytes, world, o.root, o.redop);
        if (p.count == 0) continue;
        // HeapBuffer takes whole 256-byte blocks, one at least.
        auto block = [](size_t n) { return std::max<size_t>(256, (n + 255) / 256 * 256); };
        const size_t buffers = block(p.in_bytes()) + block(p.out_bytes());
        const iris::Tensor tin = input_tensor(p, nullptr), tout = output_tensor(p, nullptr);
        const std::vector<AllReduceRow> variants = op == Op::kAllReduce ? o.variants : std::vector<AllReduceRow>{{}};
        for (const AllReduceRow& v : variants) {
          iris::ccl::Config cfg;
          v.apply(cfg);
          try {
            most = std::max(most, buffers + iris::ccl::heap_bytes(iris_needs(p, tout, tin, cfg)));
          } catch (const std::exception&) {
            // Rejected arguments: the row reports the preamble's message when it runs.
          }
        }
      }
    }
  }
  return most;
}

// The heap per rank, and how it was chosen (for the preamble and the JSON).
size_t heap_size_for(const Options& o, int world, int device_sms, std::string* why) {
  size_t bytes = 0;
  std::vector<std::string> parts;
  if (o.collectives) {
    bytes = collective_heap_bytes(o, world) + kHeapHeadroom;
    parts.push_back("collectives: the largest row's buffers + iris::ccl::*_needs workspace + 64 MiB");
  }
  if (o.fused) {
    bytes = std::max(bytes, fused_heap_bytes(o, world, device_sms) + kHeapHeadroom);
    parts.push_back("fused: the largest row's buffers + iris::ops::heap_bytes(plan) + 64 MiB");
  }
  why->clear();
  for (const std::string& p : parts) *why += (why->empty() ? "" : "; ") + p;
  if (parts.size() > 1) *why = "the larger of " + *why;
  return (bytes + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
}

// The largest SM count among the devices the ranks use (the fused plans split SMs by it).
int max_device_sms(int world) {
  int most = 0;
  for (int d = 0; d < std::min(world, iris::local_device_count()); ++d) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d) == cudaSuccess) most = std::max(most, sms);
  }
  cudaGetLastError();
  return most > 0 ? most : 132;
}

// --processes: this program again, once per rank, with torchrun's environment; each child runs one rank
// (main_impl's `launched` path) and rank 0 prints. The exit status is the first failing rank's.
int run_as_processes(int world, int argc, char** argv) {
  std::vector<std::string> args = {"/proc/self/exe"};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  iris::LocalLaunchOptions options;
  options.extra_env = {"IRIS_BENCH_CHILD=1"};
  std::vector<iris::ProcessExit> exits;
  try {
    exits = iris::run_local_processes(world, args, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "iris-bench: %s\n", e.what());
    return 1;
  }
  int status = 0;
  for (const iris::ProcessExit& e : exits) {
    if (e.ok()) continue;
    std::fprintf(stderr, "iris-bench: %s\n", e.describe().c_str());
    if (status == 0) status = e.exit_code > 0 ? e.exit_code : 1;
  }
  return status;
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
  iris::LaunchInfo launch;
  try {
    launch = iris::detect_launch_info();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "iris-bench: %s\n", e.what());
    return 1;
  }
  // Started by a launcher (or by our own --processes): this process is one rank.
  const bool launched = launch.launcher != "none";
  const int world = launched ? launch.world_size : o.gpus > 0 ? o.gpus : gpus;
  if (launched && o.gpus > 0 && o.gpus != world) {
    std::fprintf(stderr, "iris-bench: -g %d asks for %d ranks but the launcher (%s) started %d.\n", o.gpus, o.gpus,
                 launch.launcher.c_str(), world);
    return 1;
  }
  const int local = launched ? launch.local_world_size : world;
  const int per_gpu = (local + gpus - 1) / gpus;
  if (per_gpu > 1 && !launched && !o.processes) {
    std::fprintf(stderr,
                 "iris-bench: -g %d asks for more GPUs than the %d visible (ranks can share a GPU only as processes: "
                 "--processes --ranks-per-gpu %d, which checks results but measures nothing).\n",
                 world, gpus, per_gpu);
    return 1;
  }
  if (per_gpu > o.ranks_per_gpu) {
    std::fprintf(stderr,
                 "iris-bench: %d ranks on this host but %d GPU(s) visible: pass --ranks-per-gpu %d to let ranks share "
                 "GPUs (that checks results but measures nothing).\n",
                 local, gpus, per_gpu);
    return 1;
  }
  for (Op op : o.collectives ? o.ops : std::vector<Op>{}) {
    if (op == Op::kBroadcast && o.root >= world) {
      std::fprintf(stderr, "iris-bench: --root %d is not a rank of %d.\n", o.root, world);
      return 1;
    }
  }
  if (!launched && o.processes) return run_as_processes(world, argc, argv);
  const bool shared_gpus = per_gpu > 1;
  if (shared_gpus && o.nccl) {
    o.nccl = false;
    o.nccl_off_reason = "ranks share GPUs, and NCCL runs one rank per GPU";
  }
  if (o.nccl) nccl_set_environment();

  Shared shared;
  shared.machine = collect_machine_info(world);
  if (launched) {
    const std::string by = launch.launcher == "torchrun" && std::getenv("IRIS_BENCH_CHILD") != nullptr
                               ? std::string("iris-bench --processes")
                               : launch.launcher;
    shared.machine.launch = "processes (" + by + "), " +
                            (shared_gpus ? std::to_string(local) + " on " + std::to_string(gpus) +
                                               " GPU(s), rank r on GPU r % " + std::to_string(gpus)
                                         : std::string("one per GPU"));
  }
  shared.machine.shared_gpus = shared_gpus;
  // This host's GPUs in use, times the hosts (as many ranks on each: the launchers start them so).
  if (shared_gpus) shared.machine.gpus_used = std::min(local, gpus) * std::max(1, world / std::max(1, local));
  iris::ContextOptions copts;
  if (shared_gpus) copts.device = launch.local_rank % gpus;
  const char* env_heap = std::getenv("IRIS_HEAP_SIZE");
  std::string heap_why;
  copts.heap_size = env_heap && *env_heap ? 0 : heap_size_for(o, world, max_device_sms(world), &heap_why);
  shared.machine.heap = copts.heap_size ? std::to_string(copts.heap_size / kMiB) + " MiB (" + heap_why + ")"
                                        : std::string("IRIS_HEAP_SIZE=") + env_heap;

  int status = 0;
  const auto started = std::chrono::steady_clock::now();
  if (launched) {
    // One rank of a process job. A rank that throws releases the others (bootstrap abort) before its
    // context's collective teardown, as run_threads does for threads.
    std::unique_ptr<iris::Context> ctx;
    try {
      ctx = iris::Context::create_from_env(copts);
      run_rank(*ctx, o, shared);
    } catch (const std::exception& e) {
      if (ctx) ctx->bootstrap().abort(e.what());
      std::fflush(stdout);
      std::fprintf(stderr, "iris-bench: rank %d stopped: %s\n", launch.rank, e.what());
      status = 1;
    }
    try {
      ctx.reset();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "iris-bench: rank %d: releasing its context failed: %s\n", launch.rank, e.what());
      status = 1;
    }
    if (launch.rank != 0) return status;  // rank 0 has every row: it reports
  } else {
    try {
      iris::run_threads(
          world, [&](iris::Context& ctx) { run_rank(ctx, o, shared); }, copts);
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "iris-bench: stopped: %s\n", e.what());
      status = 1;
    }
  }

  size_t failed = 0, wrong = 0, nccl_wrong = 0, fused_failed = 0, fused_wrong = 0, broke = 0;
  for (const Record& r : shared.records) {
    if (!r.iris.error.empty()) ++failed;
    if (r.iris.ran && !r.iris.error.empty()) ++broke;  // ran and failed (not a row left out, with its reason)
    if (r.iris.wrong > 0) ++wrong;
    if (r.nccl.wrong > 0 || r.nccl_sym.wrong > 0) ++nccl_wrong;
  }
  for (const FusedRecord& r : shared.fused) {
    if (!r.fused.error.empty()) ++fused_failed;
    if (r.fused.ran && !r.fused.error.empty()) ++broke;
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
  print_targets(shared.machine, o, shared.records, shared.fused);
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
  // A row iris ran and failed (an exception, a hang) fails the run like a wrong result: the tables' "err"
  // cells alone would leave the exit status 0. Rows left out with a reason (n/a) do not.
  if ((wrong > 0 || fused_wrong > 0 || broke > 0) && status == 0) status = 1;
  return status;
}

}  // namespace
}  // namespace iris_bench

int main(int argc, char** argv) { return iris_bench::main_impl(argc, argv); }
