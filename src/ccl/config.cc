#include "iris/ccl/config.hpp"

#include "iris/core/error.hpp"

namespace iris::ccl {

const char* variant_name(AllReduceVariant v) {
  switch (v) {
    case AllReduceVariant::kAuto: return "auto";
    case AllReduceVariant::kAtomic: return "atomic";
    case AllReduceVariant::kSpinlock: return "spinlock";
    case AllReduceVariant::kOneShot: return "one_shot";
    case AllReduceVariant::kTwoShot: return "two_shot";
    case AllReduceVariant::kRing: return "ring";
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kProd:
      return "prod";
  }
  return "unknown";
}

bool valid_reduce_op(ReduceOp op) { return static_cast<int>(op) <= static_cast<int>(ReduceOp::kProd); }

ReduceOp parse_reduce_op(const std::string& name) {
  for (auto op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg, ReduceOp::kProd})
    if (name == reduce_op_name(op)) return op;
  throw InvalidArgument("reduce op must be one of: 'sum', 'max', 'min', 'avg', 'prod', got '" + name + "'");
}

AllReduceVariant parse_all_reduce_variant(const std::string& name) {
  for (auto v : {AllReduceVariant::kAuto, AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock,
                 AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot, AllReduceVariant::kRing})
    if (name == variant_name(v)) return v;
  throw InvalidArgument("all_reduce_variant must be one of: 'auto', 'atomic', 'spinlock', 'one_shot', 'two_shot', "
                        "'ring', got '" + name + "'");
}

const char* protocol_name(OneShotProtocol p) {
  switch (p) {
    case OneShotProtocol::kAuto:
      return "auto";
    case OneShotProtocol::kLL:
      return "ll";
    case OneShotProtocol::kSimple:
      return "simple";
  }
  return "unknown";
}

OneShotProtocol parse_one_shot_protocol(const std::string& name) {
  for (auto p : {OneShotProtocol::kAuto, OneShotProtocol::kLL, OneShotProtocol::kSimple})
    if (name == protocol_name(p)) return p;
  throw InvalidArgument("all_reduce_one_shot_protocol must be one of: 'auto', 'll', 'simple', got '" + name + "'");
}

void Config::validate(int world_size) const {
  auto positive = [](const char* field, int v) {
    IRIS_CHECK_ARG(v > 0, field, " must be positive, got ", v);
  };
  IRIS_CHECK_ARG(world_size >= 1, "world_size must be at least 1, got ", world_size);
  positive("block_size_m", block_size_m);
  positive("block_size_n", block_size_n);
  positive("swizzle_size", swizzle_size);
  IRIS_CHECK_ARG(comm_sms >= 0, "comm_sms must be 0 (automatic) or positive, got ", comm_sms);
  IRIS_CHECK_ARG(block_size_m <= 4096 && block_size_n <= 65536 &&
                     static_cast<int64_t>(block_size_m) * block_size_n <= (int64_t{1} << 22),
                 "block_size_m x block_size_n must be at most 4096 x 65536 and 4Mi elements, got ", block_size_m,
                 " x ", block_size_n);
  IRIS_CHECK_ARG(comm_sms <= 65535, "comm_sms must be at most 65535, got ", comm_sms);
  // A group of swizzle_size tile rows is swizzle_size x the tiles of a row: kept far from int64's range.
  IRIS_CHECK_ARG(swizzle_size <= 65535, "swizzle_size must be at most 65535, got ", swizzle_size);
  IRIS_CHECK_ARG(static_cast<int>(all_reduce_variant) <= static_cast<int>(AllReduceVariant::kRing),
                 "all_reduce_variant has an unknown value ", static_cast<int>(all_reduce_variant));
  IRIS_CHECK_ARG(static_cast<int>(all_reduce_one_shot_protocol) <= static_cast<int>(OneShotProtocol::kSimple),
                 "all_reduce_one_shot_protocol has an unknown value ", static_cast<int>(all_reduce_one_shot_protocol));
  IRIS_CHECK_ARG(all_reduce_distribution == 0 || all_reduce_distribution == 1,
                 "all_reduce_distribution must be 0 (striding) or 1 (block), got ", all_reduce_distribution);
  positive("all_reduce_num_rings", all_reduce_num_rings);
  IRIS_CHECK_ARG(all_reduce_ring_slice_n >= 0, "all_reduce_ring_slice_n must be 0 (= block_size_n) or positive, got ",
                 all_reduce_ring_slice_n);
  int slice = ring_slice_n();
  // The slice defaults to block_size_n, so a block_size_n that is no power of two is refused by its own name.
  IRIS_CHECK_ARG(all_reduce_ring_slice_n > 0 || (slice & (slice - 1)) == 0,
                 "block_size_n must be a power of two (all_reduce_ring_slice_n, 0, takes it), got ", slice);
  IRIS_CHECK_ARG((slice & (slice - 1)) == 0, "all_reduce_ring_slice_n must be a power of two, got ", slice);
  IRIS_CHECK_ARG(block_size_n % slice == 0, "all_reduce_ring_slice_n must divide block_size_n (block_size_n=",
                 block_size_n, ", slice=", slice, ")");
}

}  // namespace iris::ccl
