// expect: atomic loads take 4- or 8-byte integers or floats
// Must not compile: an atomic load of a 16-bit word.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  (void)dev::load<Order::kRelaxed, Scope::kGpu>(static_cast<const uint16_t*>(word));
}
