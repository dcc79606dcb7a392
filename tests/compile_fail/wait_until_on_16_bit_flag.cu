// expect: flags are full 32- or 64-bit integer words
// Must not compile: a wait on a 16-bit flag.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  (void)dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, static_cast<const uint16_t*>(word), Cmp::kEq, uint16_t{1});
}
