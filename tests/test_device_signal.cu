// GPU tests of iris/device/signal.cuh: wait_until comparisons on local and remote words (every comparison on
// every flag type against a host reference, at the edges of each type), 10,000 producer -> consumer messages
// through a remote flag with each put-and-signal form (no message lost, duplicated or stale), with every flag
// type, narrow payloads and GPU-scope releases too, a message from every warp of a block, and many-to-one
// signalling with release read-modify-writes whose returned counts are checked. 1 and 2 ranks (more with
// IRIS_TEST_MAX_RANKS), threads and processes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"
#include "iris/device.cuh"
#include "support/ranks.hpp"
#include "test_device_util.cuh"

namespace iris {
namespace {

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;
using test::RankSetup;

class DeviceSignalTest : public ::testing::TestWithParam<RankSetup> {};

// ---- wait_until comparisons ----------------------------------------------------------------------

struct CmpCase {
  int64_t observed;
  Cmp cmp;
  int64_t value;
  int types;  // 1: holds on uint64 words, 2: holds on int32 words, 3: both
};

// Every case holds on the word types it names, so those waits return true at once.
const std::vector<CmpCase>& satisfied_cases() {
  static const std::vector<CmpCase> cases = {
      {7, Cmp::kEq, 7, 3},
      {7, Cmp::kNe, 8, 3},
      {7, Cmp::kGe, 7, 3},
      {8, Cmp::kGe, 7, 3},
      {8, Cmp::kGt, 7, 3},
      {7, Cmp::kLe, 7, 3},
      {6, Cmp::kLe, 7, 3},
      {6, Cmp::kLt, 7, 3},
      {7, Cmp::kReached, 7, 3},
      {9, Cmp::kReached, 7, 3},
      {5, Cmp::kReached, -3, 3},                    // uint64: 5 is 8 past 2^64 - 3 (wrapped); int32: 5 >= -3
      {-2147483643, Cmp::kReached, 2147483645, 2},  // int32 wrapped: 0x80000005 is 8 past 0x7ffffffd
      {-1, Cmp::kLt, 0, 2},
      {-1, Cmp::kGt, 0, 1},
      {-5, Cmp::kGe, -6, 3},
  };
  return cases;
}

// words: [cases] uint64 then [cases] int32, in this rank's heap; the kernel waits on rank `from`'s copy.
__global__ void wait_cases_kernel(DeviceContext ctx, const uint64_t* u64_words, const int32_t* i32_words,
                                  const CmpCase* cases, int count, int from, int* results) {
  const int i = threadIdx.x;
  if (i >= count) return;
  const CmpCase c = cases[i];
  bool ok64 = true, ok32 = true;
  if (c.types & 1)
    ok64 = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, dev::translate(ctx, u64_words + i, from), c.cmp,
                                                         static_cast<uint64_t>(c.value), "test_cmp_u64");
  if (c.types & 2)
    ok32 = dev::wait_until<Order::kRelaxed, Scope::kGpu>(ctx, dev::translate(ctx, i32_words + i, from), c.cmp,
                                                         static_cast<int32_t>(c.value), "test_cmp_i32");
  results[2 * i] = ok64 ? 1 : 0;
  results[2 * i + 1] = ok32 ? 1 : 0;
}

TEST_P(DeviceSignalTest, WaitUntilReturnsAtOnceForSatisfiedComparisonsLocalAndRemote) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const auto& cases = satisfied_cases();
        const int count = static_cast<int>(cases.size());
        auto* u64_words = ctx.empty<uint64_t>(count);
        auto* i32_words = ctx.empty<int32_t>(count);
        std::vector<uint64_t> u64(count);
        std::vector<int32_t> i32(count);
        for (int i = 0; i < count; ++i) {
          u64[i] = static_cast<uint64_t>(cases[i].observed);
          i32[i] = static_cast<int32_t>(cases[i].observed);
        }
        test::copy_to_device(ctx.stream(), u64_words, u64);
        test::copy_to_device(ctx.stream(), i32_words, i32);
        test::DeviceBuffer<CmpCase> dev_cases(count);
        test::copy_to_device(ctx.stream(), dev_cases.get(), cases);
        test::DeviceBuffer<int> results(2 * count);
        ctx.barrier();  // every rank's words are set
        for (int from = 0; from < ctx.world_size(); ++from) {
          test::fill_bytes(ctx.stream(), results.get(), 0x7f, results.size());
          wait_cases_kernel<<<1, 32, 0, ctx.stream()>>>(ctx.device_context(), u64_words, i32_words, dev_cases.get(),
                                                        count, from, results.get());
          IRIS_CUDA_CHECK_LAUNCH();
          ctx.synchronize();  // would throw TimeoutError if a satisfied wait did not return
          auto got = test::copy_to_host(ctx.stream(), results.get(), results.size());
          for (int i = 0; i < count; ++i) {
            EXPECT_EQ(got[2 * i], 1) << "uint64 case " << i << " on rank " << from;
            EXPECT_EQ(got[2 * i + 1], 1) << "int32 case " << i << " on rank " << from;
          }
        }
        ctx.barrier();
        ctx.free(i32_words);
        ctx.free(u64_words);
      },
      test::device_test_options());
}

