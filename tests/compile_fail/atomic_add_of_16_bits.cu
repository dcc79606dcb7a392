// expect: atomic_add takes int32/uint32/int64/uint64/float/double
// Must not compile: an atomic add on a 16-bit word.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  (void)dev::atomic_add<Order::kRelaxed, Scope::kGpu>(static_cast<int16_t*>(word), int16_t{1});
}
