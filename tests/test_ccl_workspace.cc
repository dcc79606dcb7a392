// Host tests of collective configs and workspaces: tile math, capacity checks and their exact
// messages, matches(), preamble semantics, ranks that disagree, and sizing ahead (the *_needs
// functions, heap_bytes). No GPU: the workspace runs on a fake heap in host memory and a thread
// bootstrap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "iris/ccl/collectives.hpp"
#include "iris/ccl/config.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/runtime/bootstrap.hpp"
#include "support/error_text.hpp"
#include "support/fake_workspace_host.hpp"

namespace iris::ccl {
namespace {

// Host memory standing in for the symmetric heap (shared with the ops' host tests).
using FakeHost = test::FakeWorkspaceHost;

OpSignature spinlock_sig(int64_t m, int64_t n, int bm, int bn) {
  OpSignature s;
  s.op = OpKind::kAllReduce;
  s.rows = m;
  s.cols = n;
  s.dtype = DType::kFloat32;
  s.world_size = 1;
  s.variant = AllReduceVariant::kSpinlock;
  s.block_size_m = bm;
  s.block_size_n = bn;
  return s;
}

WorkspaceNeeds lock_needs(int64_t m, int64_t n, int bm, int bn) {
  WorkspaceNeeds w;
  w.locks = static_cast<size_t>(tile_count(m, n, bm, bn));
  return w;
}

TEST(CclTiles, CountsCeilTilesIncludingEdges) {
  EXPECT_EQ(tile_count(512, 512, 128, 128), 16);
  EXPECT_EQ(tile_count(512, 512, 64, 64), 64);
  EXPECT_EQ(tile_count(128, 64, 32, 64), 4);
  EXPECT_EQ(tile_count(256, 128, 32, 16), 64);
  EXPECT_EQ(tile_count(1000, 333, 32, 64), 32 * 6);
  EXPECT_EQ(tile_count(1, 1, 32, 64), 1);
  EXPECT_EQ(tile_count(1, 7, 32, 64), 1);
  EXPECT_EQ(tile_count(0, 7, 32, 64), 0);
  EXPECT_EQ(tile_count(8192, 8192, 32, 64), 256 * 128);
  // Rounded up without overflow at the top of the range (rows + block_m - 1 wrapped there).
  EXPECT_EQ(tile_count(INT64_MAX, 1, 32, 64), INT64_MAX / 32 + 1);
  EXPECT_THROW(tile_count(1, 1, 0, 64), std::invalid_argument);
}

TEST(CclCapacity, ExactMessages) {
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { check_lock_capacity(16, 64); }),
      std::string("Lock array too small: have 16 but need 64. Pre-allocate workspace with the smallest block sizes you "
                  "intend to use."));
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { check_flag_capacity(16, 64); }),
      std::string("Flags array too small: have 16 but need 64. Pre-allocate workspace with the smallest block sizes "
                  "you intend to use."));
  EXPECT_NO_THROW(check_lock_capacity(64, 64));
  EXPECT_NO_THROW(check_flag_capacity(65, 64));
  // All four are WorkspaceTooSmall (an InvalidArgument): callers can tell "run the preamble" apart from
  // bad arguments.
  EXPECT_THROW(check_lock_capacity(16, 64), WorkspaceTooSmall);
  EXPECT_THROW(check_flag_capacity(16, 64), WorkspaceTooSmall);
  // The lock and flag refusals are also SyncArrayTooSmall, which a fused op passes on with its fixed text; the
  // staging and block-state refusals are not (a fused op names them after itself).
  EXPECT_THROW(check_lock_capacity(16, 64), SyncArrayTooSmall);
  EXPECT_THROW(check_flag_capacity(16, 64), SyncArrayTooSmall);
  const auto refusal_type = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const SyncArrayTooSmall&) {
      return "SyncArrayTooSmall";
    } catch (const WorkspaceTooSmall&) {
      return "WorkspaceTooSmall";
    }
    return "none";
  };
  EXPECT_EQ(refusal_type([&] { check_staging_capacity(256, 512); }), "WorkspaceTooSmall");
  EXPECT_EQ(refusal_type([&] { check_block_state_capacity(2, 4); }), "WorkspaceTooSmall");
  EXPECT_EQ(test::error_text<WorkspaceTooSmall>([&] { check_staging_capacity(256, 512); }),
            "Staging buffer too small: have 256 bytes but need 512. Pre-allocate workspace with the largest tensor and "
            "block sizes you intend to use, or reserve it for all of your calls first (iris::ccl::reserve_workspace).");
  EXPECT_EQ(test::error_text<WorkspaceTooSmall>([&] { check_block_state_capacity(2, 4); }),
            "Block state array too small: have 2 but need 4. It holds a word per rank: this workspace was prepared "
            "for fewer ranks; prepare a new one with this context.");
}

TEST(CclConfig, DefaultsAreValidAndBadFieldsAreNamed) {
  Config c;
  EXPECT_NO_THROW(c.validate(1));
  EXPECT_NO_THROW(c.validate(8));
  auto expect_msg = [](Config cfg, int world, const std::string& msg) {
    EXPECT_EQ(test::error_text<std::invalid_argument>([&] { cfg.validate(world); }), msg);
  };
  Config bad = c;
  bad.block_size_m = 0;
  expect_msg(bad, 2, "block_size_m must be positive, got 0");
  bad = c;
  bad.block_size_n = -4;
  expect_msg(bad, 2, "block_size_n must be positive, got -4");
  bad = c;
  bad.swizzle_size = 0;
  expect_msg(bad, 2, "swizzle_size must be positive, got 0");
  bad = c;
  bad.comm_sms = -1;
  expect_msg(bad, 2, "comm_sms must be 0 (automatic) or positive, got -1");
  bad = c;
  bad.all_reduce_distribution = 2;
  expect_msg(bad, 2, "all_reduce_distribution must be 0 (striding) or 1 (block), got 2");
  bad = c;
  bad.all_reduce_num_rings = 0;
  expect_msg(bad, 2, "all_reduce_num_rings must be positive, got 0");
  bad = c;
  bad.all_reduce_ring_slice_n = 48;
  expect_msg(bad, 2, "all_reduce_ring_slice_n must be a power of two, got 48");
  bad = c;
  bad.block_size_n = 48;  // the slice's default: refused naming the field that was set
  expect_msg(bad, 2, "block_size_n must be a power of two (all_reduce_ring_slice_n, 0, takes it), got 48");
  bad = c;
  bad.all_reduce_ring_slice_n = 128;
  expect_msg(bad, 2, "all_reduce_ring_slice_n must divide block_size_n (block_size_n=64, slice=128)");
  expect_msg(c, 0, "world_size must be at least 1, got 0");
  bad = c;
  bad.block_size_m = 8192;
  expect_msg(bad, 2, "block_size_m x block_size_n must be at most 4096 x 65536 and 4Mi elements, got 8192 x 64");
  bad = c;
  bad.block_size_m = 4096;
  bad.block_size_n = 2048;  // each within its bound, 8Mi elements together
  expect_msg(bad, 2, "block_size_m x block_size_n must be at most 4096 x 65536 and 4Mi elements, got 4096 x 2048");
  bad = c;
  bad.comm_sms = 65536;
  expect_msg(bad, 2, "comm_sms must be at most 65535, got 65536");
  bad = c;
  bad.swizzle_size = 65536;
  expect_msg(bad, 2, "swizzle_size must be at most 65535, got 65536");
  bad = c;
  bad.all_reduce_variant = static_cast<AllReduceVariant>(42);
  expect_msg(bad, 2, "all_reduce_variant has an unknown value 42");
  EXPECT_EQ(parse_all_reduce_variant("two_shot"), AllReduceVariant::kTwoShot);
  EXPECT_THROW(parse_all_reduce_variant("three_shot"), std::invalid_argument);
  bad = c;
  bad.all_reduce_one_shot_protocol = static_cast<OneShotProtocol>(7);
  expect_msg(bad, 2, "all_reduce_one_shot_protocol has an unknown value 7");
  EXPECT_EQ(parse_one_shot_protocol("simple"), OneShotProtocol::kSimple);
  EXPECT_EQ(parse_one_shot_protocol("ll"), OneShotProtocol::kLL);
  EXPECT_EQ(test::error_text<std::invalid_argument>([] { parse_one_shot_protocol("ll128"); }),
            "all_reduce_one_shot_protocol must be one of: 'auto', 'll', 'simple', got 'll128'");
}

TEST(CclConfig, ReduceOpsByName) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg, ReduceOp::kProd}) {
    EXPECT_TRUE(valid_reduce_op(op));
    EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op);
  }
  EXPECT_STREQ(reduce_op_name(ReduceOp::kAvg), "avg");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kProd), "prod");
  EXPECT_FALSE(valid_reduce_op(static_cast<ReduceOp>(5)));
  EXPECT_EQ(test::error_text<std::invalid_argument>([] { parse_reduce_op("mean"); }),
            "reduce op must be one of: 'sum', 'max', 'min', 'avg', 'prod', got 'mean'");
}

TEST(CclWorkspace, MatchesComparesEveryFieldIncludingBlockSizes) {
  FakeHost host;
  Workspace ws;
  auto sig = spinlock_sig(512, 512, 128, 128);
  EXPECT_FALSE(ws.matches(sig)) << "an unprepared workspace matches nothing";
  ws.prepare(host, sig, lock_needs(512, 512, 128, 128));
  EXPECT_TRUE(ws.matches(sig));
  auto other = sig;
  other.block_size_m = 64;
  EXPECT_FALSE(ws.matches(other)) << "block_size_m alone differs";
  other = sig;
  other.block_size_n = 64;
  EXPECT_FALSE(ws.matches(other)) << "block_size_n alone differs";
  other = sig;
  other.rows = 256;
  EXPECT_FALSE(ws.matches(other));
  other = sig;
  other.dtype = DType::kBFloat16;
  EXPECT_FALSE(ws.matches(other));
  other = sig;
  other.world_size = 2;
  EXPECT_FALSE(ws.matches(other));
  other = sig;
  other.variant = AllReduceVariant::kRing;
  EXPECT_FALSE(ws.matches(other));
  other = sig;
  other.protocol = OneShotProtocol::kSimple;
  EXPECT_FALSE(ws.matches(other)) << "the one_shot protocol alone differs";
  other = sig;
  other.op = OpKind::kReduceScatter;
  EXPECT_FALSE(ws.matches(other));
  other = sig;
  other.reduce_op = ReduceOp::kAvg;
  EXPECT_FALSE(ws.matches(other)) << "the reduce op alone differs";
  // The config's choices that the ranks' kernels share (OpSignature says which calls carry them).
  for (int field = 0; field < 6; ++field) {
    other = sig;
    int* value[] = {&other.swizzle, &other.distribution, &other.rings,
                    &other.slice_n, &other.grid,         &other.min_band_tiles};
    *value[field] += 1;
    EXPECT_FALSE(ws.matches(other)) << "field " << field << " alone differs";
  }
  ws.release(host);
  EXPECT_EQ(host.live, 0);
}

