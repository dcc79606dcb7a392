// expect: an atomic store is Order::kRelaxed or Order::kRelease
// Must not compile: an atomic store with acquire order.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  dev::store<Order::kAcquire, Scope::kSys>(static_cast<uint64_t*>(word), uint64_t{1});
}