// Every comparison on every flag type, decided as a host reference spells it out: each pair of some values
// that sit at the edges of the type (0, 1, 7, the signed maximum and minimum and their neighbours, -3, all
// ones), plus, for kReached, observed = value + d for d at the half-range edge (value + 2^(bits-1) - 1 has
// reached value; value + 2^(bits-1) has not, nor has value - 1). One thread per case waits on a peer's
// word (words that never change): a case that holds must return true (at its first poll), one that does
// not must give up at the bound and return false, all at once, so one kernel per type takes one bound. The
// types take different orders and scopes, so the relaxed polling loop and the CTA scope run too.
constexpr auto kCmpBound = std::chrono::milliseconds(200);

template <typename T>
struct TypedCmpCase {
  T observed;
  Cmp cmp;
  T value;
};

// The host's reading of `observed cmp value` on a word of T (bits of T; signed T compares signed).
template <typename T>
bool host_holds(T observed, Cmp cmp, T value) {
  using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  const Wide o = static_cast<Wide>(observed), v = static_cast<Wide>(value);
  constexpr int kBits = sizeof(T) * 8;
  const uint64_t mask = kBits == 64 ? ~uint64_t{0} : (uint64_t{1} << kBits) - 1;
  switch (cmp) {
    case Cmp::kEq:
      return o == v;
    case Cmp::kNe:
      return o != v;
    case Cmp::kGe:
      return o >= v;
    case Cmp::kGt:
      return o > v;
    case Cmp::kLe:
      return o <= v;
    case Cmp::kLt:
      return o < v;
    case Cmp::kReached:  // observed is value plus less than half the range, modulo 2^bits
      return ((static_cast<uint64_t>(observed) - static_cast<uint64_t>(value)) & mask) < (uint64_t{1} << (kBits - 1));
  }
  return false;
}

template <typename T>
std::vector<TypedCmpCase<T>> cmp_matrix() {
  using U = std::make_unsigned_t<T>;
  constexpr U kHalf = U{1} << (sizeof(T) * 8 - 1);
  const std::vector<U> edges = {
      0, 1, 7, kHalf - 3, kHalf - 1, kHalf, kHalf + 5, static_cast<U>(-3), static_cast<U>(-1)};
  const Cmp cmps[] = {Cmp::kEq, Cmp::kNe, Cmp::kGe, Cmp::kGt, Cmp::kLe, Cmp::kLt, Cmp::kReached};
  std::vector<TypedCmpCase<T>> cases;
  for (U o : edges)
    for (U v : edges)
      for (Cmp c : cmps) cases.push_back({static_cast<T>(o), c, static_cast<T>(v)});
  for (U v : edges)
    for (U d : {U{0}, static_cast<U>(kHalf - 1), kHalf, static_cast<U>(-1)})
      cases.push_back({static_cast<T>(static_cast<U>(v + d)), Cmp::kReached, static_cast<T>(v)});
  return cases;
}