// OpSignature::key, which a collective's kernels store in the workspace's call words and a wait that gives up
// compares with its peers': equal for equal signatures (a copy), different when any one field differs.
TEST(OpSignatureKey, EqualSignaturesShareAKeyAndEachFieldChangesIt) {
  OpSignature sig = spinlock_sig(512, 384, 64, 32);
  sig.world_size = 2;
  const OpSignature copy = sig;
  EXPECT_EQ(copy.key(), sig.key());
  std::vector<OpSignature> variants;
  auto with = [&](auto change) {
    OpSignature o = sig;
    change(o);
    ASSERT_FALSE(o == sig);
    variants.push_back(o);
  };
  with([](OpSignature& o) { o.op = OpKind::kAllGather; });
  with([](OpSignature& o) { o.rows += 1; });
  with([](OpSignature& o) { o.cols += 1; });
  with([](OpSignature& o) { o.dtype = DType::kBFloat16; });
  with([](OpSignature& o) { o.world_size = 4; });
  with([](OpSignature& o) { o.variant = AllReduceVariant::kRing; });
  with([](OpSignature& o) { o.protocol = OneShotProtocol::kLL; });
  with([](OpSignature& o) { o.block_size_m = 128; });
  with([](OpSignature& o) { o.block_size_n = 128; });
  with([](OpSignature& o) { o.root = 1; });
  with([](OpSignature& o) { o.reduce_op = ReduceOp::kMax; });
  with([](OpSignature& o) { o.depth = 7; });
  with([](OpSignature& o) { o.bias = true; });
  with([](OpSignature& o) { o.symmetric_output = true; });
  with([](OpSignature& o) { o.output_offset = 4096; });
  with([](OpSignature& o) { o.ll_max_bytes = 4096; });
  with([](OpSignature& o) { o.swizzle = 4; });
  with([](OpSignature& o) { o.distribution = 1; });
  with([](OpSignature& o) { o.rings = 2; });
  with([](OpSignature& o) { o.slice_n = 64; });
  with([](OpSignature& o) { o.grid = 132; });
  with([](OpSignature& o) { o.min_band_tiles = 3; });
  with([](OpSignature& o) { o.operand_dtypes = 256 * 2 + 0; });
  // Swapped values of two fields of one type hash apart too.
  with([](OpSignature& o) { std::swap(o.rows, o.cols); });
  std::vector<uint64_t> keys{sig.key()};
  for (const OpSignature& o : variants) keys.push_back(o.key());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "two of the signatures share a key";
}

// The founding bug on the host side: a workspace prepared with 128x128 blocks (16 tiles of a
// 512x512 tensor) cannot serve 64x64 blocks (64 tiles), neither in the preamble nor at launch.
TEST(CclWorkspace, TooSmallLockArrayIsRejectedByPreambleAndLaunchCheck) {
  FakeHost host;
  Workspace ws;
  ws.prepare(host, spinlock_sig(512, 512, 128, 128), lock_needs(512, 512, 128, 128));
  EXPECT_EQ(ws.lock_capacity(), 16u);
  for (size_t i = 0; i < ws.lock_capacity(); ++i) ASSERT_EQ(ws.locks()[i], 0u) << "locks must start zeroed";
  const char* msg =
      "Lock array too small: have 16 but need 64. Pre-allocate workspace with the smallest block sizes you intend "
      "to use.";
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ws.check_capacity(lock_needs(512, 512, 64, 64)); }),
            std::string(msg));
  EXPECT_EQ(test::error_text<std::invalid_argument>(
                [&] { ws.prepare(host, spinlock_sig(512, 512, 64, 64), lock_needs(512, 512, 64, 64)); }),
            std::string(msg));
  EXPECT_EQ(host.allocs, 1) << "a rejected preamble allocates nothing";
  ws.release(host);
}

TEST(CclWorkspace, LargerArraysAreKeptWithoutReallocation) {
  FakeHost host;
  Workspace ws;
  ws.prepare(host, spinlock_sig(512, 512, 64, 64), lock_needs(512, 512, 64, 64));
  uint32_t* locks = ws.locks();
  ws.prepare(host, spinlock_sig(512, 512, 128, 128), lock_needs(512, 512, 128, 128));
  EXPECT_EQ(ws.locks(), locks);
  EXPECT_EQ(ws.lock_capacity(), 64u);
  EXPECT_TRUE(ws.matches(spinlock_sig(512, 512, 128, 128)));
  EXPECT_FALSE(ws.matches(spinlock_sig(512, 512, 64, 64)));
  EXPECT_NO_THROW(ws.check_capacity(lock_needs(512, 512, 64, 64)));
  // Arrays another variant needs are added, the existing ones kept.
  WorkspaceNeeds ring;
  ring.flags = 64 * 2;
  ring.block_state = 132;
  auto ring_sig = spinlock_sig(512, 512, 64, 64);
  ring_sig.variant = AllReduceVariant::kRing;
  ws.prepare(host, ring_sig, ring);
  EXPECT_EQ(ws.locks(), locks);
  EXPECT_EQ(ws.flag_capacity(), 128u);
  EXPECT_EQ(ws.block_state_capacity(), 132u);
  EXPECT_EQ(ws.capacity(), (WorkspaceNeeds{64, 128, 0, 132})) << ws.capacity().describe();
  EXPECT_EQ(host.allocs, 3);
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] {
        WorkspaceNeeds more = ring;
        more.flags = 129;
        ws.check_capacity(more);
      }),
      std::string("Flags array too small: have 128 but need 129. Pre-allocate workspace with the smallest block sizes "
                  "you intend to use."));
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] {
              WorkspaceNeeds more = ring;
              more.block_state = 264;
              ws.check_capacity(more);
            }),
            std::string("Block state array too small: have 132 but need 264. It holds a word per rank: this "
                        "workspace was prepared for fewer ranks; prepare a new one with this context."));
  ws.release(host);
  EXPECT_EQ(host.live, 0);
}

// Needs made by hand that no GPU can hold are refused before a count is multiplied by its element size.
// Before 2026-12-05, 2^61 + 1 flags wrapped to an 8-byte array whose recorded capacity (2^61 + 1) then passed
// every preamble's and launch's check: a kernel indexing a million flags wrote past a 256-byte heap block.
TEST(CclWorkspace, NeedsPastWhatAGpuAddressesAreRefused) {
  WorkspaceNeeds huge;
  huge.flags = (size_t{1} << 61) + 1;
  huge.block_state = 6;
  FakeHost host;
  Workspace ws;
  const std::string flags_message =
      ": these needs hold 2305843009213693953 flags, more than a GPU can address (2^48 bytes); size them with the "
      "*_needs functions or the plans.";
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ws.reserve(host, huge); }),
            "reserve_workspace" + flags_message);
  EXPECT_EQ(host.allocs, 0);
  EXPECT_EQ(ws.flag_capacity(), 0u);
  // The same needs passed to prepare by a caller of its own (before the second session of 2026-12-06 only
  // reserve and heap_bytes checked, and prepare allocated the wrapped 8 bytes).
  EXPECT_EQ(test::error_text<std::invalid_argument>(
                [&] { ws.prepare(host, spinlock_sig(512, 512, 128, 128), huge); }),
            "prepare" + flags_message);
  EXPECT_EQ(host.allocs, 0);
  EXPECT_EQ(ws.flag_capacity(), 0u);
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { (void)heap_bytes(huge); }), "heap_bytes" + flags_message);
  // Each array by its own element size: 2^46 locks of 4 bytes fit, one more does not; staging by the byte.
  WorkspaceNeeds edge;
  edge.locks = size_t{1} << 46;
  edge.staging_bytes = size_t{1} << 48;
  EXPECT_EQ(heap_bytes(edge), (size_t{1} << 48) * 2);
  edge.locks += 1;
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { (void)heap_bytes(edge); }),
            "heap_bytes: these needs hold 70368744177665 locks, more than a GPU can address (2^48 bytes); size them "
            "with the *_needs functions or the plans.");
}

// An empty call launches nothing, so it needs nothing staged, flagged or locked, only the block state every call
// of its world needs: before 2026-12-07 the exchanges, broadcast and all_reduce planned it as an LL call of 256
// staging bytes, which its preamble allocated and so fixed the workspace's staging, refusing every later call
// with "Staging buffer too small".
TEST(CclWorkspace, EmptyCallsNeedNothingButTheBlockState) {
  const Tensor empty = Tensor::matrix(nullptr, DType::kBFloat16, 0, 4096);
  const Tensor row = Tensor::matrix(nullptr, DType::kBFloat16, 1, 4096);
  const Tensor rows = Tensor::matrix(nullptr, DType::kBFloat16, 2, 4096);
  const Config config;
  const WorkspaceNeeds one = all_gather_needs(rows, row, config, 2);
  EXPECT_GT(one.staging_bytes, 0u) << "a call with elements stages";
  auto expect_empty = [&](const WorkspaceNeeds& n, const char* what) {
    EXPECT_EQ(n.staging_bytes, 0u) << what;
    EXPECT_EQ(n.flags, 0u) << what;
    EXPECT_EQ(n.locks, 0u) << what;
    EXPECT_EQ(n.block_state, one.block_state) << what;
  };
  expect_empty(all_gather_needs(empty, empty, config, 2), "all_gather");
  expect_empty(reduce_scatter_needs(empty, empty, config, 2), "reduce_scatter");
  expect_empty(all_to_all_needs(empty, empty, config, 2), "all_to_all");
  expect_empty(broadcast_needs(empty, empty, 0, config, 2), "broadcast");
  for (AllReduceVariant v : {AllReduceVariant::kAuto, AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot,
                             AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock, AllReduceVariant::kRing}) {
    Config c;
    c.all_reduce_variant = v;
    expect_empty(all_reduce_needs(empty, empty, c, 2), variant_name(v));
  }
}

// One workspace for a set of calls: reserve_workspace gives it what each array's largest need is, and the
// calls' preambles, in any order, then allocate nothing. At 3 ranks a 512 x 512 float32 spinlock
// all_reduce needs 64 locks and 2 x 22 x 64 x 64 x 4 staging bytes with 64x64 blocks, 16 locks and
// 2 x 6 x 128 x 128 x 4 with 128x128: neither call's preamble sizes the workspace for the other.
TEST(CclWorkspace, ReservedForASetOfCallsEachPreambleFitsWithoutAllocating) {
  Config small;
  small.all_reduce_variant = AllReduceVariant::kSpinlock;
  small.block_size_m = small.block_size_n = 64;
  Config big = small;
  big.block_size_m = big.block_size_n = 128;
  const Tensor t = Tensor::matrix(nullptr, DType::kFloat32, 512, 512);
  const WorkspaceNeeds a = all_reduce_needs(t, t, small, 3), b = all_reduce_needs(t, t, big, 3);
  EXPECT_EQ(a.locks, 64u);
  EXPECT_EQ(b.locks, 16u);
  EXPECT_EQ(a.staging_bytes, 720896u);
  EXPECT_EQ(b.staging_bytes, 786432u);
  WorkspaceNeeds most = a;
  most.include(b);
  EXPECT_EQ(most.locks, 64u);
  EXPECT_EQ(most.staging_bytes, 786432u);
  EXPECT_EQ(most.flags, std::max(a.flags, b.flags));
  EXPECT_EQ(most.block_state, std::max(a.block_state, b.block_state));
  EXPECT_EQ(WorkspaceNeeds(b).include(a), most) << "in either order";
  // Prepared by the small call alone, the big call's staging does not fit: the message says what to do.
  {
    FakeHost host;
    Workspace ws;
    auto sig = spinlock_sig(512, 512, 64, 64);
    ws.prepare(host, sig, a);
    sig.block_size_m = sig.block_size_n = 128;
    EXPECT_EQ(test::error_text<WorkspaceTooSmall>([&] { ws.prepare(host, sig, b); }),
              "Staging buffer too small: have 720896 bytes but need 786432. Pre-allocate workspace with the largest "
              "tensor and block sizes you intend to use, or reserve it for all of your calls first "
              "(iris::ccl::reserve_workspace).");
    ws.release(host);
  }
  // Reserved for both: no preamble allocates, whichever comes first; the reservation alone is no preamble.
  for (bool big_first : {false, true}) {
    FakeHost host;
    Workspace ws;
    ws.reserve(host, most);
    EXPECT_EQ(host.allocs, 4) << "locks, flags, staging, block state";
    EXPECT_FALSE(ws.prepared()) << "a call without its preamble is refused";
    EXPECT_EQ(ws.lock_capacity(), 64u);
    EXPECT_EQ(ws.staging_capacity(), 786432u);
    auto sig_small = spinlock_sig(512, 512, 64, 64), sig_big = spinlock_sig(512, 512, 128, 128);
    for (int i = 0; i < 2; ++i) {
      const bool use_big = (i == 0) == big_first;
      ws.prepare(host, use_big ? sig_big : sig_small, use_big ? b : a);
      EXPECT_TRUE(ws.matches(use_big ? sig_big : sig_small));
    }
    EXPECT_EQ(host.allocs, 4) << "the preambles allocated";
    // Reserving again (or after a preamble) is refused: the arrays exist.
    EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ws.reserve(host, most); }),
              "reserve_workspace: this workspace already holds arrays (it was prepared or reserved); reserve a fresh "
              "workspace, or release() this one first.");
    ws.release(host);
    EXPECT_EQ(host.live, 0);
    ws.reserve(host, a);  // released: fresh again
    EXPECT_EQ(ws.lock_capacity(), 64u);
    ws.release(host);
  }
}

