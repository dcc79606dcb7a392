// expect: atomic_and takes int32/uint32/int64/uint64
// Must not compile: a bitwise atomic on a float.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  (void)dev::atomic_and<Order::kRelaxed, Scope::kGpu>(static_cast<float*>(word), 1.0f);
}
