// GPU tests of iris/device/memory.cuh: translate and rank_of, plain and atomic scalar loads and
// stores of every type (and 16-byte vectors), and the thread/warp/block/grid bulk copy, put and get,
// local and remote, aligned and not. 1 and 2 ranks (more with IRIS_TEST_MAX_RANKS), threads and
// processes. Outputs are poisoned before every run; inputs are random and known to every rank.
#include <gtest/gtest.h>

#include <cuda_fp16.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/device.cuh"
#include "support/ranks.hpp"
#include "test_device_util.cuh"

namespace iris {
namespace {

namespace dev = iris::device;
using dev::Order;
using dev::Scope;
using test::RankSetup;

class DeviceMemoryTest : public ::testing::TestWithParam<RankSetup> {};

// ---- translate -----------------------------------------------------------------------------------

__global__ void translate_kernel(DeviceContext ctx, char* heap_ptr, const char* outside, int64_t* out) {
  const int world = ctx.world_size;
  for (int to = 0; to < world; ++to) {
    char* p = dev::translate(ctx, heap_ptr, to);
    out[to] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p));
    out[world + to] = dev::rank_of(ctx, p);
    const char* cp = dev::translate(ctx, static_cast<const char*>(heap_ptr), to);  // const pointers too
    out[2 * world + to] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(cp));
  }
  out[3 * world + 0] = dev::rank_of(ctx, outside);
  out[3 * world + 1] = dev::rank_of(ctx, ctx.heap_base + ctx.heap_size * world);  // one past the window
  out[3 * world + 2] = dev::rank_of(ctx, ctx.heap_base + ctx.heap_size * world - 1);
  out[3 * world + 3] = dev::rank_of(ctx, ctx.heap_base - 1);
  out[3 * world + 4] = dev::is_local_heap(ctx, heap_ptr) ? 1 : 0;
}

TEST_P(DeviceMemoryTest, TranslateAndRankOfMatchTheHost) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size();
        char* block = ctx.empty<char>(1 << 16);
        char* inside = block + 12345;  // not the start of an allocation
        test::DeviceBuffer<char> outside(64);
        test::DeviceBuffer<int64_t> out(3 * world + 5);
        test::fill_bytes(ctx.stream(), out.get(), 0x7f, out.size());
        translate_kernel<<<1, 1, 0, ctx.stream()>>>(ctx.device_context(), inside, outside.get(), out.get());
        IRIS_CUDA_CHECK_LAUNCH();
        ctx.synchronize();
        auto got = test::copy_to_host(ctx.stream(), out.get(), out.size());
        for (int to = 0; to < world; ++to) {
          EXPECT_EQ(got[to], static_cast<int64_t>(reinterpret_cast<uintptr_t>(ctx.translate(inside, to))))
              << "to " << to;
          EXPECT_EQ(got[to],
                    static_cast<int64_t>(reinterpret_cast<uintptr_t>(ctx.heap_base(to) + ctx.offset_of(inside))));
          EXPECT_EQ(got[world + to], to);
          EXPECT_EQ(got[2 * world + to], got[to]);
        }
        EXPECT_EQ(got[3 * world + 0], -1) << "cudaMalloc'd memory is outside the symmetric window";
        EXPECT_EQ(got[3 * world + 1], -1);
        EXPECT_EQ(got[3 * world + 2], world - 1);
        EXPECT_EQ(got[3 * world + 3], -1);
        EXPECT_EQ(got[3 * world + 4], 1);
        ctx.barrier();
        ctx.free(block);
      },
      test::device_test_options());
}

// ---- scalar and 16-byte loads and stores ----------------------------------------------------------

struct alignas(16) Packed16 {
  uint16_t h[8];
};