template <typename T, Order kOrder, Scope kScope>
__global__ void cmp_matrix_kernel(DeviceContext ctx, const T* words, const TypedCmpCase<T>* cases, int count, int from,
                                  int* results) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  results[i] = dev::wait_until<kOrder, kScope>(ctx, dev::translate(ctx, words + i, from), cases[i].cmp, cases[i].value,
                                               "test_cmp_matrix")
                   ? 1
                   : 0;
}

// Runs T's matrix against rank `from`'s words; returns how many cases disagree with the host (reported).
template <typename T, Order kOrder, Scope kScope>
int check_cmp_matrix(Context& ctx, const char* type_name) {
  const auto cases = cmp_matrix<T>();
  const int count = static_cast<int>(cases.size()), from = (ctx.rank() + 1) % ctx.world_size();
  std::vector<T> observed(count);
  std::vector<int> want(count);  // 1 where the comparison holds, as the host decides it
  int want_false = 0;
  for (int i = 0; i < count; ++i) {
    observed[i] = cases[i].observed;
    want[i] = host_holds(cases[i].observed, cases[i].cmp, cases[i].value) ? 1 : 0;
    want_false += 1 - want[i];
  }
  T* words = ctx.empty<T>(count);
  test::copy_to_device(ctx.stream(), words, observed);
  test::DeviceBuffer<TypedCmpCase<T>> dev_cases(count);
  test::copy_to_device(ctx.stream(), dev_cases.get(), cases);
  test::DeviceBuffer<int> results(count);
  test::fill_bytes(ctx.stream(), results.get(), 0x7f, count);
  ctx.barrier();  // every rank's words are set before a peer reads them
  cmp_matrix_kernel<T, kOrder, kScope><<<(count + 127) / 128, 128, 0, ctx.stream()>>>(
      ctx.device_context(), words, dev_cases.get(), count, from, results.get());
  IRIS_CUDA_CHECK_LAUNCH();
  if (want_false > 0)
    EXPECT_THROW(ctx.synchronize(), TimeoutError) << type_name << ": " << want_false << " waits must give up";
  else
    ctx.synchronize();
  const auto got = test::copy_to_host(ctx.stream(), results.get(), count);
  int wrong = 0;
  for (int i = 0; i < count; ++i) {
    if (got[i] == want[i]) continue;
    if (++wrong <= 5)
      ADD_FAILURE() << type_name << ": wait_until(" << +cases[i].observed << " " << static_cast<int>(cases[i].cmp)
                    << " " << +cases[i].value << ") returned " << got[i] << ", want " << want[i] << " (Cmp as its enum "
                    << "value; case " << i << ", rank " << from << "'s word)";
  }
  ctx.barrier();  // every rank's waits are over before the words are freed
  ctx.free(words);
  return wrong;
}

TEST_P(DeviceSignalTest, WaitUntilDecidesEveryComparisonOnEveryFlagTypeAsTheHostDoes) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        EXPECT_EQ((check_cmp_matrix<int32_t, Order::kAcquire, Scope::kSys>(ctx, "int32")), 0);
        EXPECT_EQ((check_cmp_matrix<uint32_t, Order::kRelaxed, Scope::kCta>(ctx, "uint32")), 0);
        EXPECT_EQ((check_cmp_matrix<int64_t, Order::kRelaxed, Scope::kGpu>(ctx, "int64")), 0);
        EXPECT_EQ((check_cmp_matrix<uint64_t, Order::kAcquire, Scope::kGpu>(ctx, "uint64")), 0);
      },
      test::device_test_options(kCmpBound));
}

