// expect: bulk copies move trivially copyable elements
// Must not compile: a bulk copy of elements with a copy constructor.
// tests/CMakeLists.txt builds it, and the compiler's error must hold the words above.
#include <cstdint>

#include "iris/device.cuh"

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

// Copying it runs code: a bulk copy moves bytes, so it must refuse it.
struct Counted {
  int value;
  __device__ Counted(const Counted& other) : value(other.value + 1) {}
};

__global__ void misuse(iris::DeviceContext ctx, void* word) {
  dev::copy_block(static_cast<Counted*>(word), static_cast<const Counted*>(word) + 8, 8);
}