// n random values of T for `rank`, as bytes (finite floats; random bits otherwise).
template <typename T>
std::vector<unsigned char> random_values(int rank, size_t n, uint64_t salt) {
  std::vector<unsigned char> out(n * sizeof(T));
  for (size_t i = 0; i < n; ++i) {
    T v;
    if constexpr (std::is_floating_point_v<T>) {
      // Finite values with varied exponents and signs.
      double u = static_cast<double>(test::mix64(salt, rank, i) >> 11) * 0x1.0p-53;
      v = static_cast<T>((u - 0.5) * 2e6 / (1 + (i % 7) * 1000.0));
    } else {
      unsigned char bytes[sizeof(T)];
      for (size_t b = 0; b < sizeof(T); b += 8) {
        uint64_t w = test::mix64(salt, rank, i, b);
        std::memcpy(bytes + b, &w, sizeof(T) - b < 8 ? sizeof(T) - b : 8);
      }
      std::memcpy(&v, bytes, sizeof(T));
    }
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
  return out;
}

struct WeakAccess {
  static constexpr const char* kName = "plain";
  template <typename T>
  __device__ static T load(const DeviceContext& ctx, const T* p, int from) {
    return dev::load(ctx, p, from);
  }
  template <typename T>
  __device__ static void store(const DeviceContext& ctx, T* p, const T& v, int to) {
    dev::store(ctx, p, v, to);
  }
};

// Raw-pointer forms after an explicit translate.
struct WeakRawAccess {
  static constexpr const char* kName = "plain raw";
  template <typename T>
  __device__ static T load(const DeviceContext& ctx, const T* p, int from) {
    return dev::load(dev::translate(ctx, p, from));
  }
  template <typename T>
  __device__ static void store(const DeviceContext& ctx, T* p, const T& v, int to) {
    dev::store(dev::translate(ctx, p, to), v);
  }
};

template <Order kLoad, Order kStore, Scope kScope>
struct AtomicAccess {
  static constexpr const char* kName = "atomic";
  template <typename T>
  __device__ static T load(const DeviceContext& ctx, const T* p, int from) {
    return dev::load<kLoad, kScope>(ctx, p, from);
  }
  template <typename T>
  __device__ static void store(const DeviceContext& ctx, T* p, const T& v, int to) {
    dev::store<kStore, kScope>(ctx, p, v, to);
  }
};

struct SysShorthandAccess {
  static constexpr const char* kName = "load_acquire_sys/store_release_sys";
  template <typename T>
  __device__ static T load(const DeviceContext& ctx, const T* p, int from) {
    return dev::load_acquire_sys(dev::translate(ctx, p, from));
  }
  template <typename T>
  __device__ static void store(const DeviceContext& ctx, T* p, const T& v, int to) {
    dev::store_release_sys(dev::translate(ctx, p, to), v);
  }
};

// Rank r stores values[to * n, (to + 1) * n) into slot r of rank `to`'s `slots`, for every rank (its own
// included): values of its own for each destination, so that a store that reaches another rank than `to`
// (or a load that reads another than `from`) leaves values that the check tells apart.
template <typename T, typename Access>
__global__ void store_everywhere(DeviceContext ctx, T* slots, const T* values, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    for (int to = 0; to < ctx.world_size; ++to)
      Access::store(ctx, slots + ctx.rank * n + i, values[static_cast<int64_t>(to) * n + i], to);
}

// out[(from * W + writer) * n + i] = slot `writer` of rank `from`'s `slots`, element i.
template <typename T, typename Access>
__global__ void load_everywhere(DeviceContext ctx, const T* slots, T* out, int n) {
  const int world = ctx.world_size;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    for (int from = 0; from < world; ++from)
      for (int w = 0; w < world; ++w) out[(from * world + w) * n + i] = Access::load(ctx, slots + w * n + i, from);
}

// The typed parts of one (type, access) check; the host logic below is shared by all of them.
struct LoadStoreKernels {
  size_t elem_size;
  std::vector<unsigned char> (*values)(int rank, size_t n, uint64_t salt);
  void (*store)(cudaStream_t, DeviceContext, void* slots, const void* values, int n);
  void (*load)(cudaStream_t, DeviceContext, const void* slots, void* out, int n);
};

template <typename T, typename Access>
LoadStoreKernels load_store_kernels() {
  return LoadStoreKernels{sizeof(T), &random_values<T>,
                          [](cudaStream_t stream, DeviceContext ctx, void* slots, const void* values, int n) {
                            store_everywhere<T, Access>
                                <<<4, 128, 0, stream>>>(ctx, static_cast<T*>(slots), static_cast<const T*>(values), n);
                          },
                          [](cudaStream_t stream, DeviceContext ctx, const void* slots, void* out, int n) {
                            load_everywhere<T, Access>
                                <<<4, 128, 0, stream>>>(ctx, static_cast<const T*>(slots), static_cast<T*>(out), n);
                          }};
}

void check_load_store(Context& ctx, const LoadStoreKernels& k, const char* type_name, const char* access_name,
                      uint64_t salt) {
  const int world = ctx.world_size(), me = ctx.rank();
  const int n = 1003;
  const size_t e = k.elem_size;
  auto* slots = static_cast<unsigned char*>(ctx.alloc(static_cast<size_t>(world) * n * e));
  test::fill_bytes(ctx.stream(), slots, 0xA5, static_cast<size_t>(world) * n * e);
  // What writer w stores into rank `to`: values of their own for each (writer, destination) pair. (Before
  // 2026-12-06 a writer stored the same values into every rank, so that a load that read its own rank
  // whatever `from` said, or stores that swapped destinations, passed: a test audit's finding.)
  auto pair_values = [&](int writer, int to) { return k.values(writer * world + to, n, salt); };
  std::vector<unsigned char> mine;
  for (int to = 0; to < world; ++to) {
    const auto v = pair_values(me, to);
    mine.insert(mine.end(), v.begin(), v.end());
  }
  test::DeviceBuffer<unsigned char> values(static_cast<size_t>(world) * n * e);
  test::copy_to_device(ctx.stream(), values.get(), mine);
  test::DeviceBuffer<unsigned char> out(static_cast<size_t>(world) * world * n * e);
  test::fill_bytes(ctx.stream(), out.get(), 0x5A, out.size());
  ctx.barrier();  // every rank poisoned its slots before anyone stores
  k.store(ctx.stream(), ctx.device_context(), slots, values.get(), n);
  IRIS_CUDA_CHECK_LAUNCH();
  ctx.barrier();  // every rank's stores are complete
  k.load(ctx.stream(), ctx.device_context(), slots, out.get(), n);
  IRIS_CUDA_CHECK_LAUNCH();
  ctx.synchronize();
  auto got = test::copy_to_host(ctx.stream(), out.get(), out.size());
  size_t wrong = 0;
  std::string first;
  for (int w = 0; w < world; ++w)
    for (int from = 0; from < world; ++from) {
      const auto expected = pair_values(w, from);  // what writer w stored into rank `from`
      for (int i = 0; i < n; ++i)
        if (std::memcmp(&got[((static_cast<size_t>(from) * world + w) * n + i) * e], &expected[i * e], e) != 0) {
          if (wrong++ == 0)
            first = "from rank " + std::to_string(from) + ", writer " + std::to_string(w) + ", element " +
                    std::to_string(i);
        }
    }
  EXPECT_EQ(wrong, 0u) << type_name << " " << access_name << " on rank " << me << ": first wrong " << first;
  ctx.barrier();  // nobody reads `slots` any more
  ctx.free(slots);
}

template <typename Access>
void check_atomic_word_types(Context& ctx, uint64_t salt) {
  check_load_store(ctx, load_store_kernels<int32_t, Access>(), "int32", Access::kName, salt + 1);
  check_load_store(ctx, load_store_kernels<uint32_t, Access>(), "uint32", Access::kName, salt + 2);
  check_load_store(ctx, load_store_kernels<int64_t, Access>(), "int64", Access::kName, salt + 3);
  check_load_store(ctx, load_store_kernels<uint64_t, Access>(), "uint64", Access::kName, salt + 4);
  check_load_store(ctx, load_store_kernels<float, Access>(), "float", Access::kName, salt + 5);
  check_load_store(ctx, load_store_kernels<double, Access>(), "double", Access::kName, salt + 6);
}

TEST_P(DeviceMemoryTest, PlainLoadStoreEveryTypeLocalAndRemote) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        for (int pass = 0; pass < 2; ++pass) {
          auto run = [&](auto access) {
            using A = decltype(access);
            check_atomic_word_types<A>(ctx, 100 + pass);
            check_load_store(ctx, load_store_kernels<uint8_t, A>(), "uint8", A::kName, 107 + pass);
            check_load_store(ctx, load_store_kernels<uint16_t, A>(), "uint16", A::kName, 108 + pass);
            check_load_store(ctx, load_store_kernels<__half, A>(), "half", A::kName, 109 + pass);
            check_load_store(ctx, load_store_kernels<uint4, A>(), "uint4", A::kName, 110 + pass);
            check_load_store(ctx, load_store_kernels<float4, A>(), "float4", A::kName, 111 + pass);
            check_load_store(ctx, load_store_kernels<double2, A>(), "double2", A::kName, 112 + pass);
            check_load_store(ctx, load_store_kernels<Packed16, A>(), "Packed16", A::kName, 113 + pass);
          };
          if (pass == 0)
            run(WeakAccess{});
          else
            run(WeakRawAccess{});
        }
      },
      test::device_test_options());
}

