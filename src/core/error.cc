#include "iris/core/error.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "core/driver_api.hpp"

namespace iris::detail {

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  auto err = static_cast<cudaError_t>(code);
  throw CudaError(str_cat("CUDA error ", cudaGetErrorName(err), " (", code, "): ", cudaGetErrorString(err),
                          "\n  in ", call, "\n  at ", file, ":", line),
                  code);
}

void throw_cu_error(int code, const char* call, const char* file, int line) {
  auto res = static_cast<CUresult>(code);
  const char* name = driver::error_name(res);
  const char* text = driver::error_string(res);
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
