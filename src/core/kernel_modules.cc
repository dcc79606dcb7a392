// iris::detail::load_kernel_modules (core/kernel_modules.hpp): the registered kernels' libraries, loaded
// kernel by kernel through the driver's library API.
#include "core/kernel_modules.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <exception>
#include <mutex>
#include <vector>

#include "core/driver_api.hpp"
#include "iris/core/error.hpp"

namespace iris::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<const void*> kernels;
};

Registry& registry() {
  static Registry r;  // constructed at first use: registrations run during static initialization
  return r;
}

std::string driver_failure(const char* call, CUresult res) {
  return str_cat(call, " failed: ", driver::error_name(res), " (", driver::error_string(res), ")");
}

}  // namespace

bool register_kernel_module(const void* kernel) noexcept {
  try {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    r.kernels.push_back(kernel);
    return true;
  } catch (...) {
    return false;  // the library then loads at its first launch
  }
}

size_t registered_kernel_modules() noexcept {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.kernels.size();
}

namespace {

// Loads the library of `anchor` unless it is in `seen`; adds to `report`, or sets its failure. Throws on
// a driver without the loading functions (kernel_api()).
void load_library(const void* anchor, std::vector<CUlibrary>& seen, KernelLoadReport& report) {
  const driver::KernelApi& api = driver::kernel_api();
  cudaKernel_t kernel = nullptr;
  if (const cudaError_t err = cudaGetKernel(&kernel, anchor); err != cudaSuccess) {
    cudaGetLastError();
    report.failure = str_cat("cudaGetKernel failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
    return;
  }
  CUlibrary library = nullptr;
  if (const CUresult res = api.cuKernelGetLibrary(&library, reinterpret_cast<CUkernel>(kernel)); res != CUDA_SUCCESS) {
    report.failure = driver_failure("cuKernelGetLibrary", res);
    return;
  }
  for (CUlibrary l : seen)
    if (l == library) return;
  seen.push_back(library);
  unsigned count = 0;
  if (const CUresult res = api.cuLibraryGetKernelCount(&count, library); res != CUDA_SUCCESS) {
    report.failure = driver_failure("cuLibraryGetKernelCount", res);
    return;
  }
  std::vector<CUkernel> kernels(count, nullptr);
  if (count > 0) {
    if (const CUresult res = api.cuLibraryEnumerateKernels(kernels.data(), count, library); res != CUDA_SUCCESS) {
      report.failure = driver_failure("cuLibraryEnumerateKernels", res);
      return;
    }
  }
  ++report.libraries;
  for (CUkernel k : kernels) {
    CUfunction function = nullptr;
    if (const CUresult res = api.cuKernelGetFunction(&function, k); res != CUDA_SUCCESS) {
      report.failure = driver_failure("cuKernelGetFunction", res);
      return;
    }
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_UNLOADED;
    if (const CUresult res = api.cuFuncIsLoaded(&state, function); res != CUDA_SUCCESS) {
      report.failure = driver_failure("cuFuncIsLoaded", res);
      return;
    }
    if (state != CU_FUNCTION_LOADING_STATE_LOADED) {
      if (const CUresult res = api.cuFuncLoad(function); res != CUDA_SUCCESS) {
        report.failure = driver_failure("cuFuncLoad", res);
        return;
      }
    }
    int local = 0;
    if (const CUresult res = api.cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function);
        res != CUDA_SUCCESS) {
      report.failure = driver_failure("cuFuncGetAttribute", res);
      return;
    }
    if (static_cast<size_t>(local) > report.max_local_bytes) report.max_local_bytes = static_cast<size_t>(local);
    ++report.kernels;
  }
}

template <typename Body>
KernelLoadReport report_of(Body body) noexcept {
  KernelLoadReport report;
  try {
    body(report);
  } catch (const std::exception& e) {
    report.failure = e.what();
  } catch (...) {
    report.failure = "an unknown exception";
  }
  return report;
}

}  // namespace

KernelLoadReport load_kernel_modules() noexcept {
  return report_of([](KernelLoadReport& report) {
    std::vector<const void*> anchors;
    {
      Registry& r = registry();
      const std::lock_guard<std::mutex> lock(r.mutex);
      anchors = r.kernels;
    }
    std::vector<CUlibrary> seen;
    for (const void* anchor : anchors) {
      load_library(anchor, seen, report);
      if (!report.failure.empty()) return;
    }
  });
}

KernelLoadReport load_kernel_library(const void* kernel) noexcept {
  return report_of([kernel](KernelLoadReport& report) {
    std::vector<CUlibrary> seen;
    load_library(kernel, seen, report);
  });
}

}  // namespace iris::detail
