// The communication kernels of the fused ops (src/ops/fused_kernels.cu) and the host-side pipeline
// helpers (src/ops/fused.cc) that order them against the GEMMs.
//
// Every call of a fused op is one *epoch*: fused_begin (first on the caller's stream) increments the
// workspace's epoch word (block_state[0]) and tells every peer "ready for this epoch"; every later kernel
// of the call reads the new value. Flags carry epochs and are never reset, so a CUDA-graph replay is a
// new epoch like a new call. A rank writes into a peer's staging only after it has seen that peer's
// ready flag for the epoch, i.e. after the peer finished every kernel of its previous call (they are
// all ordered before its fused_begin), so one copy of each staging area suffices.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "iris/core/tensor.hpp"
#include "iris/device/device_context.hpp"

namespace iris::ops::detail {

// What the sync kernels need: the device handle, the epoch word and the flag array (64-bit words).
struct FusedSync {
  DeviceContext ctx;
  uint64_t* state = nullptr;
  uint64_t* flags = nullptr;
};

// Names the wait in a timeout report.
enum class FusedWait : int { kReady = 0, kData = 1, kReduced = 2 };

// Epoch + 1, then flags[ready_base + rank] = epoch on every peer (release, system scope).
void launch_fused_begin(const FusedSync& s, int ready_base, cudaStream_t stream);
// Waits (acquire, system scope, bounded) until flags[first + i * stride] reaches the epoch for every i in
// [0, count) except i == skip. One small block.
void launch_fused_wait(const FusedSync& s, int first, int count, int stride, int skip, FusedWait what,
                       cudaStream_t stream);
// flags[index] = epoch on rank `to`, or on every peer when to < 0 (release, system scope), after
// everything earlier on the stream.
void launch_fused_signal(const FusedSync& s, int index, int to, cudaStream_t stream);

// rows x row_bytes bytes from src (pitch in bytes) to dst; either side may be a peer's translated
// heap address. `blocks` blocks of 512 threads.
struct Copy2D {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int64_t src_pitch = 0;
  int64_t dst_pitch = 0;
};
void launch_copy_2d(const Copy2D& c, int blocks, cudaStream_t stream);

// out (rows x cols, row stride out_stride elements) = sum over s = 0..world-1, in that order, of the
// contiguous rows x cols block at slots + s * slot_elems (slot own_index, when >= 0, read at `own`
// instead); float accumulation for 16-bit types. When out2 is non-null the result is also written there
// (contiguous rows x cols).
struct ReduceSlots {
  const void* slots = nullptr;
  int64_t slot_elems = 0;
  int world = 1;
  int64_t rows = 0;
  int64_t cols = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
  void* out2 = nullptr;
  const void* own = nullptr;
  int own_index = -1;
};
void launch_reduce_slots(const ReduceSlots& r, DType dtype, int blocks, cudaStream_t stream);

}  // namespace iris::ops::detail