TEST_P(DeviceMemoryTest, AtomicLoadStoreEveryOrderAndScope) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        // Each scope with both load orders and both store orders.
        check_atomic_word_types<AtomicAccess<Order::kRelaxed, Order::kRelease, Scope::kCta>>(ctx, 200);
        check_atomic_word_types<AtomicAccess<Order::kAcquire, Order::kRelaxed, Scope::kCta>>(ctx, 210);
        check_atomic_word_types<AtomicAccess<Order::kRelaxed, Order::kRelease, Scope::kGpu>>(ctx, 220);
        check_atomic_word_types<AtomicAccess<Order::kAcquire, Order::kRelaxed, Scope::kGpu>>(ctx, 230);
        check_atomic_word_types<AtomicAccess<Order::kRelaxed, Order::kRelease, Scope::kSys>>(ctx, 240);
        check_atomic_word_types<AtomicAccess<Order::kAcquire, Order::kRelaxed, Scope::kSys>>(ctx, 250);
        check_atomic_word_types<SysShorthandAccess>(ctx, 260);
      },
      test::device_test_options());
}

// ---- bulk copy / put / get -----------------------------------------------------------------------

enum class Form { kThread, kWarp, kBlock, kGrid };
enum class Op { kPut, kGet, kCopy };

const char* form_name(Form f) {
  switch (f) {
    case Form::kThread:
      return "thread";
    case Form::kWarp:
      return "warp";
    case Form::kBlock:
      return "block";
    case Form::kGrid:
      return "grid";
  }
  return "?";
}
const char* op_name(Op o) { return o == Op::kPut ? "put" : o == Op::kGet ? "get" : "copy"; }

