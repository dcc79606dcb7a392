// What the GPU tests of Context::reach_problem and Context::op_stream's refusals can show on this machine,
// and the pieces they share: a stream of another device and the refusal's text.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "support/ranks.hpp"

namespace iris::test {

// True when `device` reads pageable host memory (HMM or ATS): reach_problem accepts it there.
inline bool pageable_access(int device) {
  int access = 0;
  IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&access, cudaDevAttrPageableMemoryAccess, device));
  return access != 0;
}

// True when a stream of another device can be refused here: a second GPU, and a CUDA 12.8 toolkit and driver.
inline bool other_device_stream_checkable() { return gpu_count() >= 2 && Context::op_stream_checks_device(); }

// Why neither refusal can be shown on this machine (device 0 reads pageable memory, and no other device's
// stream can be checked), or "" when one can.
inline std::string reach_refusals_skip_reason() {
  if (!pageable_access(0) || other_device_stream_checkable()) return "";
  return "device 0 reads pageable host memory (HMM or ATS), and another device's stream cannot be checked here (" +
         std::to_string(gpu_count()) + " GPU(s); a stream's device needs CUDA 12.8): nothing here is refused";
}

// A non-blocking stream of the device after `device` (needs a second GPU), destroyed with this object; the
// calling thread's current device is left as it was.
class OtherDeviceStream {
 public:
  explicit OtherDeviceStream(int device) : device_((device + 1) % gpu_count()) {
    int current = 0;
    IRIS_CUDA_CHECK(cudaGetDevice(&current));
    IRIS_CUDA_CHECK(cudaSetDevice(device_));
    IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    IRIS_CUDA_CHECK(cudaSetDevice(current));
  }
  ~OtherDeviceStream() { (void)cudaStreamDestroy(stream_); }
  OtherDeviceStream(const OtherDeviceStream&) = delete;
  OtherDeviceStream& operator=(const OtherDeviceStream&) = delete;
  int device() const { return device_; }
  cudaStream_t get() const { return stream_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

// Context::op_stream's refusal of `other`'s stream, for `op` on `ctx`.
inline std::string other_device_stream_error(const std::string& op, const Context& ctx, int other) {
  const std::string dev = std::to_string(ctx.device());
  return op + ": the stream belongs to device " + std::to_string(other) + ", but rank " + std::to_string(ctx.rank()) +
         "'s context runs on device " + dev + "; pass a stream of device " + dev + " (or none, for ctx.stream()).";
}

// Context::reach_problem's text for pageable host memory on `ctx`'s device.
inline std::string pageable_memory_problem(const Context& ctx) {
  return "is pageable host memory, which device " + std::to_string(ctx.device()) +
         " cannot read; pass device memory (or pinned, mapped host memory).";
}

}  // namespace iris::test