// A workspace prepared again for another op starts from zero flags and block state, but for the epoch,
// which keeps running (the old op's LL lines then carry other epochs' tags); prepared again for the same
// op (another shape or variant) it keeps them: that op's kernels order their own layouts (layout_fence).
TEST(CclWorkspace, PreparedForAnotherOpItsFlagsAndStateStartFromZeroButTheEpoch) {
  FakeHost host;
  Workspace ws;
  WorkspaceNeeds needs;
  needs.flags = 128;
  needs.block_state = 7;
  needs.staging_bytes = 4096;
  auto sig = spinlock_sig(512, 512, 64, 64);
  sig.variant = AllReduceVariant::kRing;
  ws.prepare(host, sig, needs);
  auto scribble = [&] {
    for (size_t i = 0; i < ws.flag_capacity(); ++i) ws.flags()[i] = 1000 + i;
    for (size_t i = 0; i < ws.block_state_capacity(); ++i) ws.block_state()[i] = 50 + i;
  };
  scribble();
  ws.count_call();
  auto two_shot = spinlock_sig(256, 512, 64, 64);
  two_shot.variant = AllReduceVariant::kTwoShot;
  ws.prepare(host, two_shot, needs);
  EXPECT_EQ(ws.flags()[127], 1127u) << "same op: the kernels' layout fence orders the change";
  EXPECT_EQ(ws.block_state()[2], 52u);
  OpSignature gather;
  gather.op = OpKind::kAllGather;
  gather.rows = 64;
  gather.cols = 512;
  gather.world_size = 1;
  ws.prepare(host, gather, needs);
  for (size_t i = 0; i < ws.flag_capacity(); ++i) ASSERT_EQ(ws.flags()[i], 0u) << "flag " << i;
  EXPECT_EQ(ws.block_state()[0], 50u) << "the epoch keeps running";
  for (size_t i = 1; i < ws.block_state_capacity(); ++i) EXPECT_EQ(ws.block_state()[i], 0u) << "state word " << i;
  scribble();
  ws.prepare(host, sig, needs);  // and back
  EXPECT_EQ(ws.flags()[5], 0u);
  EXPECT_EQ(ws.block_state()[0], 50u);
  EXPECT_EQ(ws.block_state()[6], 0u);
  ws.release(host);
}

// Runs body(host, rank) on two ranks: threads, each with a fake host over one thread bootstrap.
template <typename Body>
void on_two_ranks(Body body) {
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(10));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FakeHost host(bootstraps[r]);
      body(host, r);
    });
  for (auto& t : threads) t.join();
}

// Two ranks that disagree each run call(host, ws, rank) on a fresh workspace; returns what each raised ("" if
// nothing) and checks that neither allocated anything.
template <typename Call>
std::vector<std::string> raise_on_two_ranks(Call call) {
  std::vector<std::string> errors(2);
  on_two_ranks([&](FakeHost& host, int r) {
    Workspace ws;
    try {
      call(host, ws, r);
    } catch (const std::invalid_argument& e) {
      errors[r] = e.what();
    }
    EXPECT_EQ(host.allocs, 0) << "nothing allocated on a disagreement";
  });
  return errors;
}

// The same for prepare with sig_of(rank) and `needs`.
template <typename SigOf>
std::vector<std::string> prepare_on_two_ranks(SigOf sig_of, const WorkspaceNeeds& needs) {
  return raise_on_two_ranks([&](FakeHost& host, Workspace& ws, int r) { ws.prepare(host, sig_of(r), needs); });
}

// Peers reach a workspace's arrays at this rank's offsets of them: ranks whose heap alloc/free calls so
// far differ (one allocated a buffer the others did not) would place the arrays at other offsets, and a
// peer's writes would land in whatever lies at its offset. The preamble and the reservation compare the
// sequences once the parameters agree, and every rank raises, allocating nothing.
TEST(CclWorkspace, RanksWhoseHeapSequencesDifferAllRaiseBeforeAllocating) {
  for (bool reserve : {false, true}) {
    const auto errors = raise_on_two_ranks([&](FakeHost& host, Workspace& ws, int r) {
      host.heap_calls = r == 0 ? 4 : 5;
      host.heap_hash = r == 0 ? 17 : 23;
      auto sig = spinlock_sig(512, 512, 64, 64);
      sig.world_size = 2;
      if (reserve)
        ws.reserve(host, lock_needs(512, 512, 64, 64));
      else
        ws.prepare(host, sig, lock_needs(512, 512, 64, 64));
    });
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(errors[r],
                "Heap allocation sequence differs across ranks before this preamble: rank 0 made 4 (hash 17), rank 1 "
                "made 5 (hash 23) alloc/free calls. Every rank must allocate and free the same sizes in the same "
                "order, or the workspace's arrays would lie at other offsets on other ranks.")
          << (reserve ? "reserve" : "prepare") << " on rank " << r;
  }
}

// release() frees only once no kernel of any rank can reach the arrays: each rank waits for its device,
// then for the others. A rank whose device failed still takes part (its peers do not wait for it), frees,
// and raises the device's error.
TEST(CclWorkspace, ReleaseWaitsForEveryRanksDeviceBeforeFreeing) {
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(10));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FakeHost host(bootstraps[r]);
      Workspace ws;
      auto sig = spinlock_sig(512, 512, 64, 64);
      sig.world_size = 2;
      ws.prepare(host, sig, lock_needs(512, 512, 64, 64));
      EXPECT_EQ(host.device_syncs, 0);
      host.device_failed = r == 1;
      if (r == 1)
        EXPECT_EQ(test::error_text<std::runtime_error>([&] { ws.release(host); }), "fake device: a sticky CUDA error");
      else
        ws.release(host);
      EXPECT_EQ(host.device_syncs, 1) << "rank " << r;
      EXPECT_EQ(host.live, 0) << "rank " << r << ": freed";
      EXPECT_FALSE(ws.prepared());
    });
  for (auto& t : threads) t.join();
}

// A free that throws partway through release() (a heap guard check after a sticky CUDA error) leaves the
// workspace fresh all the same, with its other arrays freed: before 2026-12-06 it kept every pointer, and
// the next release() freed the arrays already freed again (or a preamble zeroed whatever the heap had
// placed there since).
TEST(CclWorkspace, ReleaseEmptiesTheWorkspaceWhenAFreeThrows) {
  FakeHost host;
  Workspace ws;
  WorkspaceNeeds needs = lock_needs(512, 512, 64, 64);
  needs.flags = 64;
  needs.block_state = 14;
  ws.prepare(host, spinlock_sig(512, 512, 64, 64), needs);
  ASSERT_EQ(host.live, 3);
  host.free_fails_at = 1;  // the second array's free
  EXPECT_EQ(test::error_text<std::runtime_error>([&] { ws.release(host); }), "fake device: a free failed");
  EXPECT_FALSE(ws.prepared());
  EXPECT_EQ(ws.any_array(), nullptr);
  EXPECT_EQ(ws.capacity(), WorkspaceNeeds{});
  EXPECT_EQ(host.live, 1) << "the other two arrays are freed; the one whose free threw stays with the heap";
  EXPECT_NO_THROW(ws.release(host)) << "nothing is freed twice";
  EXPECT_EQ(host.live, 1);
}

