#include "core/driver_api.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <exception>
#include <mutex>

#include "iris/core/error.hpp"

namespace iris::driver {
namespace {

// `version`: the CUDA version whose form of the function the Fn type is (its PFN_..._vNNNNN suffix).
template <typename Fn>
void resolve(Fn& fn, const char* symbol, unsigned version = 12000) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult status{};
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &ptr, version, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || ptr == nullptr) {
    cudaGetLastError();
    throw CudaError(detail::str_cat("CUDA driver entry point ", symbol, " (CUDA ", version / 1000, ".",
                                    version % 1000 / 10, ") is unavailable (", cudaGetErrorName(err), ", query status ",
                                    static_cast<int>(status), "): is an NVIDIA driver for CUDA ", version / 1000, ".",
                                    version % 1000 / 10, " or newer installed?"),
                    err);
  }
  fn = reinterpret_cast<Fn>(ptr);
}

// Resolves a table once per process with `fill`, and rethrows its first failure at every later call.
template <typename Table, typename Fill>
const Table& resolve_once(Fill fill) {
  static Table table;
  static std::once_flag once;
  static std::exception_ptr failure;
  std::call_once(once, [&] {
    try {
      fill(table);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
  return table;
}

std::atomic<const Api*> g_fake{nullptr};

}  // namespace

void set_api_for_testing(const Api* fake) { g_fake.store(fake, std::memory_order_release); }

const Api& api() {
  if (const Api* fake = g_fake.load(std::memory_order_acquire)) return *fake;
  return resolve_once<Api>([](Api& table) {
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
  });
}

const KernelApi& kernel_api() {
  return resolve_once<KernelApi>([](KernelApi& table) {
    resolve(table.cuKernelGetLibrary, "cuKernelGetLibrary", 12050);
    resolve(table.cuLibraryGetKernelCount, "cuLibraryGetKernelCount", 12040);
    resolve(table.cuLibraryEnumerateKernels, "cuLibraryEnumerateKernels", 12040);
    resolve(table.cuKernelGetFunction, "cuKernelGetFunction", 12000);
    resolve(table.cuFuncIsLoaded, "cuFuncIsLoaded", 12040);
    resolve(table.cuFuncLoad, "cuFuncLoad", 12040);
    resolve(table.cuFuncGetAttribute, "cuFuncGetAttribute", 2020);
  });
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
