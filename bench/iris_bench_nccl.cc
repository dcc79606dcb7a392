#include "iris_bench_nccl.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"

#ifndef IRIS_BENCH_HAVE_NCCL
#define IRIS_BENCH_HAVE_NCCL 0
#endif

#if IRIS_BENCH_HAVE_NCCL
#include <nccl.h>

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22700 && defined(NCCL_WIN_COLL_SYMMETRIC)
#define IRIS_BENCH_NCCL_WINDOWS 1
#else
#define IRIS_BENCH_NCCL_WINDOWS 0
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22800
#define IRIS_BENCH_NCCL_ALLTOALL 1
#else
#define IRIS_BENCH_NCCL_ALLTOALL 0
#endif

// Throws iris::Error with the call text, file:line and NCCL's error string (and its last-error detail).
#define IRIS_BENCH_NCCL_CHECK(expr)                                                                        \
  do {                                                                                                     \
    ncclResult_t iris_bench_res_ = (expr);                                                                 \
    if (iris_bench_res_ != ncclSuccess && iris_bench_res_ != ncclInProgress) {                             \
      const char* detail_ = ncclGetLastError(nullptr);                                                     \
      throw ::iris::Error(::iris::detail::str_cat(                                                         \
          #expr, " failed at ", __FILE__, ":", __LINE__, ": ", ncclGetErrorString(iris_bench_res_),        \
          (detail_ && *detail_ ? " (" : ""), (detail_ ? detail_ : ""), (detail_ && *detail_ ? ")" : ""))); \
    }                                                                                                      \
  } while (0)
#endif

