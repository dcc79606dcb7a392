// One element of a DType on the host, to and from a double: what host references and checks (the tests,
// iris-bench) compare a kernel's output with. No GPU.
#pragma once

#include "iris/core/tensor.hpp"

namespace iris {

// Stores v as one element of type t at dst (dtype_size(t) bytes) as iris's kernels store a result they hold in
// float32: the 16-bit and 8-bit floats through float32, then to nearest even; float8 saturates at its largest
// finite value (448 for e4m3, 57344 for e5m2). float64 stores v, the integer types convert it as static_cast does
// (v must lie in the type's range). An unknown t stores nothing.
void encode_element(DType t, double v, void* dst);
// The value of the element of type t at src (NaN for an unknown t).
double decode_element(DType t, const void* src);
// v as an element of type t holds it: decode_element of encode_element.
double stored_value(DType t, double v);

}  // namespace iris
