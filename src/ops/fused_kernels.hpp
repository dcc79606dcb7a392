// The communication kernels of the fused ops (src/ops/fused_kernels.cu) and the host-side pipeline
// helpers (src/ops/fused.cc) that order them against the GEMMs.
//
// Every call of a fused op is one *epoch*: fused_begin (first on the caller's stream) increments the
// workspace's epoch word (block_state[0]) and tells every peer "ready for this epoch"; every later kernel
// of the call reads the new value. Flags carry epochs and are never reset, so a CUDA-graph replay is a
// new epoch like a new call. The ready flag carries a tag of the call key too (ccl/collective_kernels.hpp,
// tagged_epoch), so that ranks whose calls differ (a shape, dtype, bias or config no preamble compared) find it
// in every pipelined call, at its start. A rank writes into a peer's staging only after it has seen that peer's
// ready flag for the epoch, i.e. after the peer finished every kernel of its previous call (they are
// all ordered before its fused_begin), so one copy of each staging area suffices. A wait that gives up
// stops the workspace (its stop word): the call's later kernels (waits, signals, copy kernels, tile
// reductions) return at once, so that nothing of it reaches a peer that never became ready, except what the
// copy engine copies (FusedConfig::copy_engine), which no device word can stop.
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

// Epoch + 1, then flags[ready_base + rank] = the epoch tagged with the call key (ccl::detail::tagged_epoch) on
// every peer (release, system scope).
void launch_fused_begin(const FusedSync& s, int ready_base, cudaStream_t stream);
// Waits (acquire, system scope, bounded) until flags[first + i * stride] reaches the epoch for every i in
// [0, count) except i == skip. One small block. kReady: the ready flags of ranks i (first 0, stride 1), whose
// tags must be this call's: one that differs records kDeviceErrorCallTagMismatch naming rank i (a peer's call
// differs from this rank's) once every ready flag has reached the epoch, and the call's later kernels return
// at once, as after a timeout (the stop word: ccl_common.cuh, workspace_stopped); its copy-engine copies run.
void launch_fused_wait(const FusedSync& s, int first, int count, int stride, int skip, FusedWait what,
                       cudaStream_t stream);
// flags[index] = epoch on rank `to`, or on every peer when to < 0 (release, system scope), after
// everything earlier on the stream; nothing when the workspace has stopped (a wait of this call gave up, say).
void launch_fused_signal(const FusedSync& s, int index, int to, cudaStream_t stream);

// rows x row_bytes bytes from src (pitch in bytes) to dst; either side may be a peer's translated
// heap address. `blocks` blocks of 512 threads. `stop`, when set, is the workspace's stop word
// (DeviceContext::call_words[2]): the copy writes nothing when it is non-zero (a wait of this call or of an
// earlier one on the workspace gave up), as the call's other kernels after its first.
struct Copy2D {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int64_t src_pitch = 0;
  int64_t dst_pitch = 0;
  const uint64_t* stop = nullptr;
};
void launch_copy_2d(const Copy2D& c, int blocks, cudaStream_t stream);

// out (rows x cols, row stride out_stride elements) = sum over s = 0..world-1, in that order, of the
// contiguous rows x cols block at slots + s * slot_elems; float accumulation for 16-bit types.
struct ReduceSlots {
  const void* slots = nullptr;
  int64_t slot_elems = 0;
  int world = 1;
  int64_t rows = 0;
  int64_t cols = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
};
void launch_reduce_slots(const ReduceSlots& r, DType dtype, int blocks, cudaStream_t stream);

// matmul_all_reduce atomic and spinlock: the reduction by output tile. Tile t (row-major over the
// ceil(rows / block_m) x ceil(cols / block_n) grid of C) is owned by rank t % W and kept, on the owner,
// at local index l = t / W of two tile-local arrays (block_n elements per row): `acc` (float32) and
// `res` (C's type). Each rank's GEMM leaves its partial product in its own C; then
//   push    for each tile of [tile_begin, tile_end) it does not own: atomic waits for the owner's
//           flags[zeroed(o)] = epoch (the owner zeroes its acc once every peer is ready for the call, then
//           sets that word on every peer), then adds it into the owner's acc with 16-byte float
//           reductions; spinlock
//           takes the owner's lock word, overwrites acc (the call's first writer, told by
//           flags[mark(t)] < epoch) or adds into it with plain accesses, then unlocks. Either way it
//           then sets flags[arrive(t, rank)] = epoch on the owner (release, system scope).
//   finish  the owner waits for the W - 1 arrivals of each tile it owns, writes own partial + acc (in
//           float32, rounded once) into C and res, and sets flags[done(t)] = epoch on every peer; then
//           every rank copies each tile it does not own from its owner's res once done. Every rank
//           thus holds the owner's bits: results agree bitwise across ranks. With W > 2 the order in
//           which peers' partials reach acc varies from call to call (not bitwise reproducible over
//           calls); with W = 2 there is one peer and the sum is exact-commutative.
// Flags (64-bit, epoch-valued): [0, W) ready, arrive(t, s) = W + t * W + s, done(t) = W + W * T + t,
// mark(t) = W + W * T + T + t (spinlock), zeroed(o) = W + W * T + T + o (atomic; set by the host pipeline's
// signal after its zeroing). Locks: one 32-bit word per tile (0 = free).
struct TileReduce {
  DeviceContext ctx;
  uint64_t* state = nullptr;  // the epoch word
  uint64_t* flags = nullptr;
  uint32_t* locks = nullptr;
  void* c = nullptr;  // this rank's C: its partial product, then the result
  int64_t c_stride = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int block_m = 0;
  int block_n = 0;
  int64_t tiles = 0;       // T
  int64_t tile_begin = 0;  // push: the tiles of this launch
  int64_t tile_end = 0;
  float* acc = nullptr;  // this rank's (heap)
  void* res = nullptr;   // this rank's (heap)
  bool spinlock = false;
};
void launch_tile_push(const TileReduce& r, DType dtype, int blocks, cudaStream_t stream);
void launch_tile_finish(const TileReduce& r, DType dtype, int blocks, cudaStream_t stream);

}  // namespace iris::ops::detail