// A rank whose zeroing or allocation fails in a preamble or a reservation (a sticky CUDA error, a full heap)
// says so in the step's last exchange: it raises its own error, its peer a RemoteError naming it, at once.
// Before 2026-12-05 it left before that exchange, and its peer waited out the bootstrap timeout (300 s by
// default) in a preamble, or went on with arrays the failed rank lacked after a reservation. The failed rank's
// array is recorded before its zeroing, so release() frees it.
TEST(CclWorkspace, ARankWhoseArraysCannotBeMadeRaisesWithItsPeerAtOnce) {
  for (int mode = 0; mode < 3; ++mode) {  // prepare, reserve, reserve whose capture query fails
    SCOPED_TRACE(mode == 0 ? "prepare" : mode == 1 ? "reserve" : "reserve, capture query");
    std::vector<std::string> errors(2);
    const auto start = std::chrono::steady_clock::now();
    on_two_ranks([&](FakeHost& host, int r) {
      Workspace ws;
      auto sig = spinlock_sig(512, 512, 64, 64);
      sig.world_size = 2;
      WorkspaceNeeds needs = lock_needs(512, 512, 64, 64);
      needs.block_state = 14;
      if (r == 1) (mode == 2 ? host.capture_query_fails : host.zero_fails) = true;
      try {
        if (mode == 0)
          ws.prepare(host, sig, needs);
        else
          ws.reserve(host, needs);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      host.zero_fails = false;
      ws.release(host);
      EXPECT_EQ(host.live, 0) << "rank " << r << " lost an array";
    });
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "a rank waited for the other";
    if (mode < 2) {
      EXPECT_EQ(errors[1], "fake device: a memset failed");
      EXPECT_EQ(errors[0], std::string("rank 1 failed ") +
                               (mode == 0 ? "to zero and allocate its workspace arrays"
                                          : "to allocate its reserved workspace arrays") +
                               ": fake device: a memset failed. This workspace holds arrays that rank's may not; "
                               "release() it on every rank.");
    } else {
      EXPECT_EQ(errors[1], "reserve_workspace: fake device: cudaStreamIsCapturing failed");
      EXPECT_EQ(errors[0].rfind("Collective parameters differ across ranks: rank 0 has reserve ", 0), 0u) << errors[0];
      EXPECT_NE(errors[0].find("(its stream's capture state unknown: fake device: cudaStreamIsCapturing failed)"),
                std::string::npos)
          << errors[0];
    }
  }
}

// release() while a peer makes another collective call (the ranks' calls out of step): its exchange reads the
// peer's word, raises and frees nothing, since the peer's kernels may still reach the arrays; the peer hears
// what this rank was doing. Before 2026-12-05 release() read no word and freed them.
TEST(CclWorkspace, ReleaseWhileAPeerMakesAnotherCallFreesNothingAndBothRaise) {
  std::vector<std::string> errors(2);
  on_two_ranks([&](FakeHost& host, int r) {
    Workspace ws;
    WorkspaceNeeds needs = lock_needs(512, 512, 64, 64);
    needs.block_state = 14;
    ws.reserve(host, needs);
    const int live = host.live;
    try {
      if (r == 0) {
        ws.release(host);
      } else {
        const auto words = host.allgather("+");  // an agreed step's word, as barrier()'s
        if (words[0].rfind("!waiting for every device before a workspace's arrays are released or reset", 0) == 0)
          throw std::runtime_error("rank 0 is in another call: " + words[0].substr(1));
      }
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
    EXPECT_EQ(host.live, live) << "rank " << r << " freed an array";
    ws.release(host);  // in step again: both free
    EXPECT_EQ(host.live, 0);
  });
  EXPECT_EQ(errors[0],
            "Collective calls out of step across ranks: rank 0 waited for every device before releasing or resetting a "
            "workspace, but rank 1 made another collective call at this point (a barrier, a preamble, an "
            "allocation...), so no array was freed or reset. Every rank must make the same collective calls in the "
            "same order.");
  EXPECT_EQ(errors[1],
            "rank 0 is in another call: waiting for every device before a workspace's arrays are released or reset (a "
            "collective call)");
}

// Ranks that reserve different needs, or one that reserves a workspace holding arrays, all raise together
// (none allocates, none waits for the others).
TEST(CclWorkspace, RanksThatReserveDifferentlyAllRaiseTogether) {
  WorkspaceNeeds needs;
  needs.locks = 64;
  needs.staging_bytes = 4096;
  const std::string reserve = "reserve 64 locks, 0 flags, 4096 staging bytes, 0 block state words";
  // Rank 1 asks for more staging.
  auto errors = raise_on_two_ranks([&](FakeHost& host, Workspace& ws, int r) {
    WorkspaceNeeds mine = needs;
    if (r == 1) mine.staging_bytes = 8192;
    ws.reserve(host, mine);
  });
  EXPECT_EQ(errors[0], "Collective parameters differ across ranks: rank 0 has " + reserve +
                           " but rank 1 has reserve 64 locks, 0 flags, 8192 staging bytes, 0 block state words. "
                           "Every rank must reserve the same workspace.");
  EXPECT_EQ(errors[1].rfind("Collective parameters differ across ranks: rank 1 has reserve 64 locks, 0 flags, 8192", 0),
            0u)
      << errors[1];
  // Rank 1's workspace already holds an array (prepared on a host of its own).
  errors = raise_on_two_ranks([&](FakeHost& host, Workspace& ws, int r) {
    if (r == 0) return ws.reserve(host, needs);
    FakeHost own;
    Workspace prepared;
    prepared.prepare(own, spinlock_sig(512, 512, 64, 64), lock_needs(512, 512, 64, 64));
    const std::string why = test::error_text<std::invalid_argument>([&] { prepared.reserve(host, needs); });
    prepared.release(own);
    throw std::invalid_argument(why);
  });
  EXPECT_EQ(errors[1],
            "reserve_workspace: this workspace already holds arrays (it was prepared or reserved); reserve a fresh "
            "workspace, or release() this one first.");
  EXPECT_EQ(errors[0], "Collective parameters differ across ranks: rank 0 has " + reserve + " but rank 1 has " +
                           reserve + " on a workspace that holds arrays. Every rank must reserve the same workspace.");
  // Rank 1's stream is being captured into a CUDA graph: a reservation allocates, zeroes and synchronizes.
  errors = raise_on_two_ranks([&](FakeHost& host, Workspace& ws, int r) {
    host.capture = r == 1;
    ws.reserve(host, needs);
  });
  EXPECT_EQ(errors[1],
            "reserve_workspace: the context's stream is being captured into a CUDA graph; reserve the workspace "
            "(collective: it allocates, zeroes and synchronizes) before the capture begins, and capture the calls "
            "only.");
  EXPECT_EQ(errors[0], "Collective parameters differ across ranks: rank 0 has " + reserve + " but rank 1 has " +
                           reserve +
                           " while its stream is being captured into a CUDA graph. Every rank must reserve the same "
                           "workspace.");
}

// A device timeout leaves a workspace's flags, epochs and staging out of step between ranks (the kernels
// that gave up did not finish). Preparing it again after a timeout on any one rank starts every rank over:
// each waits for its device's kernels to end, then zeroes every array, the epoch too. Without a timeout
// since, preparing again keeps them (the epochs run on). The signatures are still compared.
TEST(CclWorkspace, PreparingAgainAfterADeviceTimeoutOnAnyRankStartsEveryRankOver) {
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(10));
  WorkspaceNeeds needs;
  needs.locks = 8;
  needs.flags = 16;
  needs.staging_bytes = 512;
  needs.block_state = 6;
  auto sig = spinlock_sig(512, 512, 64, 64);
  sig.world_size = 2;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FakeHost host(bootstraps[r]);
      Workspace ws;
      ws.prepare(host, sig, needs);
      auto scribble = [&] {
        for (size_t i = 0; i < ws.lock_capacity(); ++i) ws.locks()[i] = 1;
        for (size_t i = 0; i < ws.flag_capacity(); ++i) ws.flags()[i] = 1000 + i;
        std::memset(ws.staging(), 0x5A, ws.staging_capacity());
        for (size_t i = 0; i < ws.block_state_capacity(); ++i) ws.block_state()[i] = 50 + i;
      };
      scribble();
      ws.prepare(host, sig, needs);
      EXPECT_EQ(ws.flags()[3], 1003u) << "no timeout: kept";
      EXPECT_EQ(ws.block_state()[0], 50u) << "no timeout: the epoch runs on";
      EXPECT_EQ(host.device_syncs, 0);
      if (r == 0) host.timeouts = 1;  // rank 0 alone raised a TimeoutError
      ws.prepare(host, sig, needs);
      EXPECT_EQ(host.device_syncs, 1) << "rank " << r << " waits for its kernels before zeroing";
      for (size_t i = 0; i < ws.lock_capacity(); ++i) ASSERT_EQ(ws.locks()[i], 0u) << "rank " << r << " lock " << i;
      for (size_t i = 0; i < ws.flag_capacity(); ++i) ASSERT_EQ(ws.flags()[i], 0u) << "rank " << r << " flag " << i;
      for (size_t i = 0; i < ws.staging_capacity(); ++i)
        ASSERT_EQ(static_cast<const unsigned char*>(ws.staging())[i], 0) << "rank " << r << " staging byte " << i;
      for (size_t i = 0; i < ws.block_state_capacity(); ++i)
        ASSERT_EQ(ws.block_state()[i], 0u) << "rank " << r << " state word " << i << " (the epoch too)";
      EXPECT_EQ(ws.device_timeouts_at_prepare(), r == 0 ? 1u : 0u);
      scribble();
      ws.prepare(host, sig, needs);  // the timeout has been accounted for: kept again
      EXPECT_EQ(ws.flags()[3], 1003u);
      EXPECT_EQ(host.device_syncs, 1);
      if (r == 1) host.timeouts = 1;  // a timeout on rank 1 while rank 0 passes another shape: both raise
      auto other = sig;
      other.rows = r == 0 ? 256 : 512;
      const std::string text = test::error_text<std::invalid_argument>([&] { ws.prepare(host, other, needs); });
      EXPECT_NE(text.find("Collective parameters differ across ranks"), std::string::npos) << text;
      EXPECT_EQ(text.find("timed out"), std::string::npos) << "the timeout mark is no part of a signature: " << text;
      ws.release(host);
    });
  for (auto& t : threads) t.join();
}

// The ranks must pass copies of the same workspace: each rank's state (its arrays' capacities and the call it
// was last prepared for) is compared before any decision. A rank that passed another workspace would decide
// capacity alone (raising while its peer allocates and then waits for it), or both ranks would accept
// workspaces whose arrays lie at different offsets, and peers would write into the other workspace.
TEST(CclWorkspace, RanksThatPassWorkspacesInDifferentStatesAllRaiseTogether) {
  auto sig = spinlock_sig(512, 512, 64, 64);
  sig.world_size = 2;
  std::string errors[2], swapped[2];
  int allocs[2] = {-1, -1};
  on_two_ranks([&](FakeHost& host, int r) {
    host.offsets = true;
    Workspace a, b, fresh;
    a.reserve(host, lock_needs(512, 512, 128, 128));  // 16 locks at heap offset 0
    b.reserve(host, lock_needs(512, 512, 128, 128));  // 16 locks at heap offset 256
    host.allocs = 0;
    // Rank 0 prepares a reserved workspace, which is too small; rank 1 a fresh one.
    errors[r] = test::error_text<std::invalid_argument>(
        [&] { (r == 0 ? a : fresh).prepare(host, sig, lock_needs(512, 512, 64, 64)); });
    allocs[r] = host.allocs;
    // Two workspaces alike but for where they lie, and each rank passes another.
    swapped[r] = test::error_text<std::invalid_argument>(
        [&] { (r == 0 ? a : b).prepare(host, sig, lock_needs(512, 512, 128, 128)); });
  });
  const std::string head = "all_reduce: the ranks pass workspaces in different states: ";
  const std::string tail =
      ". Every rank must pass its own copy of the same workspace, prepared, reserved and released alike.";
  EXPECT_EQ(errors[0],
            head + "rank 0's holds 16 locks at heap offset 0, not prepared but rank 1's holds no arrays" + tail);
  EXPECT_EQ(errors[1],
            head + "rank 1's holds no arrays but rank 0's holds 16 locks at heap offset 0, not prepared" + tail);
  EXPECT_EQ(allocs[0], 0);
  EXPECT_EQ(allocs[1], 0) << "rank 1 allocated, then would have waited for rank 0, which had raised";
  EXPECT_EQ(swapped[0], head +
                            "rank 0's holds 16 locks at heap offset 0, not prepared but rank 1's holds 16 locks at "
                            "heap offset 256, not prepared" +
                            tail);
  EXPECT_EQ(swapped[1], head +
                            "rank 1's holds 16 locks at heap offset 256, not prepared but rank 0's holds 16 locks "
                            "at heap offset 0, not prepared" +
                            tail);
}

