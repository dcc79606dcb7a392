// expect: flags are full 32- or 64-bit integer words
// Must not compile: a float flag signalled.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  dev::signal<Order::kRelease, Scope::kSys>(ctx, static_cast<float*>(word), 1.0f, 0);
}
