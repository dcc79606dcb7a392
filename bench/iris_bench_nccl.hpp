// iris-bench: the NCCL side of the comparison, behind a header that does not include nccl.h (so the
// program builds, without the NCCL columns, where NCCL is missing: IRIS_BENCH_HAVE_NCCL=0).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "iris/context.hpp"
#include "iris_bench_options.hpp"

namespace iris_bench {

// True when iris-bench was built with NCCL.
bool nccl_compiled();
// "2.28.9" from the loaded library (ncclGetVersion), or "" without NCCL.
std::string nccl_runtime_version();
// NCCL_VERSION_CODE of the headers built against, or 0.
int nccl_header_version();
// Sets NCCL_NVLS_ENABLE=0 unless the user set it (NVLink multicast is never used on the lent machines).
void nccl_set_environment();

class NcclComm {
 public:
  // Collective over ctx's ranks: rank 0 creates the unique id, the bootstrap broadcasts it, and every rank
  // calls ncclCommInitRank on ctx.device(). Throws iris::Error naming the failing NCCL call.
  explicit NcclComm(iris::Context& ctx);
  // Deregisters the windows, frees their memory, finalizes and destroys the communicator.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Enqueues one call of p.op on `stream`: in holds p.in_count() elements, out p.out_count().
  void call(const Problem& p, const void* in, void* out, cudaStream_t stream);
  // Throws iris::Error when the communicator reports an asynchronous error.
  void check_async_error();
  // Local teardown without waiting for the other ranks (ncclCommAbort), for when they may not take part.
  void abort();

  // ---- symmetric windows (NCCL 2.27+) --------------------------------------------------------------
  // Whether the headers have ncclCommWindowRegister.
  static bool symmetric_compiled();
  // Local: ncclMemAlloc of the two buffers (throws). Call on every rank, then agree, then register.
  void alloc_symmetric(size_t in_bytes, size_t out_bytes);
  // Collective: ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC) of both buffers (throws).
  void register_symmetric();
  // Collective: deregisters and frees (safe when nothing was registered or allocated).
  void release_symmetric();
  bool symmetric_ready() const { return windows_registered_; }
  void* symmetric_in() const { return sym_in_; }
  void* symmetric_out() const { return sym_out_; }
  size_t symmetric_in_bytes() const { return sym_in_bytes_; }
  size_t symmetric_out_bytes() const { return sym_out_bytes_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int device_ = 0;
  void* sym_in_ = nullptr;
  void* sym_out_ = nullptr;
  size_t sym_in_bytes_ = 0;
  size_t sym_out_bytes_ = 0;
  bool windows_registered_ = false;
};

}  // namespace iris_bench
