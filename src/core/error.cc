#include "iris/core/error.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>

namespace iris::detail {

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  auto err = static_cast<cudaError_t>(code);
  throw CudaError(str_cat("CUDA error ", cudaGetErrorName(err), " (", code, "): ", cudaGetErrorString(err),
                          "\n  in ", call, "\n  at ", file, ":", line),
                  code);
}

void throw_cu_error(int code, const char* call, const char* file, int line) {
  const char* name = nullptr;
  const char* text = nullptr;
  auto res = static_cast<CUresult>(code);
  if (cuGetErrorName(res, &name) != CUDA_SUCCESS) name = "CUDA_ERROR_UNKNOWN";
  if (cuGetErrorString(res, &text) != CUDA_SUCCESS) text = "unrecognized error code";
  throw CuError(str_cat("CUDA driver error ", name, " (", code, "): ", text, "\n  in ", call, "\n  at ", file, ":",
                        line),
                code);
}

void throw_sys_error(int err, const char* call, const char* file, int line) {
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof(buf));
  throw SysError(str_cat("system call failed: ", text, " (errno ", err, ")\n  in ", call, "\n  at ", file, ":", line),
                 err);
}

}  // namespace iris::detail