// A rank whose device fails while every rank waits to reset a workspace after a device error cannot reset
// its arrays: it raises its device's error, and its peers raise too, naming it, instead of resetting theirs
// and then waiting for it until the bootstrap's timeout.
TEST(CclWorkspace, ADeviceThatFailsDuringTheResetAfterATimeoutRaisesOnEveryRank) {
  auto sig = spinlock_sig(512, 512, 64, 64);
  sig.world_size = 2;
  std::string errors[2];
  on_two_ranks([&](FakeHost& host, int r) {
    Workspace ws;
    ws.prepare(host, sig, lock_needs(512, 512, 64, 64));
    ws.locks()[0] = 7;
    if (r == 0) {
      host.timeouts = 1;
      host.device_failed = true;
    }
    try {
      ws.prepare(host, sig, lock_needs(512, 512, 64, 64));
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
    EXPECT_EQ(ws.locks()[0], 7u) << "rank " << r << " reset nothing";
    host.device_failed = false;
    ws.release(host);
  });
  EXPECT_EQ(errors[0], "fake device: a sticky CUDA error");
  EXPECT_EQ(errors[1],
            "all_reduce: rank 0's device failed: fake device: a sticky CUDA error while every rank waited for its "
            "kernels to reset this workspace after a device error, so no rank reset it. A sticky CUDA error ends that "
            "rank's context: restart the job.");
}

// Needs sized for fewer ranks than the context has are refused by the reservation, naming the world size,
// rather than by the first preamble as a workspace "prepared for fewer ranks".
TEST(CclWorkspace, ANeedSizedForFewerRanksIsRefusedByTheReservation) {
  const Tensor t = Tensor::vector(nullptr, DType::kFloat32, 1024);
  const WorkspaceNeeds one_rank = all_reduce_needs(t, t, Config{}, 1);
  const auto errors = raise_on_two_ranks([&](FakeHost& host, Workspace& ws, int) { ws.reserve(host, one_rank); });
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(errors[r],
              "reserve_workspace: these needs hold 11 block state words, fewer than the 14 every op needs on 2 ranks; "
              "size them with this context's world size (2) as the *_needs functions' and plans' world_size.")
        << "rank " << r;
  on_two_ranks([&](FakeHost& host, int) {
    Workspace ws;
    ws.reserve(host, all_reduce_needs(t, t, Config{}, 2));  // sized for the context: reserved
    EXPECT_EQ(ws.block_state_capacity(), 14u);
    ws.release(host);
  });
}

TEST(CclWorkspace, RanksThatDisagreeAllRaiseTogether) {
  const auto errors = prepare_on_two_ranks(
      [](int r) {
        auto sig = spinlock_sig(512, r == 0 ? 512 : 256, 64, 64);  // rank 1 passes another shape
        sig.world_size = 2;
        return sig;
      },
      lock_needs(512, 512, 64, 64));
  EXPECT_EQ(errors[0],
            "Collective parameters differ across ranks: rank 0 has all_reduce 512x512 float32 world 2 variant spinlock "
            "blocks 64x64 op sum but rank 1 has all_reduce 512x256 float32 world 2 variant spinlock blocks 64x64 op "
            "sum. Every rank must call with the same shapes and config.");
  EXPECT_EQ(errors[1],
            "Collective parameters differ across ranks: rank 1 has all_reduce 512x256 float32 world 2 variant spinlock "
            "blocks 64x64 op sum but rank 0 has all_reduce 512x512 float32 world 2 variant spinlock blocks 64x64 op "
            "sum. Every rank must call with the same shapes and config.");
}

// Ranks whose IRIS_LL_MAX_BYTES differ would exchange over one staging with two protocols; the preamble
// names the variable instead.
TEST(CclWorkspace, RanksWithDifferentLLBoundsAllRaiseTogether) {
  const auto errors = prepare_on_two_ranks(
      [](int r) {
        OpSignature sig;
        sig.op = OpKind::kAllGather;
        sig.rows = 16;
        sig.cols = 128;
        sig.dtype = DType::kBFloat16;
        sig.world_size = 2;
        sig.block_size_m = 32;
        sig.block_size_n = 64;
        sig.ll_max_bytes = r == 0 ? 4096 : 8192;
        return sig;
      },
      WorkspaceNeeds{0, 0, 4096, 2});
  EXPECT_EQ(errors[0],
            "Collective parameters differ across ranks: rank 0 has all_gather 16x128 bfloat16 world 2 blocks 32x64 LL "
            "up to 4096 bytes per block (IRIS_LL_MAX_BYTES) but rank 1 has all_gather 16x128 bfloat16 world 2 blocks "
            "32x64 LL up to 8192 bytes per block (IRIS_LL_MAX_BYTES). Every rank must call with the same shapes and "
            "config.");
  EXPECT_NE(errors[1].find("rank 1 has all_gather 16x128 bfloat16 world 2 blocks 32x64 LL up to 8192"),
            std::string::npos)
      << errors[1];
}

// ---- sizing ahead: *_needs and heap_bytes ----------------------------------------------------------

void expect_same_needs(const WorkspaceNeeds& got, const WorkspaceNeeds& want, const std::string& what) {
  EXPECT_EQ(got.locks, want.locks) << what;
  EXPECT_EQ(got.flags, want.flags) << what;
  EXPECT_EQ(got.staging_bytes, want.staging_bytes) << what;
  EXPECT_EQ(got.block_state, want.block_state) << what;
}

// A view of the call's shape with no data: the sizing functions read shapes and types only.
Tensor shape(DType dt, int64_t rows, int64_t cols) { return Tensor::matrix(nullptr, dt, rows, cols); }

Config variant(AllReduceVariant v, int bm = 32, int bn = 64) {
  Config c;
  c.all_reduce_variant = v;
  c.block_size_m = bm;
  c.block_size_n = bn;
  return c;
}

TEST(CclNeeds, HeapBytesRoundsEachArrayToWholeHeapBlocks) {
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{}), 0u);
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{16, 0, 0, 0}), 256u) << "16 locks of 4 bytes: one block";
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{65, 0, 0, 0}), 512u) << "260 bytes: two blocks";
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{0, 33, 0, 0}), 512u) << "33 flags of 8 bytes";
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{0, 0, 1, 0}), 256u);
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{0, 0, 0, 2}), 256u);
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{1, 1, 257, 1}), 256u + 256u + 512u + 256u) << "each array its own blocks";
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{1, 1, 257, 0}, 256), 512u + 512u + 768u) << "heap guards: 256 per array";
  EXPECT_EQ(heap_bytes(WorkspaceNeeds{}, 256), 0u);
}

// The founding numbers, from the arguments alone: 512x512 float32 on 2 ranks needs 16 locks with
// 128x128 blocks and 64 with 64x64 (spinlock); ring's flags grow alike. A workspace sized by the larger
// blocks' needs then refuses the smaller blocks' with the exact messages.
TEST(CclNeeds, FoundingNumbersFromTheArgumentsAlone) {
  const Tensor t = shape(DType::kFloat32, 512, 512);
  const WorkspaceNeeds big = all_reduce_needs(t, t, variant(AllReduceVariant::kSpinlock, 128, 128), 2);
  const WorkspaceNeeds small = all_reduce_needs(t, t, variant(AllReduceVariant::kSpinlock, 64, 64), 2);
  EXPECT_EQ(big.locks, 16u);
  EXPECT_EQ(small.locks, 64u);
  const WorkspaceNeeds ring_big = all_reduce_needs(t, t, variant(AllReduceVariant::kRing, 128, 128), 2);
  const WorkspaceNeeds ring_small = all_reduce_needs(t, t, variant(AllReduceVariant::kRing, 64, 64), 2);
  EXPECT_EQ(ring_big.flags, 32u) << "16 tiles, 2 flags each";
  EXPECT_EQ(ring_small.flags, 128u);
  FakeHost host;
  Workspace ws, ring;
  ws.prepare(host, spinlock_sig(512, 512, 128, 128), big);
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ws.check_capacity(small); }),
            "Lock array too small: have 16 but need 64. Pre-allocate workspace with the smallest block sizes you "
            "intend to use.");
  OpSignature ring_sig = spinlock_sig(512, 512, 128, 128);
  ring_sig.variant = AllReduceVariant::kRing;
  ring.prepare(host, ring_sig, ring_big);
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ring.check_capacity(ring_small); }),
            "Flags array too small: have 32 but need 128. Pre-allocate workspace with the smallest block sizes you "
            "intend to use.");
  ws.release(host);
  ring.release(host);
}

// One rank copies its input: no variant stages anything (before 2026-12-03 two_shot sized 1.5 times the
// tensor and the tile variants their accumulators). Locks and flags keep their sizes, so the founding
// refusals are the same at one rank.
TEST(CclNeeds, OneRankNeedsNoStagingButTheFoundingNumbers) {
  const Tensor t = shape(DType::kFloat32, 512, 512);
  for (auto v : {AllReduceVariant::kAuto, AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot,
                 AllReduceVariant::kRing, AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock}) {
    const WorkspaceNeeds one = all_reduce_needs(t, t, variant(v, 128, 128), 1);
    EXPECT_EQ(one.staging_bytes, 0u) << variant_name(v);
    EXPECT_GT(all_reduce_needs(t, t, variant(v, 128, 128), 2).staging_bytes, 0u) << variant_name(v);
  }
  EXPECT_EQ(all_reduce_needs(t, t, variant(AllReduceVariant::kSpinlock, 128, 128), 1).locks, 16u);
  EXPECT_EQ(all_reduce_needs(t, t, variant(AllReduceVariant::kSpinlock, 64, 64), 1).locks, 64u);
  EXPECT_EQ(all_reduce_needs(t, t, variant(AllReduceVariant::kRing, 128, 128), 1).flags, 32u);
  EXPECT_EQ(all_reduce_needs(t, t, variant(AllReduceVariant::kRing, 64, 64), 1).flags, 128u);
}

// A tensor of fewer rows than block_size_m (a 1-D buffer is one row) tiles in tiles all its rows high and
// block_size_n x floor(block_size_m / rows) wide. With block-sized tiles a 4 MiB bfloat16 buffer took 32768
// tiles of 64 elements: ring asked for 512 MiB of staging (128 times the tensor), atomic and spinlock for
// 192 MiB. Tensors of block_size_m rows or more keep the config's tiles (the founding numbers above).
// Tiles pad a tensor they do not fit (a column vector in tiles 65536 wide): sizes past what a GPU can address
// are refused, never wrapped around to a small staging the kernels would overrun.
TEST(CclNeeds, TileStagingBeyondWhatAGpuAddressesIsRefusedNotWrapped) {
  const Tensor column = shape(DType::kFloat64, int64_t{1} << 45, 1);  // 2^48 bytes: the largest view allowed
  Config wide = variant(AllReduceVariant::kRing);
  wide.block_size_m = 1;
  wide.block_size_n = 65536;
  for (auto v : {AllReduceVariant::kRing, AllReduceVariant::kSpinlock, AllReduceVariant::kAtomic}) {
    wide.all_reduce_variant = v;
    EXPECT_EQ(test::error_text<std::invalid_argument>([&] { all_reduce_needs(column, column, wide, 2); }),
              std::string("all_reduce: ") + variant_name(v) +
                  " would stage more than 2^48 bytes, more than a GPU can address, for a 35184372088832x1 float64 "
                  "tensor in 1x65536 tiles; pick block sizes that fit the tensor's shape, or another variant.");
  }
  wide.block_size_n = 1;  // tiles that fit: 2^45 tiles of one element, float64 accumulators, W = 2
  wide.all_reduce_variant = AllReduceVariant::kSpinlock;
  EXPECT_EQ(all_reduce_needs(column, column, wide, 2).staging_bytes, (size_t{1} << 44) * (8 + 8));
}

TEST(CclNeeds, TileVariantsWidenTheTilesOfShortTensors) {
  const size_t mib = size_t{1} << 20;
  const Tensor vec = shape(DType::kBFloat16, 1, int64_t{1} << 21);  // 4 MiB: 1024 tiles of 1 x 2048
  const WorkspaceNeeds ring = all_reduce_needs(vec, vec, variant(AllReduceVariant::kRing), 2);
  EXPECT_EQ(ring.flags, 2u * 1024) << "a reduce-scatter and an all-gather flag per tile and slice";
  EXPECT_EQ(ring.staging_bytes, 2u * 1024 * 2048 * 4) << "two parities of a float slot per tile: 16 MiB";
  EXPECT_EQ(ring.staging_bytes, 4 * (4 * mib)) << "four times the tensor, not 128";
  const WorkspaceNeeds spin = all_reduce_needs(vec, vec, variant(AllReduceVariant::kSpinlock), 2);
  EXPECT_EQ(spin.locks, 1024u);
  EXPECT_EQ(spin.flags, (2u + 2) * 1024) << "arrivals by source, done and a first-writer mark per tile";
  EXPECT_EQ(spin.staging_bytes, 512u * 2048 * (4 + 2)) << "512 owned tiles: float accumulators and bf16 results";
  const WorkspaceNeeds atomic = all_reduce_needs(vec, vec, variant(AllReduceVariant::kAtomic), 2);
  EXPECT_EQ(atomic.flags, spin.flags);
  EXPECT_EQ(all_reduce_needs(vec, vec, variant(AllReduceVariant::kAtomic), 8).flags, (8u + 2) * 1024)
      << "arrivals by source grow with the world; done and the cleared mark do not";
  EXPECT_EQ(atomic.staging_bytes, spin.staging_bytes);
  EXPECT_EQ(atomic.locks, 0u);

  // 3 rows with 32x64 blocks: tiles of 3 x 640 (64 x floor(32 / 3)), 157 along 100003 columns.
  const Tensor three = shape(DType::kFloat32, 3, 100003);
  EXPECT_EQ(all_reduce_needs(three, three, variant(AllReduceVariant::kSpinlock), 2).locks, 157u);
  EXPECT_EQ(all_reduce_needs(three, three, variant(AllReduceVariant::kRing), 2).staging_bytes, 2u * 157 * 3 * 640 * 4);
  // Ring slices keep their count (block_size_n / all_reduce_ring_slice_n) and widen with the tile.
  Config sliced = variant(AllReduceVariant::kRing);
  sliced.all_reduce_ring_slice_n = 16;
  EXPECT_EQ(all_reduce_needs(vec, vec, sliced, 2).flags, 2u * 1024 * 4);
  // As many rows as block_size_m: the config's tiles.
  const Tensor tall = shape(DType::kFloat32, 32, 100003);
  EXPECT_EQ(all_reduce_needs(tall, tall, variant(AllReduceVariant::kSpinlock), 2).locks,
            static_cast<size_t>(tile_count(32, 100003, 32, 64)));
  // Different block sizes still mean different needs for a short tensor (matches() compares them too).
  EXPECT_EQ(all_reduce_needs(vec, vec, variant(AllReduceVariant::kSpinlock, 64, 64), 2).locks, 512u);
  EXPECT_EQ(all_reduce_needs(vec, vec, variant(AllReduceVariant::kSpinlock, 16, 64), 2).locks, 2048u);
}