// ---- producer -> consumer messages ---------------------------------------------------------------

constexpr int kSlots = 4;  // ring depth: the producer runs at most kSlots messages ahead

// P: the payload's element type; F: the flags' type.
template <typename P, typename F>
struct MessageRing {
  P* payload;  // heap [kSlots][n]: written by the left neighbour
  F* ready;    // heap [kSlots]: generation (message index + 1) in each slot, released by the left neighbour
  F* acked;    // heap [1]: messages the right neighbour has consumed, released by it
  P* staging;  // local [kSlots][n]: the producer's source buffer
  unsigned long long* counts;  // local [3]: wrong payload words, wrong ready values, messages received
};

template <typename P>
__host__ __device__ inline P message_word(int sender, uint64_t k, size_t i) {
  return static_cast<P>(test::mix64(0x5157ull + static_cast<uint64_t>(sender), k, i));
}

template <typename Group>
__device__ void group_sync() {
  if constexpr (std::is_same_v<Group, dev::ThisWarp>) __syncwarp();
  if constexpr (std::is_same_v<Group, dev::ThisBlock>) __syncthreads();
}

// True on every thread of the group when `ok` is true on every thread; also orders the group's
// memory accesses (a vote alone does not, hence the __syncwarp).
template <typename Group>
__device__ bool group_all(bool ok) {
  if constexpr (std::is_same_v<Group, dev::ThisWarp>) {
    ok = __all_sync(0xffffffffu, ok);
    __syncwarp();
    return ok;
  } else if constexpr (std::is_same_v<Group, dev::ThisBlock>) {
    return __syncthreads_and(ok) != 0;
  } else {
    return ok;
  }
}

template <typename Group, Scope kScope, typename P, typename F>
__device__ void put_signal(const DeviceContext& ctx, P* dst, const P* src, size_t n, F* flag, F value, int to) {
  if constexpr (std::is_same_v<Group, dev::ThisThread>) {
    dev::put_thread_signal_release<kScope>(ctx, dst, src, n, flag, value, to);
  } else if constexpr (std::is_same_v<Group, dev::ThisWarp>) {
    dev::put_warp_signal_release<kScope>(ctx, dst, src, n, flag, value, to);
  } else {
    dev::put_block_signal_release<kScope>(ctx, dst, src, n, flag, value, to);
  }
}

// Block 0 sends `messages` messages to the right neighbour; block 1 receives as many from the left
// (with one rank, both are this rank). One group (a thread, a warp or a block) per side. kScope: the
// put-and-signal's release (kGpu only where both ends are this GPU: one rank).
template <typename Group, Scope kScope, typename P, typename F>
__global__ void message_kernel(DeviceContext ctx, MessageRing<P, F> ring, int n, int messages) {
  const int world = ctx.world_size, me = ctx.rank;
  const int right = (me + 1) % world, left = (me + world - 1) % world;
  const uint32_t t = Group::index(), size = Group::size();
  const bool leader = t == 0;
  if (blockIdx.x == 0) {
    for (int k = 0; k < messages; ++k) {
      const int slot = k % kSlots;
      if (k >= kSlots) {
        // Slot reuse: the consumer has finished reading message k - kSlots (rule 4).
        bool ok = true;
        if (leader)
          ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, ring.acked, Cmp::kReached,
                                                             static_cast<F>(k - kSlots + 1), "test_producer");
        if (!group_all<Group>(ok)) return;
      }
      P* stage = ring.staging + static_cast<size_t>(slot) * n;
      for (int i = t; i < n; i += size) stage[i] = message_word<P>(me, k, i);
      group_sync<Group>();  // the whole message is staged before the group copies it
      put_signal<Group, kScope>(ctx, ring.payload + static_cast<size_t>(slot) * n, stage, n, ring.ready + slot,
                                static_cast<F>(k + 1), right);
    }
  } else {
    for (int k = 0; k < messages; ++k) {
      const int slot = k % kSlots;
      bool ok = true;
      if (leader) {
        ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, ring.ready + slot, Cmp::kReached, static_cast<F>(k + 1),
                                                           "test_consumer");
        // The producer cannot be a full ring ahead, so the slot holds exactly this generation.
        if (ok && dev::load<Order::kRelaxed, Scope::kSys>(ring.ready + slot) != static_cast<F>(k + 1))
          atomicAdd(&ring.counts[1], 1ull);
      }
      if (!group_all<Group>(ok)) return;
      const P* msg = ring.payload + static_cast<size_t>(slot) * n;
      unsigned long long bad = 0;
      for (int i = t; i < n; i += size) bad += dev::load(msg + i) != message_word<P>(left, k, i) ? 1 : 0;
      if (bad != 0) atomicAdd(&ring.counts[0], bad);
      group_sync<Group>();  // every read of the slot is done before it is handed back
      if (leader) {
        dev::signal<Order::kRelease, Scope::kSys>(ctx, ring.acked, static_cast<F>(k + 1), left);
        atomicAdd(&ring.counts[2], 1ull);
      }
    }
  }
}