// put: src local -> dst in rank `a`.  get: src in rank `a` -> dst local.  copy: src in rank `a` -> dst in rank `b`.
template <typename T, Form kForm, Op kOp>
__global__ void bulk_kernel(DeviceContext ctx, T* dst, const T* src, size_t count, int a, int b) {
  if constexpr (kOp == Op::kPut) {
    if constexpr (kForm == Form::kThread) dev::put_thread(ctx, dst, src, count, a);
    if constexpr (kForm == Form::kWarp) dev::put_warp(ctx, dst, src, count, a);
    if constexpr (kForm == Form::kBlock) dev::put_block(ctx, dst, src, count, a);
    if constexpr (kForm == Form::kGrid) dev::put_grid(ctx, dst, src, count, a);
  } else if constexpr (kOp == Op::kGet) {
    if constexpr (kForm == Form::kThread) dev::get_thread(ctx, dst, src, count, a);
    if constexpr (kForm == Form::kWarp) dev::get_warp(ctx, dst, src, count, a);
    if constexpr (kForm == Form::kBlock) dev::get_block(ctx, dst, src, count, a);
    if constexpr (kForm == Form::kGrid) dev::get_grid(ctx, dst, src, count, a);
  } else {
    if constexpr (kForm == Form::kThread) dev::copy_thread(ctx, dst, b, src, a, count);
    if constexpr (kForm == Form::kWarp) dev::copy_warp(ctx, dst, b, src, a, count);
    if constexpr (kForm == Form::kBlock) dev::copy_block(ctx, dst, b, src, a, count);
    if constexpr (kForm == Form::kGrid) dev::copy_grid(ctx, dst, b, src, a, count);
  }
}

struct BulkCase {
  size_t bytes, dst_offset, src_offset;
};

// An element of three words of type W: its size is not a power of two, its alignment is W's.
template <typename W>
struct Odd {
  W w[3];
};

constexpr size_t kRegion = (size_t{1} << 20) + 4096;
constexpr unsigned char kPoison = 0xEE;

std::vector<unsigned char> source_bytes(int rank) {
  std::vector<unsigned char> v(kRegion);
  for (size_t i = 0; i < kRegion; i += 8) {
    uint64_t w = test::mix64(0xB01C, rank, i);
    std::memcpy(&v[i], &w, kRegion - i < 8 ? kRegion - i : 8);
  }
  return v;
}

using BulkLauncher = void (*)(Context&, unsigned char* dst, const unsigned char* src, size_t bytes, int a, int b);