// auto sizes the variant it resolves to: one_shot up to 1 MiB on 2 ranks, two_shot above.
TEST(CclNeeds, AutoSizesTheVariantItPicks) {
  for (int64_t n : {int64_t{4096}, int64_t{1} << 21}) {
    const Tensor t = shape(DType::kBFloat16, 1, n);
    const AllReduceVariant picked =
        resolve_all_reduce_variant(Config{}, 2, static_cast<size_t>(n) * 2, DType::kBFloat16, 1);
    EXPECT_EQ(picked, n == 4096 ? AllReduceVariant::kOneShot : AllReduceVariant::kTwoShot);
    expect_same_needs(all_reduce_needs(t, t, Config{}, 2), all_reduce_needs(t, t, variant(picked), 2),
                      "auto at " + std::to_string(n) + " elements");
  }
  // The one-shot LL staging: every rank's slot in two parities, 4 data bytes per 8-byte word.
  const Tensor small = shape(DType::kBFloat16, 1, 4096);
  const WorkspaceNeeds one_shot = all_reduce_needs(small, small, Config{}, 4);
  EXPECT_GE(one_shot.staging_bytes, 2u * 4 * 4096 * 2 * 2);
  EXPECT_GT(one_shot.staging_bytes, all_reduce_needs(small, small, Config{}, 2).staging_bytes)
      << "a slot per rank: more ranks, more staging";
}

// one_shot's protocol under `auto`: LL up to 1 MiB, simple above; a protocol in the config wins. Simple's
// workspace: two parities of one slot per rank, cut in segments of 8 to 64 KiB, one flag per rank and
// segment; the protocol is part of the signature every rank compares.
TEST(CclNeeds, OneShotProtocolBySizeAndItsNeeds) {
  const size_t mib = size_t{1} << 20;
  EXPECT_EQ(resolve_one_shot_protocol(Config{}, mib), OneShotProtocol::kLL);
  EXPECT_EQ(resolve_one_shot_protocol(Config{}, mib + 2), OneShotProtocol::kSimple);
  Config ll = variant(AllReduceVariant::kOneShot), simple = ll;
  ll.all_reduce_one_shot_protocol = OneShotProtocol::kLL;
  simple.all_reduce_one_shot_protocol = OneShotProtocol::kSimple;
  EXPECT_EQ(resolve_one_shot_protocol(ll, 64 * mib), OneShotProtocol::kLL);
  EXPECT_EQ(resolve_one_shot_protocol(simple, 16), OneShotProtocol::kSimple);

  // 4 MiB of bf16: segments of 16 KiB (8192 elements), 256 of them.
  const Tensor big = shape(DType::kBFloat16, 1, int64_t{1} << 21);
  for (int w : {2, 8}) {
    const WorkspaceNeeds n = all_reduce_needs(big, big, variant(AllReduceVariant::kOneShot), w);
    EXPECT_EQ(n.flags, static_cast<size_t>(w) * 256);
    EXPECT_EQ(n.staging_bytes, 2 * static_cast<size_t>(w) * 4 * mib);
    EXPECT_EQ(n.locks, 0u);
    const WorkspaceNeeds as_ll = all_reduce_needs(big, big, ll, w);
    EXPECT_EQ(as_ll.staging_bytes, (2 * n.staging_bytes + 2 * static_cast<size_t>(w) * 16 + 255) / 256 * 256)
        << "LL carries 4 data bytes in 8, and each of the 2 x W slots a 16-byte header line (in 256-byte units)";
    EXPECT_EQ(as_ll.flags, 0u);
  }
  // 1 x 7 float32: one segment of the 8 KiB floor; 100 MiB of float32: 64 KiB segments.
  const WorkspaceNeeds tiny = all_reduce_needs(shape(DType::kFloat32, 1, 7), shape(DType::kFloat32, 1, 7), simple, 2);
  EXPECT_EQ(tiny.flags, 2u);
  EXPECT_EQ(tiny.staging_bytes, 2u * 2 * 8192);
  const Tensor huge = shape(DType::kFloat32, 100, int64_t{1} << 18);
  EXPECT_EQ(all_reduce_needs(huge, huge, simple, 2).flags, 2u * 1600);

  FakeHost host;
  Workspace ws;
  OpSignature sig;
  sig.op = OpKind::kAllReduce;
  sig.rows = 1;
  sig.cols = int64_t{1} << 21;
  sig.dtype = DType::kBFloat16;
  sig.world_size = 2;
  sig.variant = AllReduceVariant::kOneShot;
  sig.protocol = OneShotProtocol::kSimple;
  sig.block_size_m = 32;
  sig.block_size_n = 64;
  EXPECT_EQ(sig.describe(),
            "all_reduce 1x2097152 bfloat16 world 2 variant one_shot protocol simple blocks 32x64 op sum");
  ws.prepare(host, sig, all_reduce_needs(big, big, simple, 2));
  OpSignature as_ll = sig;
  as_ll.protocol = OneShotProtocol::kLL;
  EXPECT_FALSE(ws.matches(as_ll));
  ws.release(host);
}

// Every op sizes from views without data; the exchanges' staging grows with the world past the LL sizes.
TEST(CclNeeds, EveryOpSizesFromShapesAlone) {
  const Config cfg;
  for (int w : {1, 2, 4, 8}) {
    SCOPED_TRACE("world " + std::to_string(w));
    const int64_t m = 64, n = 4096;  // 1 MiB float32 blocks: past every LL threshold
    const DType dt = DType::kFloat32;
    const WorkspaceNeeds ag = all_gather_needs(shape(dt, w * m, n), shape(dt, m, n), cfg, w);
    const WorkspaceNeeds rs = reduce_scatter_needs(shape(dt, m, n), shape(dt, w * m, n), cfg, w);
    const WorkspaceNeeds a2a = all_to_all_needs(shape(dt, w * m, n), shape(dt, w * m, n), cfg, w);
    const WorkspaceNeeds bc = broadcast_needs(shape(dt, m, n), shape(dt, m, n), w - 1, cfg, w);
    for (const WorkspaceNeeds* x : {&ag, &rs, &a2a, &bc}) EXPECT_GT(x->block_state, 0u);
    // Two parities of W - 1 slots of one 1 MiB block.
    const size_t block = static_cast<size_t>(m * n) * 4;
    for (const WorkspaceNeeds* x : {&ag, &rs, &a2a})
      EXPECT_EQ(x->staging_bytes, 2 * static_cast<size_t>(w - 1) * block);
    EXPECT_EQ(bc.staging_bytes, w > 1 ? block : 0u);
  }
}

// broadcast's two paths size differently (since 2026-12-06): up to 64 KiB the LL exchange, its staging the LL
// exchanges' (2 parities x W slots of a header line and the lines) and no flags; above, the chunked path, one
// slot of the tensor and W done words then one flag per 8 KiB-or-more chunk. Not with IRIS_LL_MAX_BYTES, which
// moves the bound.
TEST(CclNeeds, BroadcastTakesTheLLExchangeUpTo64KiBAndChunksAbove) {
  if (std::getenv("IRIS_LL_MAX_BYTES") != nullptr) GTEST_SKIP() << "IRIS_LL_MAX_BYTES moves the bound";
  const Config cfg;
  const DType dt = DType::kFloat32;
  for (int w : {2, 4, 8}) {
    SCOPED_TRACE("world " + std::to_string(w));
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{16384}}) {  // 4 B to 64 KiB
      const WorkspaceNeeds ll = broadcast_needs(shape(dt, 1, n), shape(dt, 1, n), w - 1, cfg, w);
      const size_t lines = (static_cast<size_t>(n) * 4 + 7) / 8;  // 8 data bytes per 16-byte line
      const size_t bytes = 2 * static_cast<size_t>(w) * (1 + lines) * 16;
      EXPECT_EQ(ll.staging_bytes, (bytes + 255) / 256 * 256) << n;
      EXPECT_EQ(ll.flags, 0u) << n;
      EXPECT_EQ(ll.locks, 0u) << n;
    }
    // 64 KiB + 4 bytes: chunked, 9 chunks of 8 KiB (the last of 4 bytes).
    const WorkspaceNeeds chunked = broadcast_needs(shape(dt, 1, 16385), shape(dt, 1, 16385), 0, cfg, w);
    EXPECT_EQ(chunked.staging_bytes, size_t{65792}) << "65540 bytes, to 256";
    EXPECT_EQ(chunked.flags, static_cast<size_t>(w) + 9);
  }
  // One rank copies: no staging, no flags, on either side of the bound.
  for (int64_t n : {int64_t{100}, int64_t{1} << 20}) {
    const WorkspaceNeeds one = broadcast_needs(shape(dt, 1, n), shape(dt, 1, n), 0, cfg, 1);
    EXPECT_EQ(one.staging_bytes, 0u);
    EXPECT_EQ(one.flags, 0u);
  }
}

// Every op sizes the block state by the world size alone (8 + 3W words: the epoch words, all_reduce's layout
// fence, the call words and the stop word, then the LL exchanges' clean words), so a workspace prepared for one op
// serves the next whatever the order. Before 2026-12-03 all_gather, reduce_scatter, all_to_all and broadcast sized 2
// words and all_reduce 3 + W: a workspace prepared for all_gather first was refused by all_reduce's preamble ("Block
// state array too small").
TEST(CclNeeds, EveryOpSizesTheSameBlockStateSoOneWorkspaceServesThemAll) {
  const Config cfg;
  const DType dt = DType::kFloat32;
  for (int w : {1, 2, 4, 8}) {
    SCOPED_TRACE("world " + std::to_string(w));
    const size_t want = 8 + 3 * static_cast<size_t>(w);
    EXPECT_EQ(all_gather_needs(shape(dt, w * 4, 100), shape(dt, 4, 100), cfg, w).block_state, want);
    EXPECT_EQ(reduce_scatter_needs(shape(dt, 4, 100), shape(dt, w * 4, 100), cfg, w).block_state, want);
    EXPECT_EQ(all_to_all_needs(shape(dt, w * 4, 100), shape(dt, w * 4, 100), cfg, w).block_state, want);
    EXPECT_EQ(broadcast_needs(shape(dt, 4, 100), shape(dt, 4, 100), 0, cfg, w).block_state, want);
    for (auto v : {AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot, AllReduceVariant::kRing,
                   AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock})
      EXPECT_EQ(all_reduce_needs(shape(dt, 4, 100), shape(dt, 4, 100), variant(v), w).block_state, want)
          << variant_name(v);
  }
  // all_gather first, then all_reduce (one_shot: no flags, staging within all_gather's) on one workspace.
  FakeHost host;
  Workspace ws;
  OpSignature gather;
  gather.op = OpKind::kAllGather;
  gather.rows = 4;
  gather.cols = 100;
  gather.dtype = dt;
  gather.world_size = 2;
  ws.prepare(host, gather, all_gather_needs(shape(dt, 8, 100), shape(dt, 4, 100), cfg, 2));
  OpSignature reduce = gather;
  reduce.op = OpKind::kAllReduce;
  reduce.rows = 1;
  reduce.cols = 8;
  reduce.variant = AllReduceVariant::kOneShot;
  const WorkspaceNeeds one_shot = all_reduce_needs(shape(dt, 1, 8), shape(dt, 1, 8), cfg, 2);
  EXPECT_NO_THROW(ws.prepare(host, reduce, one_shot));
  EXPECT_NO_THROW(ws.check_capacity(one_shot));
  ws.release(host);
}

