// Configuration of the collectives. Field names follow Iris's iris.ccl.Config so users can carry
// their settings over; validate(world_size) rejects bad values with a message naming the field.
#pragma once

#include <cstdint>
#include <string>

#include "iris/core/tensor.hpp"

namespace iris::ccl {

enum class AllReduceVariant : uint8_t { kAuto = 0, kAtomic, kSpinlock, kOneShot, kTwoShot, kRing };
// The reduction of all_reduce and reduce_scatter, of every DType. 16-bit and 8-bit floats combine in float
// (float8 rounds once, saturating), the other types in their own type (int8 and uint8 in 32 bits, which
// wrap to the same bytes); every rank gets the same
// bits (collectives.hpp says in which order each variant combines). Integer sums and products wrap in
// the element type, like NCCL's. kAvg is the sum divided by the world size once, at the end (float types:
// one IEEE division of the accumulated sum, then the rounding to the element type; integer types: the
// sum, wrapped in the element type, divided with truncation toward zero, as NCCL's ncclAvg does), the
// way PyTorch's ReduceOp.AVG and NCCL's ncclAvg are used for gradients. kProd is NCCL's ncclProd
// (PyTorch's ReduceOp.PRODUCT); every variant but atomic takes it. The values are iris's own, not NCCL's.
enum class ReduceOp : uint8_t { kSum = 0, kMax, kMin, kAvg, kProd };
// How all_reduce one_shot moves data. kLL: every 8-byte word carries 4 data bytes and the call's
// epoch, so no flag and no fence, at twice the traffic. kSimple: 16-byte stores of data, then one
// flag per segment released at system scope. kAuto picks by size (resolve_one_shot_protocol).
enum class OneShotProtocol : uint8_t { kAuto = 0, kLL, kSimple };

const char* variant_name(AllReduceVariant v);
const char* reduce_op_name(ReduceOp op);
// "sum", "max", "min", "avg", "prod" (throws InvalidArgument otherwise).
ReduceOp parse_reduce_op(const std::string& name);
// Whether `op` is one of the enumerators above (a value cast from an integer may not be).
bool valid_reduce_op(ReduceOp op);
// "auto", "atomic", "spinlock", "one_shot", "two_shot", "ring" (throws InvalidArgument otherwise).
AllReduceVariant parse_all_reduce_variant(const std::string& name);
const char* protocol_name(OneShotProtocol p);
// "auto", "ll", "simple" (throws InvalidArgument otherwise).
OneShotProtocol parse_one_shot_protocol(const std::string& name);

struct Config {
  // Tile of the 2-D tensor that one block handles at a time; edges (sizes that are not multiples)
  // are handled. Locks and flags are sized by the resulting tile count. all_reduce's tile variants
  // (atomic, spinlock, ring) tile a tensor of fewer rows than block_size_m (a 1-D buffer is one row)
  // in tiles of all its rows and block_size_n x floor(block_size_m / rows) columns, about as many
  // elements as a block, not in tiles of a few rows. block_size_n is a power of two unless
  // all_reduce_ring_slice_n is set (the ring's slices default to it).
  int block_size_m = 32;
  int block_size_n = 64;
  // Tiles grouped together along M in the tile order (better locality for peers' reads); 1 to 65535.
  int swizzle_size = 4;
  // Blocks (SMs) the communication kernel uses; 0 = chosen by size and variant, at most one per SM. A call
  // refuses more than the device's SMs: its blocks wait for peers' blocks, so all must be resident.
  int comm_sms = 0;
  AllReduceVariant all_reduce_variant = AllReduceVariant::kAuto;
  // two_shot: 0 = tiles striped over ranks (tile t reduced by rank t % W), 1 = contiguous ranges.
  int all_reduce_distribution = 0;
  // ring: number of concurrent rings (each takes a share of the blocks and of the columns).
  int all_reduce_num_rings = 1;
  // ring: columns per pipelined slice of a tile; 0 = block_size_n. A power of two dividing block_size_n.
  int all_reduce_ring_slice_n = 0;
  // one_shot: the protocol (OneShotProtocol above); auto = LL for small tensors, simple above.
  OneShotProtocol all_reduce_one_shot_protocol = OneShotProtocol::kAuto;

  // Throws InvalidArgument naming the field, its value and what is allowed.
  void validate(int world_size) const;
  int ring_slice_n() const { return all_reduce_ring_slice_n > 0 ? all_reduce_ring_slice_n : block_size_n; }
};

}  // namespace iris::ccl
