// expect: an atomic load is Order::kRelaxed or Order::kAcquire
// Must not compile: an atomic load with release order.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  (void)dev::load<Order::kRelease, Scope::kSys>(static_cast<const uint32_t*>(word));
}