// Sizing checks what the call checks (same messages), but not the data: null views pass.
// Every dtype is sized by its width and reduces in every variant; a dtype value that is no DType is refused
// by every op.
TEST(CclNeeds, EveryDtypeIsSizedByItsWidthAndReduces) {
  const Config cfg;
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kFloat64), 8u);
  EXPECT_EQ(dtype_size(DType::kUInt8), 1u);
  EXPECT_EQ(dtype_size(DType::kInt8), 1u);
  EXPECT_EQ(dtype_size(DType::kFloat8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kFloat8E5M2), 1u);
  EXPECT_STREQ(dtype_name(DType::kFloat8E4M3), "float8_e4m3");
  EXPECT_STREQ(dtype_name(DType::kFloat8E5M2), "float8_e5m2");
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_NE(dtype_size(dt), 0u);
    // The same bytes in any dtype need the same staging: 4096 bytes of one rank's block, 2 ranks.
    const auto t = [&](int64_t rows, int64_t bytes) {
      return shape(dt, rows, bytes / static_cast<int64_t>(dtype_size(dt)));
    };
    const auto by_bytes = all_gather_needs(t(2, 4096), t(1, 4096), cfg, 2);
    const auto as_int32 = all_gather_needs(shape(DType::kInt32, 2, 1024), shape(DType::kInt32, 1, 1024), cfg, 2);
    EXPECT_EQ(by_bytes.staging_bytes, as_int32.staging_bytes);
    EXPECT_EQ(by_bytes.flags, as_int32.flags);
    const auto big = all_to_all_needs(t(2, 1 << 22), t(2, 1 << 22), cfg, 2);
    const auto big_int32 = all_to_all_needs(shape(DType::kInt32, 2, 1 << 20), shape(DType::kInt32, 2, 1 << 20), cfg, 2);
    EXPECT_EQ(big.staging_bytes, big_int32.staging_bytes);
    EXPECT_EQ(big.flags, big_int32.flags);
    EXPECT_NO_THROW(broadcast_needs(t(3, 4096), t(3, 4096), 1, cfg, 2));
    // Every dtype reduces, in every variant.
    EXPECT_NO_THROW(reduce_scatter_needs(t(1, 64), t(2, 64), cfg, 2));
    for (AllReduceVariant v : {AllReduceVariant::kAuto, AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock,
                               AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot, AllReduceVariant::kRing})
      EXPECT_NO_THROW(all_reduce_needs(t(300, 4096), t(300, 4096), variant(v), 2)) << variant_name(v);
  }
  EXPECT_NO_THROW(reduce_scatter_needs(shape(DType::kInt64, 1, 64), shape(DType::kInt64, 2, 64), cfg, 2));
  const DType bogus = static_cast<DType>(42);
  EXPECT_EQ(test::error_text<std::invalid_argument>(
                [&] { all_gather_needs(shape(DType::kInt32, 2, 8), shape(bogus, 1, 8), cfg, 2); }),
            "all_gather: input has an unknown dtype (42).");
  EXPECT_EQ(test::error_text<std::invalid_argument>(
                [&] { all_reduce_needs(shape(bogus, 1, 8), shape(bogus, 1, 8), cfg, 2); }),
            "all_reduce: input has an unknown dtype (42).");
}

// The 8-byte and 1-byte types reduce in every variant. The tile variants' accumulators are float for the
// 16-bit floats, 32 bits for int8 and uint8 and the element's own type for the rest, so int64 and float64
// need twice int32's accumulator bytes, int8 and uint8 as many as int32, and all of them the same flags.
TEST(CclNeeds, TileVariantsSizeAccumulatorsByTheElement) {
  const Tensor i64 = shape(DType::kInt64, 300, 1000), i32 = shape(DType::kInt32, 300, 1000);
  const Tensor f32 = shape(DType::kFloat32, 300, 1000), bf16 = shape(DType::kBFloat16, 300, 1000);
  const Tensor f64 = shape(DType::kFloat64, 300, 1000);
  const Tensor i8 = shape(DType::kInt8, 300, 1000), u8 = shape(DType::kUInt8, 300, 1000);
  for (AllReduceVariant v : {AllReduceVariant::kAuto, AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot,
                             AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock, AllReduceVariant::kRing}) {
    const ReduceOp op = v == AllReduceVariant::kAtomic ? ReduceOp::kSum : ReduceOp::kMax;
    for (const Tensor* t : {&i64, &f64, &i8, &u8})
      EXPECT_NO_THROW(all_reduce_needs(*t, *t, variant(v), 2, op)) << variant_name(v) << ", " << dtype_name(t->dtype);
  }
  for (AllReduceVariant v : {AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock}) {
    const Config c = variant(v);
    const int64_t tiles = tile_count(300, 1000, c.block_size_m, c.block_size_n), owned = (tiles + 1) / 2;
    const size_t tile_elems = static_cast<size_t>(c.block_size_m) * c.block_size_n;
    auto r256 = [](size_t b) { return (b + 255) / 256 * 256; };
    // Accumulators (bytes each), then results in the element type (bytes each).
    struct Case {
      const Tensor& t;
      size_t acc, elem;
    };
    for (const Case& k :
         {Case{i64, 8, 8}, Case{i32, 4, 4}, Case{f64, 8, 8}, Case{bf16, 4, 2}, Case{i8, 4, 1}, Case{u8, 4, 1}}) {
      EXPECT_EQ(all_reduce_needs(k.t, k.t, c, 2).staging_bytes,
                r256(owned * tile_elems * k.acc) + r256(owned * tile_elems * k.elem))
          << variant_name(v) << ", " << dtype_name(k.t.dtype);
    }
    for (const Tensor* t : {&i64, &f64, &i8, &u8})
      EXPECT_EQ(all_reduce_needs(*t, *t, c, 2).flags, all_reduce_needs(i32, i32, c, 2).flags) << variant_name(v);
  }
  {
    const Config c = variant(AllReduceVariant::kRing);
    const size_t slots = 2 * static_cast<size_t>(tile_count(300, 1000, c.block_size_m, c.block_size_n)) *
                         c.block_size_m * c.block_size_n;
    EXPECT_EQ(all_reduce_needs(i64, i64, c, 2).staging_bytes, slots * 8);
    EXPECT_EQ(all_reduce_needs(f64, f64, c, 2).staging_bytes, slots * 8);
    EXPECT_EQ(all_reduce_needs(f32, f32, c, 2).staging_bytes, slots * 4);
    EXPECT_EQ(all_reduce_needs(bf16, bf16, c, 2).staging_bytes, slots * 4);  // RS partials travel as float
    EXPECT_EQ(all_reduce_needs(u8, u8, c, 2).staging_bytes, slots * 4);      // and as 32-bit words for int8, uint8
    EXPECT_EQ(all_reduce_needs(i8, i8, c, 2).staging_bytes, slots * 4);
  }
}

TEST(CclNeeds, ShapesAndConfigAreCheckedAsTheCallChecksThem) {
  const DType dt = DType::kBFloat16;
  const Config cfg;
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { all_reduce_needs(shape(dt, 1, 8), shape(dt, 1, 8), cfg, 0); }),
      "all_reduce_needs: world_size must be at least 1, got 0.");
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { all_reduce_needs(shape(dt, 1, 8), shape(dt, 1, 9), cfg, 2); }),
      "all_reduce: input is 1x9 but output is 1x8; they must have the same shape.");
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { all_gather_needs(shape(dt, 4, 8), shape(dt, 4, 8), cfg, 2); }),
      "all_gather: input is 4x8 on each of 2 ranks, so the output must be 8x8, got 4x8.");
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { reduce_scatter_needs(shape(dt, 4, 8), shape(dt, 4, 8), cfg, 2); }),
      "reduce_scatter: output is 4x8 on each of 2 ranks, so the input must be 8x8, got 4x8.");
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { all_to_all_needs(shape(dt, 3, 8), shape(dt, 3, 8), cfg, 2); }),
      "all_to_all: 3 rows do not split into 2 equal blocks (one per rank).");
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { broadcast_needs(shape(dt, 4, 8), shape(dt, 4, 8), 2, cfg, 2); }),
      "broadcast: root 2 is not a rank of this world of 2.");
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] { broadcast_needs(shape(dt, 4, 8), shape(dt, 4, 7), 0, cfg, 2); }),
      "broadcast: input is 4x7 but output is 4x8; they must have the same shape.");
  Config bad;
  bad.block_size_m = 0;
  EXPECT_THROW(all_reduce_needs(shape(dt, 1, 8), shape(dt, 1, 8), bad, 2), std::invalid_argument);
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] {
              all_reduce_needs(shape(dt, 1, 8), shape(dt, 1, 8), variant(AllReduceVariant::kAtomic), 2, ReduceOp::kMax);
            }),
            "all_reduce variant 'atomic' supports only sum and avg; use one_shot, two_shot, ring or spinlock for max.");
  EXPECT_EQ(
      test::error_text<std::invalid_argument>([&] {
        all_reduce_needs(shape(dt, 1, 8), shape(dt, 1, 8), variant(AllReduceVariant::kAtomic), 2, ReduceOp::kProd);
      }),
      "all_reduce variant 'atomic' supports only sum and avg; use one_shot, two_shot, ring or spinlock for prod.");
  EXPECT_NO_THROW(
      all_reduce_needs(shape(dt, 1, 8), shape(dt, 1, 8), variant(AllReduceVariant::kAtomic), 2, ReduceOp::kAvg));
  // avg needs what sum needs: it is the sum, divided once at the end; prod the same arrays (not atomic).
  for (AllReduceVariant v : {AllReduceVariant::kAuto, AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock,
                             AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot, AllReduceVariant::kRing}) {
    const auto sum = all_reduce_needs(shape(dt, 300, 1000), shape(dt, 300, 1000), variant(v), 2, ReduceOp::kSum);
    for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kProd}) {
      if (op == ReduceOp::kProd && v == AllReduceVariant::kAtomic) continue;
      const auto other = all_reduce_needs(shape(dt, 300, 1000), shape(dt, 300, 1000), variant(v), 2, op);
      EXPECT_EQ(other.locks, sum.locks) << variant_name(v) << " " << reduce_op_name(op);
      EXPECT_EQ(other.flags, sum.flags) << variant_name(v) << " " << reduce_op_name(op);
      EXPECT_EQ(other.staging_bytes, sum.staging_bytes) << variant_name(v) << " " << reduce_op_name(op);
      EXPECT_EQ(other.block_state, sum.block_state) << variant_name(v) << " " << reduce_op_name(op);
    }
  }
  EXPECT_EQ(test::error_text<std::invalid_argument>(
                [&] { all_reduce_needs(shape(dt, 1, 8), shape(dt, 1, 8), cfg, 2, static_cast<ReduceOp>(9)); }),
            "all_reduce: unknown reduce op 9.");
  EXPECT_EQ(test::error_text<std::invalid_argument>(
                [&] { reduce_scatter_needs(shape(dt, 1, 8), shape(dt, 2, 8), cfg, 2, static_cast<ReduceOp>(9)); }),
            "reduce_scatter: unknown reduce op 9.");
  // Null data, a separate in and out, in place: all accepted.
  int64_t fake = 0;
  const Tensor real = Tensor::matrix(&fake, dt, 1, 4);
  EXPECT_NO_THROW(all_reduce_needs(shape(dt, 1, 4), real, cfg, 2));
  EXPECT_NO_THROW(all_reduce_needs(real, real, cfg, 2));
  EXPECT_NO_THROW(all_gather_needs(shape(dt, 2, 4), shape(dt, 1, 4), cfg, 2));
}