template <typename Group, typename P = uint64_t, typename F = uint64_t, Scope kScope = Scope::kSys>
void run_messages(Context& ctx, int threads, int n, int messages, const char* form) {
  const int me = ctx.rank();
  auto* payload = ctx.empty<P>(static_cast<size_t>(kSlots) * n);
  auto* flags = ctx.zeros<F>(kSlots + 1);
  test::fill_bytes(ctx.stream(), payload, 0xFF, static_cast<size_t>(kSlots) * n);  // poison
  test::DeviceBuffer<P> staging(static_cast<size_t>(kSlots) * n);
  test::DeviceBuffer<unsigned long long> counts(3);
  test::fill_bytes(ctx.stream(), counts.get(), 0, 3);
  MessageRing<P, F> ring{payload, flags, flags + kSlots, staging.get(), counts.get()};
  ctx.barrier();  // every ring is reset before any producer starts
  message_kernel<Group, kScope, P, F><<<2, threads, 0, ctx.stream()>>>(ctx.device_context(), ring, n, messages);
  IRIS_CUDA_CHECK_LAUNCH();
  ctx.synchronize();  // a lost message shows up as a TimeoutError here
  ctx.barrier();      // the right neighbour's last acknowledgement has landed
  auto got = test::copy_to_host(ctx.stream(), counts.get(), 3);
  EXPECT_EQ(got[0], 0u) << form << " on rank " << me << ": payload words wrong (stale or torn messages)";
  EXPECT_EQ(got[1], 0u) << form << " on rank " << me << ": ready flags skipped a generation";
  EXPECT_EQ(got[2], static_cast<unsigned long long>(messages)) << form << " on rank " << me << ": messages received";
  auto final_flags = test::copy_to_host(ctx.stream(), flags, kSlots + 1);
  for (int s = 0; s < kSlots; ++s) {
    const int last = ((messages - 1 - s) / kSlots) * kSlots + s;  // last message that used slot s
    EXPECT_EQ(final_flags[s], static_cast<F>(last + 1)) << form << ": slot " << s << " on rank " << me;
  }
  EXPECT_EQ(final_flags[kSlots], static_cast<F>(messages)) << form << ": acknowledgements on rank " << me;
  ctx.free(flags);
  ctx.free(payload);
}

TEST_P(DeviceSignalTest, TenThousandMessagesThroughARemoteFlagNoneLostDuplicatedOrStale) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        run_messages<dev::ThisBlock>(ctx, 256, 512, 10000, "put_block_signal_release");  // 4 KiB messages
        run_messages<dev::ThisWarp>(ctx, 32, 96, 10000, "put_warp_signal_release");
        run_messages<dev::ThisThread>(ctx, 1, 5, 10000, "put_thread_signal_release");
      },
      test::device_test_options());
}