template <typename T, Form kForm, Op kOp>
void launch_bulk(Context& ctx, unsigned char* dst, const unsigned char* src, size_t bytes, int a, int b) {
  // Multi-dimensional blocks and grids: the group forms linearize thread and block indices.
  const dim3 grid = kForm == Form::kGrid ? dim3(3, 2, 2) : dim3(1);
  const dim3 block = kForm == Form::kThread  ? dim3(1)
                     : kForm == Form::kWarp  ? dim3(8, 4)
                     : kForm == Form::kBlock ? dim3(16, 4, 4)
                                             : dim3(32, 2, 2);
  bulk_kernel<T, kForm, kOp><<<grid, block, 0, ctx.stream()>>>(
      ctx.device_context(), reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(src), bytes / sizeof(T), a, b);
}

// Runs every case through one (element type, form, op), with every shift of peers: put and get, in round k
// rank r uses rank (r + k) % W, so every rank's destination has exactly one writer per round and rounds
// cover local and remote. copy, which names two ranks, has one writer per round, and every rank checks its
// destination (poison where it is not the target). Writer k % W, with o = k + 1: in rounds [0, W) it copies
// from rank o into its own heap, in [W, 2W) from its own into rank o's, in [2W, 3W) from rank o's into rank
// o's (both ends in one peer's heap), and from 3 ranks on in [3W, 4W) from rank o's into rank o + 1's (neither
// end its own). (Before 2026-12-06 every rank copied at once from r + k into r + k + 1: at two ranks a copy
// with source and destination swapped left the same bytes everywhere; a test audit's finding. The last two
// kinds of rounds came on 2026-12-07, after another audit.)
void check_bulk(Context& ctx, BulkLauncher launch, size_t elem_size, Form form, Op op, unsigned char* dst_region,
                unsigned char* src_region, const std::vector<std::vector<unsigned char>>& sources,
                const std::vector<BulkCase>& cases) {
  const int world = ctx.world_size(), me = ctx.rank();
  for (const BulkCase& c : cases) {
    ASSERT_EQ(c.bytes % elem_size, 0u);
    ASSERT_LE(c.dst_offset + c.bytes + 256, kRegion);
    ASSERT_LE(c.src_offset + c.bytes, kRegion);
    const int rounds = op == Op::kCopy ? (world >= 3 ? 4 : 3) * world : world;
    for (int k = 0; k < rounds; ++k) {
      test::fill_bytes(ctx.stream(), dst_region, kPoison, kRegion);
      ctx.barrier();  // every destination is poisoned before anyone writes
      // copy: this round's writer, its source rank and its destination rank.
      const int writer = k % world, other = (k + 1) % world, phase = k / world;
      const int copy_from = phase == 1 ? writer : other;
      const int copy_to = phase == 0 ? writer : phase == 3 ? (k + 2) % world : other;
      int source = -1;  // the rank whose source bytes this rank's destination receives; -1: none (poison)
      if (op == Op::kCopy) {
        if (me == writer)
          launch(ctx, dst_region + c.dst_offset, src_region + c.src_offset, c.bytes, copy_from, copy_to);
        if (me == copy_to) source = copy_from;
      } else {
        launch(ctx, dst_region + c.dst_offset, src_region + c.src_offset, c.bytes, (me + k) % world, -1);
        source = op == Op::kPut ? (me - k + world) % world : (me + k) % world;
      }
      IRIS_CUDA_CHECK_LAUNCH();
      ctx.barrier();  // every rank's copy is complete
      const size_t check = c.dst_offset + c.bytes + 256;
      auto got = test::copy_to_host(ctx.stream(), dst_region, check);
      size_t wrong = 0, first = SIZE_MAX;
      for (size_t i = 0; i < check; ++i) {
        bool in = source >= 0 && i >= c.dst_offset && i < c.dst_offset + c.bytes;
        unsigned char want = in ? sources[source][c.src_offset + (i - c.dst_offset)] : kPoison;
        if (got[i] != want && wrong++ == 0) first = i;
      }
      EXPECT_EQ(wrong, 0u) << op_name(op) << "_" << form_name(form) << " with " << elem_size << "-byte elements, "
                           << c.bytes << " bytes, dst offset " << c.dst_offset << ", src offset " << c.src_offset
                           << ", rank " << me << " round " << k << " (source rank " << source
                           << "): first wrong byte at " << first;
    }
  }
}

template <typename T, Form kForm>
void check_bulk_ops(Context& ctx, unsigned char* dst, unsigned char* src,
                    const std::vector<std::vector<unsigned char>>& sources, const std::vector<BulkCase>& cases) {
  check_bulk(ctx, &launch_bulk<T, kForm, Op::kPut>, sizeof(T), kForm, Op::kPut, dst, src, sources, cases);
  check_bulk(ctx, &launch_bulk<T, kForm, Op::kGet>, sizeof(T), kForm, Op::kGet, dst, src, sources, cases);
  check_bulk(ctx, &launch_bulk<T, kForm, Op::kCopy>, sizeof(T), kForm, Op::kCopy, dst, src, sources, cases);
}

