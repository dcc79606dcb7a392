// expect: reduce_add_v4 is relaxed or release
// Must not compile: a reduction (no result to acquire) with acquire order.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  dev::reduce_add_v4<Order::kAcquire, Scope::kSys>(static_cast<float*>(word), make_float4(1, 2, 3, 4));
}