// The same ring with every other flag type (kReached over 32-bit and signed generations) and narrow payloads of
// odd lengths (byte and half-word copies with ragged tails), and, where both ends are one GPU, the
// put-and-signal's release at GPU scope.
TEST_P(DeviceSignalTest, MessagesWithEveryFlagTypeNarrowPayloadsAndGpuScopeReleases) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        run_messages<dev::ThisBlock, uint8_t, uint32_t>(ctx, 256, 1001, 2000, "put_block_signal_release, uint32 flags");
        run_messages<dev::ThisWarp, uint16_t, int32_t>(ctx, 32, 97, 2000, "put_warp_signal_release, int32 flags");
        run_messages<dev::ThisThread, uint32_t, int64_t>(ctx, 1, 7, 2000, "put_thread_signal_release, int64 flags");
        if (ctx.world_size() == 1) {
          run_messages<dev::ThisBlock, uint64_t, uint64_t, Scope::kGpu>(ctx, 256, 512, 2000,
                                                                        "put_block_signal_release<kGpu>");
          run_messages<dev::ThisWarp, uint64_t, uint32_t, Scope::kGpu>(ctx, 32, 96, 2000,
                                                                       "put_warp_signal_release<kGpu>");
          run_messages<dev::ThisThread, uint16_t, int32_t, Scope::kGpu>(ctx, 1, 5, 2000,
                                                                        "put_thread_signal_release<kGpu>");
        }
      },
      test::device_test_options());
}

// ---- every warp of a block its own put-and-signal -------------------------------------------------

constexpr int kWarpsPerBlock = 4;

__host__ __device__ inline uint64_t warp_message_word(int sender, int round, int warp, int i) {
  return test::mix64(0x3A7Bull + static_cast<uint64_t>(sender), round, warp, i);
}

// Block 0's warp w stages and sends its own message of n words to the right neighbour (payload[w], with
// put_warp_signal_release on ready[w]); block 1's warp w waits for ready[w] from the left and checks
// payload[w]. Both blocks are 8x4x4 threads, so a warp spans rows and planes. payload: heap [warps][n];
// ready: heap [warps]; staging: local [warps][n]; counts: local [2], wrong words and messages received.
__global__ void warp_messages_kernel(DeviceContext ctx, uint64_t* payload, uint64_t* ready, uint64_t* staging, int n,
                                     int round, unsigned long long* counts) {
  const int world = ctx.world_size, me = ctx.rank;
  const int right = (me + 1) % world, left = (me + world - 1) % world;
  const int warp = static_cast<int>(dev::ThisBlock::index() / 32), lane = static_cast<int>(dev::ThisWarp::index());
  uint64_t* const mine = payload + static_cast<size_t>(warp) * n;
  if (blockIdx.x == 0) {
    uint64_t* const stage = staging + static_cast<size_t>(warp) * n;
    for (int i = lane; i < n; i += 32) stage[i] = warp_message_word(me, round, warp, i);
    __syncwarp();  // the warp's message is staged before the warp copies it
    dev::put_warp_signal_release<Scope::kSys>(ctx, mine, stage, n, ready + warp, static_cast<uint64_t>(round), right);
    return;
  }
  bool ok = true;
  if (lane == 0)
    ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, ready + warp, Cmp::kEq, static_cast<uint64_t>(round),
                                                       "test_warp_consumer");
  if (!group_all<dev::ThisWarp>(ok)) return;  // also orders lane 0's acquire before the other lanes' reads
  unsigned long long bad = 0;
  for (int i = lane; i < n; i += 32) bad += dev::load(mine + i) != warp_message_word(left, round, warp, i) ? 1 : 0;
  if (bad != 0) atomicAdd(&counts[0], bad);
  if (lane == 0) atomicAdd(&counts[1], 1ull);
}