namespace iris_bench {

bool nccl_compiled() { return IRIS_BENCH_HAVE_NCCL != 0; }

std::string nccl_runtime_version() {
#if IRIS_BENCH_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // Codes below 2.9 are X*1000 + Y*100 + Z; later ones X*10000 + Y*100 + Z.
  int major, minor, patch;
  if (v >= 10000) {
    major = v / 10000;
    minor = (v / 100) % 100;
    patch = v % 100;
  } else {
    major = v / 1000;
    minor = (v / 100) % 10;
    patch = v % 100;
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
#else
  return "";
#endif
}

int nccl_header_version() {
#if IRIS_BENCH_HAVE_NCCL
  return NCCL_VERSION_CODE;
#else
  return 0;
#endif
}

void nccl_set_environment() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

bool NcclComm::symmetric_compiled() {
#if IRIS_BENCH_HAVE_NCCL && IRIS_BENCH_NCCL_WINDOWS
  return true;
#else
  return false;
#endif
}

#if IRIS_BENCH_HAVE_NCCL

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  int rank = 0;
  int world = 1;
#if IRIS_BENCH_NCCL_WINDOWS
  ncclWindow_t win_in = nullptr;
  ncclWindow_t win_out = nullptr;
#endif
};

namespace {

ncclDataType_t nccl_dtype(iris::DType t) {
  switch (t) {
    case iris::DType::kFloat32:
      return ncclFloat32;
    case iris::DType::kFloat16:
      return ncclFloat16;
    case iris::DType::kBFloat16:
      return ncclBfloat16;
    case iris::DType::kInt32:
      return ncclInt32;
    case iris::DType::kInt64:
      return ncclInt64;
    case iris::DType::kFloat64:
      return ncclFloat64;
    case iris::DType::kUInt8:
      return ncclUint8;
    case iris::DType::kInt8:
      return ncclInt8;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22400  // the float8 types came with NCCL 2.24
    case iris::DType::kFloat8E4M3:
      return ncclFloat8e4m3;
    case iris::DType::kFloat8E5M2:
      return ncclFloat8e5m2;
#endif
    default:
      break;
  }
  throw iris::InvalidArgument(std::string("iris-bench: this NCCL has no type for ") + iris::dtype_name(t));
}

ncclRedOp_t nccl_op(iris::ccl::ReduceOp op) {
  switch (op) {
    case iris::ccl::ReduceOp::kSum:
      return ncclSum;
    case iris::ccl::ReduceOp::kMax:
      return ncclMax;
    case iris::ccl::ReduceOp::kMin:
      return ncclMin;
    case iris::ccl::ReduceOp::kAvg:
      return ncclAvg;
    case iris::ccl::ReduceOp::kProd:
      return ncclProd;
  }
  throw iris::InvalidArgument("iris-bench: no NCCL reduction for this op");
}

}  // namespace

NcclComm::NcclComm(iris::Context& ctx) : impl_(std::make_unique<Impl>()), device_(ctx.device()) {
  impl_->rank = ctx.rank();
  impl_->world = ctx.world_size();
  IRIS_CUDA_CHECK(cudaSetDevice(device_));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  std::string mine;
  if (ctx.rank() == 0) {
    // A failure here must still reach the broadcast, or the other ranks would wait for an id forever.
    ncclResult_t res = ncclGetUniqueId(&id);
    mine = res == ncclSuccess ? std::string(reinterpret_cast<const char*>(&id), sizeof id)
                              : std::string("ERR") + ncclGetErrorString(res);
  }
  std::string shared = ctx.bootstrap().broadcast(mine, 0);
  if (shared.size() != sizeof id) {
    throw iris::Error("iris-bench: ncclGetUniqueId failed on rank 0: " +
                      shared.substr(std::min<size_t>(3, shared.size())));
  }
  std::memcpy(&id, shared.data(), sizeof id);
  IRIS_BENCH_NCCL_CHECK(ncclCommInitRank(&impl_->comm, ctx.world_size(), id, ctx.rank()));
}

NcclComm::~NcclComm() {
  if (!impl_ || !impl_->comm) return;
  cudaSetDevice(device_);
  if (std::uncaught_exceptions() > 0) {
    // Unwinding: the other ranks may not come to the collective teardown, so do not wait for them.
    abort();
    return;
  }
  try {
    release_symmetric();
  } catch (...) {
  }
  ncclCommFinalize(impl_->comm);
  ncclCommDestroy(impl_->comm);
}

void NcclComm::call(const Problem& p, const void* in, void* out, cudaStream_t stream) {
  ncclComm_t comm = impl_->comm;
  const ncclDataType_t dt = nccl_dtype(p.dtype);
  switch (p.op) {
    case Op::kAllReduce:
      IRIS_BENCH_NCCL_CHECK(ncclAllReduce(in, out, p.count, dt, nccl_op(p.redop), comm, stream));
      break;
    case Op::kAllGather:
      IRIS_BENCH_NCCL_CHECK(ncclAllGather(in, out, p.count, dt, comm, stream));
      break;
    case Op::kReduceScatter:
      IRIS_BENCH_NCCL_CHECK(ncclReduceScatter(in, out, p.block_count(), dt, nccl_op(p.redop), comm, stream));
      break;
    case Op::kAllToAll: {
#if IRIS_BENCH_NCCL_ALLTOALL
      IRIS_BENCH_NCCL_CHECK(ncclAlltoAll(in, out, p.block_count(), dt, comm, stream));
#else
      const size_t block_bytes = p.block_count() * iris::dtype_size(p.dtype);
      IRIS_BENCH_NCCL_CHECK(ncclGroupStart());
      for (int peer = 0; peer < impl_->world; ++peer) {
        IRIS_BENCH_NCCL_CHECK(
            ncclSend(static_cast<const char*>(in) + peer * block_bytes, p.block_count(), dt, peer, comm, stream));
        IRIS_BENCH_NCCL_CHECK(
            ncclRecv(static_cast<char*>(out) + peer * block_bytes, p.block_count(), dt, peer, comm, stream));
      }
      IRIS_BENCH_NCCL_CHECK(ncclGroupEnd());
#endif
      break;
    }
    case Op::kBroadcast:
      IRIS_BENCH_NCCL_CHECK(ncclBroadcast(in, out, p.count, dt, p.root, comm, stream));
      break;
  }
}

void NcclComm::check_async_error() {
  ncclResult_t async = ncclSuccess;
  IRIS_BENCH_NCCL_CHECK(ncclCommGetAsyncError(impl_->comm, &async));
  if (async != ncclSuccess && async != ncclInProgress) {
    throw iris::Error(std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(async));
  }
}

void NcclComm::abort() {
  if (!impl_->comm) return;
  cudaSetDevice(device_);
  ncclCommAbort(impl_->comm);
  impl_->comm = nullptr;
#if IRIS_BENCH_NCCL_WINDOWS
  impl_->win_in = impl_->win_out = nullptr;
#endif
  windows_registered_ = false;
  // The windows went with the communicator; the memory is still ours.
  if (sym_out_) ncclMemFree(sym_out_);
  if (sym_in_) ncclMemFree(sym_in_);
  sym_in_ = sym_out_ = nullptr;
  sym_in_bytes_ = sym_out_bytes_ = 0;
}

void NcclComm::alloc_symmetric(size_t in_bytes, size_t out_bytes) {
#if IRIS_BENCH_NCCL_WINDOWS
  IRIS_CUDA_CHECK(cudaSetDevice(device_));
  // Whole multiples of 2 MiB (the VMM granularity; NCCL_WIN_REQUIRED_ALIGNMENT is 4 KiB).
  auto round = [](size_t b) {
    return ((b > 0 ? b : 1) + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
  };
  in_bytes = round(in_bytes);
  out_bytes = round(out_bytes);
  if (!sym_in_) {
    IRIS_BENCH_NCCL_CHECK(ncclMemAlloc(&sym_in_, in_bytes));
    sym_in_bytes_ = in_bytes;
  }
  if (!sym_out_) {
    IRIS_BENCH_NCCL_CHECK(ncclMemAlloc(&sym_out_, out_bytes));
    sym_out_bytes_ = out_bytes;
  }
#else
  (void)in_bytes;
  (void)out_bytes;
  throw iris::Error("NCCL " + nccl_runtime_version() + " headers have no ncclCommWindowRegister (needs 2.27+)");
#endif
}

void NcclComm::register_symmetric() {
#if IRIS_BENCH_NCCL_WINDOWS
  IRIS_ASSERT(sym_in_ && sym_out_, "register_symmetric before alloc_symmetric");
  IRIS_BENCH_NCCL_CHECK(
      ncclCommWindowRegister(impl_->comm, sym_in_, sym_in_bytes_, &impl_->win_in, NCCL_WIN_COLL_SYMMETRIC));
  IRIS_BENCH_NCCL_CHECK(
      ncclCommWindowRegister(impl_->comm, sym_out_, sym_out_bytes_, &impl_->win_out, NCCL_WIN_COLL_SYMMETRIC));
  windows_registered_ = true;
#else
  throw iris::Error("NCCL symmetric windows need NCCL 2.27+");
#endif
}

void NcclComm::release_symmetric() {
#if IRIS_BENCH_NCCL_WINDOWS
  windows_registered_ = false;
  if (impl_->win_out) {
    IRIS_BENCH_NCCL_CHECK(ncclCommWindowDeregister(impl_->comm, impl_->win_out));
    impl_->win_out = nullptr;
  }
  if (impl_->win_in) {
    IRIS_BENCH_NCCL_CHECK(ncclCommWindowDeregister(impl_->comm, impl_->win_in));
    impl_->win_in = nullptr;
  }
  if (sym_out_) {
    IRIS_BENCH_NCCL_CHECK(ncclMemFree(sym_out_));
    sym_out_ = nullptr;
  }
  if (sym_in_) {
    IRIS_BENCH_NCCL_CHECK(ncclMemFree(sym_in_));
    sym_in_ = nullptr;
  }
  sym_in_bytes_ = sym_out_bytes_ = 0;
#endif
}

#else  // !IRIS_BENCH_HAVE_NCCL

struct NcclComm::Impl {};

NcclComm::NcclComm(iris::Context& ctx) : device_(ctx.device()) {
  throw iris::Error("iris-bench was built without NCCL (CMake found no nccl.h / libnccl.so)");
}
NcclComm::~NcclComm() = default;
void NcclComm::call(const Problem&, const void*, void*, cudaStream_t) {
  throw iris::Error("iris-bench was built without NCCL");
}
void NcclComm::check_async_error() {}
void NcclComm::abort() {}
void NcclComm::alloc_symmetric(size_t, size_t) { throw iris::Error("iris-bench was built without NCCL"); }
void NcclComm::register_symmetric() { throw iris::Error("iris-bench was built without NCCL"); }
void NcclComm::release_symmetric() {}

#endif

}  // namespace iris_bench
