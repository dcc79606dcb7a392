// expect: wait_until polls with Order::kAcquire
// Must not compile: a wait that polls with release order.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  (void)dev::wait_until<Order::kRelease, Scope::kSys>(ctx, static_cast<const uint32_t*>(word), Cmp::kEq, 1u);
}