// put_warp_signal_release in a block of several warps: each warp's lane 0 signals its own warp's message,
// once that warp's stores are done (the message test above runs one warp per block, where a warp index
// taken from the block's thread index would go unnoticed). 77 words: a tail of lanes without a full word.
TEST_P(DeviceSignalTest, EveryWarpOfABlockSignalsItsOwnMessage) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        constexpr int kWords = 77, kRounds = 25;
        const int me = ctx.rank();
        auto* payload = ctx.empty<uint64_t>(static_cast<size_t>(kWarpsPerBlock) * kWords);
        auto* ready = ctx.zeros<uint64_t>(kWarpsPerBlock);
        test::DeviceBuffer<uint64_t> staging(static_cast<size_t>(kWarpsPerBlock) * kWords);
        test::DeviceBuffer<unsigned long long> counts(2);
        test::fill_bytes(ctx.stream(), counts.get(), 0, 2);
        for (int round = 1; round <= kRounds; ++round) {
          test::fill_bytes(ctx.stream(), payload, 0xFF, static_cast<size_t>(kWarpsPerBlock) * kWords);  // poison
          ctx.barrier();  // every payload is poisoned, and the last round's consumers are done, before any sends
          warp_messages_kernel<<<2, dim3(8, 4, 4), 0, ctx.stream()>>>(ctx.device_context(), payload, ready,
                                                                      staging.get(), kWords, round, counts.get());
          IRIS_CUDA_CHECK_LAUNCH();
          ctx.synchronize();  // a warp that never signalled shows up as a TimeoutError here
        }
        auto got = test::copy_to_host(ctx.stream(), counts.get(), 2);
        EXPECT_EQ(got[0], 0u) << "rank " << me << ": payload words wrong (stale, torn or another warp's)";
        EXPECT_EQ(got[1], static_cast<unsigned long long>(kWarpsPerBlock) * kRounds)
            << "rank " << me << ": messages received";
        ctx.barrier();  // the left neighbour's last message has landed before the heap is freed
        ctx.free(ready);
        ctx.free(payload);
      },
      test::device_test_options());
}

// ---- many-to-one: release add ------------------------------------------------------------------

constexpr int kFanInBlocks = 4;

__host__ __device__ inline uint32_t fan_in_word(int sender, int block, int round, int i) {
  return static_cast<uint32_t>(test::mix64(sender, block, round, i));
}

// Blocks [0, kFanInBlocks) of every rank write a piece of every round into every rank's heap and count
// it with signal_add (release) on that round's counter; the last block of each rank waits for all
// W * kFanInBlocks pieces of a round (acquire) and checks them. data: heap [rounds][W][kFanInBlocks][n];
// counters: heap [rounds] of C (one per round: producers run ahead of each other by any number of rounds).
// olds: local [rounds][W][kFanInBlocks], what signal_add returned for each piece's count on each rank.
template <typename C>
__global__ void fan_in_kernel(DeviceContext ctx, uint32_t* data, C* counters, C* olds, unsigned long long* wrong,
                              int rounds, int n) {
  const int world = ctx.world_size, me = ctx.rank;
  const int b = blockIdx.x;
  if (b < kFanInBlocks) {
    for (int round = 0; round < rounds; ++round) {
      uint32_t* piece = data + ((static_cast<size_t>(round) * world + me) * kFanInBlocks + b) * n;
      for (int to = 0; to < world; ++to)
        for (int i = threadIdx.x; i < n; i += blockDim.x) dev::store(ctx, piece + i, fan_in_word(me, b, round, i), to);
      __syncthreads();  // the block's writes happen before thread 0's releases
      if (threadIdx.x == 0)
        for (int to = 0; to < world; ++to)
          olds[(static_cast<size_t>(round) * world + to) * kFanInBlocks + b] =
              dev::signal_add<Order::kRelease, Scope::kSys>(ctx, counters + round, C{1}, to);
    }
  } else {
    for (int round = 0; round < rounds; ++round) {
      bool ok = true;
      if (threadIdx.x == 0)
        ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, counters + round, Cmp::kEq,
                                                           static_cast<C>(world * kFanInBlocks), "test_fan_in");
      if (!__syncthreads_and(ok)) return;
      for (int s = 0; s < world; ++s)
        for (int pb = 0; pb < kFanInBlocks; ++pb) {
          const uint32_t* piece = data + ((static_cast<size_t>(round) * world + s) * kFanInBlocks + pb) * n;
          for (int i = threadIdx.x; i < n; i += blockDim.x)
            if (piece[i] != fan_in_word(s, pb, round, i)) atomicAdd(wrong, 1ull);
        }
    }
  }
}