template <Form kForm>
void check_bulk_form(Context& ctx, unsigned char* dst, unsigned char* src,
                     const std::vector<std::vector<unsigned char>>& sources) {
  // Byte elements: every alignment class (skew 0, 8, 4, 2, 1 modulo 16), heads, tails, empty.
  const std::vector<BulkCase> byte_cases = {
      {0, 0, 0},
      {1, 0, 0},
      {15, 1, 1},
      {16, 0, 0},
      {17, 15, 15},
      {1000, 3, 3},
      {4096 + 7, 9, 1},
      {10000, 2, 6},
      {12345, 1, 2},
      {777, 7, 0},
      {size_t{1} << 20, 0, 0},
      {(size_t{1} << 20) - 5, 8, 8},
  };
  check_bulk_ops<unsigned char, kForm>(ctx, dst, src, sources, byte_cases);
  // 16-, 8-, 4- and 2-byte elements (alignment known from the type; the pointers' skew modulo 16 still
  // picks wider words where both allow them: 8-byte elements at skew 0 move 16 bytes at a time).
  check_bulk_ops<uint4, kForm>(ctx, dst, src, sources, {{16, 0, 0}, {16 * 1001, 16, 48}, {size_t{1} << 20, 0, 0}});
  check_bulk_ops<uint64_t, kForm>(ctx, dst, src, sources, {{8, 8, 0}, {8 * 4099, 24, 8}, {8 * 70001, 8, 8}});
  check_bulk_ops<float, kForm>(ctx, dst, src, sources, {{4, 4, 0}, {4 * 4099, 4, 12}, {4 * 70001, 8, 8}});
  check_bulk_ops<uint16_t, kForm>(ctx, dst, src, sources,
                                  {{2, 2, 0}, {2 * 5003, 6, 2}, {2 * 40001, 16, 8}, {2 * 77777, 10, 10}});
  // Elements whose size is not a power of two (a count of elements is not a count of words): 3, 6, 12, 24 and
  // 48 bytes at their types' alignments of 1, 2, 4, 8 and 16, at skews that allow wider words and skews that
  // do not.
  check_bulk_ops<Odd<uint8_t>, kForm>(ctx, dst, src, sources, {{3, 1, 2}, {3 * 1001, 5, 7}, {3 * 40001, 16, 0}});
  check_bulk_ops<Odd<uint16_t>, kForm>(ctx, dst, src, sources, {{6, 2, 4}, {6 * 999, 10, 6}, {6 * 30001, 16, 16}});
  check_bulk_ops<Odd<uint32_t>, kForm>(ctx, dst, src, sources, {{12, 4, 8}, {12 * 4097, 12, 4}, {12 * 20001, 8, 8}});
  check_bulk_ops<Odd<uint64_t>, kForm>(ctx, dst, src, sources, {{24, 8, 16}, {24 * 3001, 24, 8}, {24 * 9999, 0, 0}});
  check_bulk_ops<Odd<uint4>, kForm>(ctx, dst, src, sources, {{48, 0, 16}, {48 * 777, 16, 32}});
}

TEST_P(DeviceMemoryTest, BulkPutGetCopyEveryFormAlignmentAndPeer) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size();
        auto* src = ctx.empty<unsigned char>(kRegion);
        auto* dst = ctx.empty<unsigned char>(kRegion);
        std::vector<std::vector<unsigned char>> sources;
        for (int r = 0; r < world; ++r) sources.push_back(source_bytes(r));
        test::copy_to_device(ctx.stream(), src, sources[ctx.rank()]);
        check_bulk_form<Form::kThread>(ctx, dst, src, sources);
        check_bulk_form<Form::kWarp>(ctx, dst, src, sources);
        check_bulk_form<Form::kBlock>(ctx, dst, src, sources);
        check_bulk_form<Form::kGrid>(ctx, dst, src, sources);
        ctx.barrier();
        ctx.free(dst);
        ctx.free(src);
      },
      test::device_test_options());
}

INSTANTIATE_TEST_SUITE_P(DeviceRanks, DeviceMemoryTest, ::testing::ValuesIn(test::any_world_rank_setups()),
                         test::rank_setup_name);

}  // namespace
}  // namespace iris
