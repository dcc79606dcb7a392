#include "core/driver_api.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>

#include "iris/core/error.hpp"

namespace iris::driver {
namespace {

template <typename Fn>
void resolve(Fn& fn, const char* symbol) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult status{};
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &ptr, 12000, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || ptr == nullptr) {
    cudaGetLastError();
    throw CudaError(detail::str_cat("CUDA driver entry point ", symbol, " is unavailable (",
                                    cudaGetErrorName(err), ", query status ", static_cast<int>(status),
                                    "): is an NVIDIA driver for CUDA 12 or newer installed?"),
                    err);
  }
  fn = reinterpret_cast<Fn>(ptr);
}

std::atomic<const Api*> g_fake{nullptr};

}  // namespace

void set_api_for_testing(const Api* fake) { g_fake.store(fake, std::memory_order_release); }

const Api& api() {
  if (const Api* fake = g_fake.load(std::memory_order_acquire)) return *fake;
  static Api table;
  static std::once_flag once;
  static std::exception_ptr failure;
  std::call_once(once, [] {
    try {
      resolve(table.cuGetErrorName, "cuGetErrorName");
      resolve(table.cuGetErrorString, "cuGetErrorString");
      resolve(table.cuMemCreate, "cuMemCreate");
      resolve(table.cuMemRelease, "cuMemRelease");
      resolve(table.cuMemMap, "cuMemMap");
      resolve(table.cuMemUnmap, "cuMemUnmap");
      resolve(table.cuMemSetAccess, "cuMemSetAccess");
      resolve(table.cuMemAddressReserve, "cuMemAddressReserve");
      resolve(table.cuMemAddressFree, "cuMemAddressFree");
      resolve(table.cuMemExportToShareableHandle, "cuMemExportToShareableHandle");
      resolve(table.cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle");
      resolve(table.cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity");
    } catch (...) {
      failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
  return table;
}

const char* error_name(CUresult res) {
  const char* name = nullptr;
  try {
    if (api().cuGetErrorName(res, &name) == CUDA_SUCCESS && name != nullptr) return name;
  } catch (...) {
  }
  return "CUDA_ERROR_UNKNOWN";
}

const char* error_string(CUresult res) {
  const char* text = nullptr;
  try {
    if (api().cuGetErrorString(res, &text) == CUDA_SUCCESS && text != nullptr) return text;
  } catch (...) {
  }
  return "unrecognized error code";
}

}  // namespace iris::driver