// Every piece's data arrives with its count, and the counts' returned old values are, for each round and
// rank, exactly 0 .. W * kFanInBlocks - 1 (each add saw every earlier one, none twice).
template <typename C>
void check_fan_in(Context& ctx, const char* type_name) {
  const int world = ctx.world_size(), me = ctx.rank(), rounds = 64, n = 256;
  const size_t words = static_cast<size_t>(rounds) * world * kFanInBlocks * n;
  const size_t old_count = static_cast<size_t>(rounds) * world * kFanInBlocks;
  auto* data = ctx.full<uint32_t>(words, 0xDEADBEEFu);  // poisoned
  auto* counters = ctx.zeros<C>(rounds);
  test::DeviceBuffer<C> olds(old_count);
  test::fill_bytes(ctx.stream(), olds.get(), 0x7f, old_count);
  test::DeviceBuffer<unsigned long long> wrong(1);
  test::fill_bytes(ctx.stream(), wrong.get(), 0, 1);
  ctx.barrier();
  fan_in_kernel<C><<<kFanInBlocks + 1, 256, 0, ctx.stream()>>>(ctx.device_context(), data, counters, olds.get(),
                                                               wrong.get(), rounds, n);
  IRIS_CUDA_CHECK_LAUNCH();
  ctx.synchronize();
  ctx.barrier();
  EXPECT_EQ(test::copy_to_host(ctx.stream(), wrong.get(), 1)[0], 0u) << type_name << ", rank " << me;
  for (C c : test::copy_to_host(ctx.stream(), counters, rounds))
    EXPECT_EQ(c, static_cast<C>(world * kFanInBlocks)) << type_name << ", rank " << me;
  const auto all = test::allgather_vector(ctx, test::copy_to_host(ctx.stream(), olds.get(), old_count));
  int bad_rounds = 0;
  for (int round = 0; round < rounds; ++round) {  // the adds on this rank's counter of the round
    std::vector<int> seen(world * kFanInBlocks, 0);
    bool ok = true;
    for (int s = 0; s < world; ++s)
      for (int pb = 0; pb < kFanInBlocks; ++pb) {
        const int64_t old = static_cast<int64_t>(all[s][(static_cast<size_t>(round) * world + me) * kFanInBlocks + pb]);
        if (old < 0 || old >= world * kFanInBlocks || seen[old]++ != 0) ok = false;
      }
    bad_rounds += ok ? 0 : 1;
  }
  EXPECT_EQ(bad_rounds, 0) << type_name << ", rank " << me
                           << ": signal_add's returned values are not each earlier count once";
  ctx.barrier();
  ctx.free(counters);
  ctx.free(data);
}

TEST_P(DeviceSignalTest, ReleaseAddFromEveryRankPublishesTheirData) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        check_fan_in<uint64_t>(ctx, "uint64 counters");
        check_fan_in<int32_t>(ctx, "int32 counters");
      },
      test::device_test_options());
}

INSTANTIATE_TEST_SUITE_P(DeviceRanks, DeviceSignalTest, ::testing::ValuesIn(test::any_world_rank_setups()),
                         test::rank_setup_name);

}  // namespace
}  // namespace iris