// Malformed views are refused with the view's name, before any size is computed from them: negative sizes,
// a row stride below the columns (a negative one other than Tensor::matrix's -1 is kept, so it is refused
// rather than read as contiguous), views past what a GPU addresses (a wrong shape or stride, whose byte
// sizes would overflow: 2^32 x 2^32 elements once wrapped to 0 elements and returned as a silent no-op),
// and inputs and outputs of different types.
TEST(CclNeeds, MalformedViewsAreRefusedNamingTheView) {
  const DType dt = DType::kFloat32;
  const Config cfg;
  auto error = [](auto&& fn) { return test::error_text<std::invalid_argument>(fn); };
  const int64_t big = int64_t{1} << 32;
  EXPECT_EQ(error([&] { all_reduce_needs(shape(dt, big, big), shape(dt, big, big), cfg, 2); }),
            "all_reduce: input 4294967296x4294967296 float32 spans more than 2^48 bytes, more than a GPU can address; "
            "its shape or row stride is wrong.");
  EXPECT_EQ(
      error([&] { all_gather_needs(shape(dt, 2, 8), Tensor::matrix(nullptr, dt, 2, 8, int64_t{1} << 62), cfg, 2); }),
      "all_gather: input 2x8 float32 (row stride 4611686018427387904) spans more than 2^48 bytes, more than a "
      "GPU can address; its shape or row stride is wrong.");
  EXPECT_NO_THROW(all_gather_needs(shape(dt, 2, int64_t{1} << 44), shape(dt, 1, int64_t{1} << 44), cfg, 2))
      << "2^46 bytes: large, but addressable";
  EXPECT_EQ(error([&] { broadcast_needs(Tensor::matrix(nullptr, dt, 4, 8, -7), shape(dt, 4, 8), 0, cfg, 2); }),
            "broadcast: output row stride -7 is smaller than its 8 columns.");
  EXPECT_NO_THROW(all_to_all_needs(Tensor::matrix(nullptr, dt, 1, 8, -7), shape(dt, 1, 8), cfg, 1))
      << "one row has no second row to step to: any stride";
  EXPECT_EQ(error([&] { reduce_scatter_needs(shape(dt, -1, 8), shape(dt, 2, 8), cfg, 2); }),
            "reduce_scatter: output has negative shape -1x8.");
  EXPECT_EQ(error([&] { all_to_all_needs(shape(dt, 2, 8), shape(DType::kFloat16, 2, 8), cfg, 2); }),
            "all_to_all: input is float16 but output is float32.");
  EXPECT_EQ(error([&] { all_reduce_needs(shape(dt, 1, 8), shape(static_cast<DType>(42), 1, 8), cfg, 2); }),
            "all_reduce: input has an unknown dtype (42).");
  // Empty views too, whose dimensions enter products (W x rows): before 2026-12-05 a 2^62 x 0 input of
  // all_gather on 4 ranks wrapped its expected 2^64-row output to 0 rows and was accepted.
  EXPECT_EQ(error([&] { all_gather_needs(shape(dt, 0, 0), shape(dt, int64_t{1} << 62, 0), cfg, 4); }),
            "all_gather: input has shape 4611686018427387904x0, a dimension past 2^48, more than a GPU can address.");
  EXPECT_NO_THROW(all_gather_needs(shape(dt, 0, 8), shape(dt, 0, 8), cfg, 4)) << "an empty view is still fine";
}

// A workspace's arrays come from the heap of the context that prepared it: a workspace prepared with another
// Context (or one since destroyed) would have its kernels reach peers at offsets of another heap. Its
// preamble refuses it on that rank, and its peers, which see the description say so, raise with it.
TEST(CclWorkspace, AWorkspaceOfAnotherContextsHeapIsRefused) {
  const OpSignature sig = spinlock_sig(512, 512, 64, 64);
  const WorkspaceNeeds needs = lock_needs(512, 512, 64, 64);
  FakeHost first;
  Workspace ws;
  ws.prepare(first, sig, needs);
  FakeHost second;
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ws.prepare(second, sig, needs); }),
            "all_reduce: the workspace's arrays are not on this context's heap (it was prepared with another Context, "
            "or with one since destroyed); give this context a workspace of its own (on every rank).");
  EXPECT_EQ(second.allocs, 0);
  // Nor does another host free them (after its wait, so its peers do not wait for it).
  const std::string release_refused =
      "release: the workspace's arrays are not on this context's heap (it was prepared with another Context, or "
      "with one since destroyed); nothing was freed. Release it with the context that prepared it, or, when that "
      "context is destroyed (its heap went with it), assign it a fresh Workspace.";
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ws.release(second); }), release_refused);
  EXPECT_EQ(first.live, 1);
  EXPECT_EQ(second.device_syncs, 1) << "the refusal comes after the collective wait";
  // A heap created at the addresses of a destroyed one holds them inside its own allocations (holds() is
  // true): the heap's id tells them apart. Before 2026-12-06 its preamble took them for its own, zeroed
  // them and let its kernels write locks into whatever it had allocated there.
  FakeHost successor;
  successor.holds_everything = true;
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ws.prepare(successor, sig, needs); }),
            "all_reduce: the workspace's arrays are not on this context's heap (it was prepared with another Context, "
            "or with one since destroyed); give this context a workspace of its own (on every rank).");
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ws.release(successor); }), release_refused);
  EXPECT_EQ(first.live, 1);
  ws.prepare(first, sig, needs);  // its own host still takes it
  ws.release(first);
  EXPECT_EQ(first.live, 0);
  Workspace fresh;
  fresh.prepare(second, sig, needs);  // a released or fresh workspace belongs to no heap yet
  fresh.release(second);

  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(10));
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FakeHost other;
      FakeHost host(bootstraps[r]);
      Workspace w;
      if (r == 1) w.prepare(other, sig, needs);  // rank 1's arrays are on another heap; rank 0's is fresh
      errors[r] = test::error_text<std::invalid_argument>([&] { w.prepare(host, sig, needs); });
      EXPECT_EQ(host.allocs, 0) << "rank " << r;
      if (r == 1) w.release(other);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[1],
            "all_reduce: the workspace's arrays are not on this context's heap (it was prepared with another Context, "
            "or with one since destroyed); give this context a workspace of its own (on every rank).");
  EXPECT_NE(errors[0].find("Collective parameters differ across ranks: rank 0 has " + sig.describe() +
                           " but rank 1 has " + sig.describe() + " on a workspace of another context's heap."),
            std::string::npos)
      << errors[0];
}

// IRIS_CHECK_CALLS: before a call launches, every rank compares it (its plan's signature, and which call on
// the workspace it is) with every other rank's. Calls that agree pass; a call whose shape differs, a rank
// that made a call more on the workspace, or a rank that refused the call makes every other rank raise,
// naming both calls (or the refusal); the refusing rank returns, to raise its own error. A peer that made
// another collective call of the context at that point (one this rank did not make) is named as such.
TEST(CclWorkspace, CheckCallComparesEachCallAcrossRanksAndNamesBoth) {
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(10));
  std::vector<std::vector<std::string>> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FakeHost host(bootstraps[r]);
      OpSignature sig = spinlock_sig(512, 512, 64, 64);
      sig.world_size = 2;
      Workspace ws;
      ws.prepare(host, sig, lock_needs(512, 512, 64, 64));
      auto attempt = [&](const OpSignature* s, std::string_view refusal = {}) {
        std::string what;  // "" when the call passes
        try {
          ws.check_call(host, s, refusal);
        } catch (const std::invalid_argument& e) {
          what = e.what();
        }
        errors[r].push_back(what);
      };
      attempt(&sig);  // the same call on both ranks
      ws.count_call();
      OpSignature smaller = sig;
      smaller.rows = 256;  // rank 1 calls with fewer rows: fits the workspace, but not its peer's call
      attempt(r == 1 ? &smaller : &sig);
      if (r == 0) ws.count_call();  // rank 0 launched a call that rank 1 did not
      attempt(&sig);
      ws.count_call();
      if (r == 1) ws.count_call();                                              // in step again
      attempt(r == 1 ? nullptr : &sig, "all_reduce: the output is too small");  // rank 1 refused its call
      attempt(&sig);
      if (r == 0)
        attempt(&sig);  // rank 1 makes another collective call of the context meanwhile
      else
        host.allgather(std::string(16, '\0'));
      host.allgather("");
      ws.release(host);
    });
  for (auto& t : threads) t.join();
  const std::string call = "all_reduce 512x512 float32 world 2 variant spinlock blocks 64x64 op sum";
  const std::string tail =
      ". Every rank must make the same calls on a workspace, in the same order, with the same shapes and config.";
  ASSERT_EQ(errors[0].size(), 6u);
  ASSERT_EQ(errors[1].size(), 5u);
  EXPECT_EQ(errors[0][0], "");
  EXPECT_EQ(errors[1][0], "");
  EXPECT_EQ(errors[0][1], "Calls differ across ranks (IRIS_CHECK_CALLS): rank 0 calls " + call +
                              " (call 2 on the workspace) but rank 1 calls all_reduce 256x512 float32 world 2 variant "
                              "spinlock blocks 64x64 op sum (call 2 on the workspace)" +
                              tail);
  EXPECT_EQ(errors[1][1],
            "Calls differ across ranks (IRIS_CHECK_CALLS): rank 1 calls all_reduce 256x512 float32 world 2 "
            "variant spinlock blocks 64x64 op sum (call 2 on the workspace) but rank 0 calls " +
                call + " (call 2 on the workspace)" + tail);
  EXPECT_EQ(errors[0][2], "Calls differ across ranks (IRIS_CHECK_CALLS): rank 0 calls " + call +
                              " (call 3 on the workspace) but rank 1 calls " + call + " (call 2 on the workspace)" +
                              tail);
  EXPECT_EQ(errors[1][2], "Calls differ across ranks (IRIS_CHECK_CALLS): rank 1 calls " + call +
                              " (call 2 on the workspace) but rank 0 calls " + call + " (call 3 on the workspace)" +
                              tail);
  EXPECT_EQ(errors[0][3],
            "all_reduce: rank 1 refused this call, so no rank launches it (IRIS_CHECK_CALLS): "
            "all_reduce: the output is too small");
  EXPECT_EQ(errors[1][3], "") << "the refusing rank raises its own error";
  EXPECT_EQ(errors[0][4], "");
  EXPECT_EQ(errors[1][4], "");
  EXPECT_EQ(errors[0][5], "Calls differ across ranks (IRIS_CHECK_CALLS): rank 0 calls " + call +
                              " (call 4 on the workspace) but rank 1 made another collective call of the context at "
                              "this point (a barrier, a preamble, an allocation...), not this call" +
                              tail);
}

}  // namespace
}  // namespace iris::ccl
