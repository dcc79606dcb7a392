// SymmetricHeap's construction and teardown against a fake CUDA driver (driver::set_api_for_testing), so
// that they run on a host without a GPU: as threads sharing one window, and as fork()ed processes that
// exchange descriptors over the TCP store. Each test makes one step fail on one rank and checks that
//   * every rank raises at once: the failing rank its own error, the others RemoteError naming it and
//     the step (before 2026-12-05 only the driver's first step was agreed: the others waited in the next
//     collective until the bootstrap timeout);
//   * nothing is left behind: every handle created or imported is released, every mapping unmapped,
//     every reservation freed, every descriptor closed (before, a constructor that threw released
//     nothing).
// The fake checks what the driver would refuse (mapping outside a reservation or over a mapping, freeing
// a reservation that still holds one, unknown handles) and counts each such misuse.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include <gtest/gtest.h>

#include "core/driver_api.hpp"
#include "iris/core/error.hpp"
#include "iris/runtime/bootstrap.hpp"
#include "runtime/symmetric_heap.hpp"
#include "support/forked_ranks.hpp"

namespace {

using namespace std::chrono_literals;
using namespace iris::test::forked;

constexpr size_t kGranularity = size_t{2} << 20;  // what fake_granularity answers
constexpr size_t kHeapBytes = size_t{4} << 20;

// The driver call that fails, on one rank.
enum class Call { kNone, kCreate, kReserve, kMap, kExport, kImport, kSetAccess };

const char* call_name(Call c) {
  switch (c) {
    case Call::kNone:
      return "none";
    case Call::kCreate:
      return "cuMemCreate";
    case Call::kReserve:
      return "cuMemAddressReserve";
    case Call::kMap:
      return "cuMemMap";
    case Call::kExport:
      return "cuMemExportToShareableHandle";
    case Call::kImport:
      return "cuMemImportFromShareableHandle";
    case Call::kSetAccess:
      return "cuMemSetAccess";
  }
  return "?";
}

// What the fake driver holds, for this process. The rank of the calling thread (t_rank) says who fails.
struct Vmm {
  std::mutex mu;
  CUmemGenericAllocationHandle next_handle = 1;
  CUdeviceptr next_va = CUdeviceptr{1} << 44;
  std::set<CUmemGenericAllocationHandle> handles;
  std::map<CUdeviceptr, size_t> reservations;
  std::map<CUdeviceptr, size_t> mappings;
  std::vector<std::string> misuse;
  Call fail = Call::kNone;
  int fail_rank = -1;
};
Vmm& vmm() {
  static Vmm v;
  return v;
}
thread_local int t_rank = -1;

bool failing(Call c) { return vmm().fail == c && vmm().fail_rank == t_rank; }

CUresult misuse(const std::string& what) {
  vmm().misuse.push_back(what);
  return CUDA_ERROR_INVALID_VALUE;
}

const char* code_name(CUresult res) {
  switch (res) {
    case CUDA_SUCCESS:
      return "CUDA_SUCCESS";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    default:
      return "CUDA_ERROR_INVALID_VALUE";
  }
}
// The failing call's code: out of memory where the driver runs out, no P2P where access is refused.
CUresult failure_code(Call c) {
  return c == Call::kCreate || c == Call::kReserve ? CUDA_ERROR_OUT_OF_MEMORY
         : c == Call::kSetAccess                   ? CUDA_ERROR_INVALID_DEVICE
                                                   : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI fake_error_name(CUresult res, const char** s) {
  *s = code_name(res);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_error_string(CUresult, const char** s) {
  *s = "fake driver";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_create(CUmemGenericAllocationHandle* h, size_t, const CUmemAllocationProp*, unsigned long long) {
  std::lock_guard lock(vmm().mu);
  if (failing(Call::kCreate)) return failure_code(Call::kCreate);
  *h = vmm().next_handle++;
  vmm().handles.insert(*h);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_release(CUmemGenericAllocationHandle h) {
  std::lock_guard lock(vmm().mu);
  if (vmm().handles.erase(h) == 0) return misuse("cuMemRelease of an unknown handle");
  return CUDA_SUCCESS;
}
// The reservation holding [p, p + size), or end().
std::map<CUdeviceptr, size_t>::iterator reservation_of(CUdeviceptr p, size_t size) {
  auto& r = vmm().reservations;
  auto it = r.upper_bound(p);
  if (it == r.begin()) return r.end();
  --it;
  return p + size <= it->first + it->second ? it : r.end();
}
bool overlaps_mapping(CUdeviceptr p, size_t size) {
  for (const auto& [at, bytes] : vmm().mappings)
    if (p < at + bytes && at < p + size) return true;
  return false;
}
CUresult CUDAAPI fake_map(CUdeviceptr p, size_t size, size_t, CUmemGenericAllocationHandle h, unsigned long long) {
  std::lock_guard lock(vmm().mu);
  if (failing(Call::kMap)) return failure_code(Call::kMap);
  if (vmm().handles.count(h) == 0) return misuse("cuMemMap of an unknown handle");
  if (reservation_of(p, size) == vmm().reservations.end()) return misuse("cuMemMap outside every reservation");
  if (overlaps_mapping(p, size)) return misuse("cuMemMap over a mapping");
  if (p % kGranularity != 0 || size % kGranularity != 0)
    return misuse("cuMemMap at an address or of a size that is not a multiple of the granularity");
  vmm().mappings[p] = size;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_unmap(CUdeviceptr p, size_t size) {
  std::lock_guard lock(vmm().mu);
  auto it = vmm().mappings.find(p);
  if (it == vmm().mappings.end() || it->second != size) return misuse("cuMemUnmap of no mapping");
  vmm().mappings.erase(it);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_set_access(CUdeviceptr p, size_t size, const CUmemAccessDesc*, size_t) {
  std::lock_guard lock(vmm().mu);
  if (failing(Call::kSetAccess)) return failure_code(Call::kSetAccess);
  size_t covered = 0;
  for (const auto& [at, bytes] : vmm().mappings)
    if (at >= p && at + bytes <= p + size) covered += bytes;
  if (covered != size) return misuse("cuMemSetAccess on memory not mapped");
  return CUDA_SUCCESS;
}
// Its default alignment (`alignment` 0) is 64 KiB, below the granularity, as a driver's may be: a heap whose
// window is not reserved aligned to the granularity cannot map its slots (fake_map refuses).
CUresult CUDAAPI fake_reserve(CUdeviceptr* p, size_t size, size_t alignment, CUdeviceptr, unsigned long long) {
  std::lock_guard lock(vmm().mu);
  if (failing(Call::kReserve)) return failure_code(Call::kReserve);
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) return misuse("cuMemAddressReserve alignment not 2^n");
  const CUdeviceptr align = alignment != 0 ? alignment : CUdeviceptr{64} << 10;
  *p = (vmm().next_va + (CUdeviceptr{64} << 10) + align - 1) / align * align;
  vmm().reservations[*p] = size;
  vmm().next_va = (*p + size + (CUdeviceptr{1} << 30)) / (CUdeviceptr{1} << 30) * (CUdeviceptr{1} << 30);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_free(CUdeviceptr p, size_t size) {
  std::lock_guard lock(vmm().mu);
  auto it = vmm().reservations.find(p);
  if (it == vmm().reservations.end() || it->second != size) return misuse("cuMemAddressFree of no reservation");
  if (overlaps_mapping(p, size)) return misuse("cuMemAddressFree of a reservation still mapped");
  vmm().reservations.erase(it);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_export(void* fd, CUmemGenericAllocationHandle h, CUmemAllocationHandleType, unsigned long long) {
  std::lock_guard lock(vmm().mu);
  if (failing(Call::kExport)) return failure_code(Call::kExport);
  if (vmm().handles.count(h) == 0) return misuse("export of an unknown handle");
  *static_cast<int*>(fd) = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // the caller owns it
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_import(CUmemGenericAllocationHandle* h, void* fd, CUmemAllocationHandleType) {
  std::lock_guard lock(vmm().mu);
  if (failing(Call::kImport)) return failure_code(Call::kImport);
  if (::fcntl(static_cast<int>(reinterpret_cast<uintptr_t>(fd)), F_GETFD) < 0)
    return misuse("import of a closed descriptor");
  *h = vmm().next_handle++;
  vmm().handles.insert(*h);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_granularity(size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) {
  *g = kGranularity;
  return CUDA_SUCCESS;
}

iris::driver::Api fake_api() {
  iris::driver::Api a;
  a.cuGetErrorName = fake_error_name;
  a.cuGetErrorString = fake_error_string;
  a.cuMemCreate = fake_create;
  a.cuMemRelease = fake_release;
  a.cuMemMap = fake_map;
  a.cuMemUnmap = fake_unmap;
  a.cuMemSetAccess = fake_set_access;
  a.cuMemAddressReserve = fake_reserve;
  a.cuMemAddressFree = fake_free;
  a.cuMemExportToShareableHandle = fake_export;
  a.cuMemImportFromShareableHandle = fake_import;
  a.cuMemGetAllocationGranularity = fake_granularity;
  return a;
}

// Installs the fake, empty, with `fail` failing on `rank`, for the test's lifetime (forked children
// inherit it as it stands).
class FakeDriver {
 public:
  FakeDriver(Call fail, int rank) : api_(fake_api()) {
    std::lock_guard lock(vmm().mu);
    vmm().handles.clear();
    vmm().reservations.clear();
    vmm().mappings.clear();
    vmm().misuse.clear();
    vmm().fail = fail;
    vmm().fail_rank = rank;
    iris::driver::set_api_for_testing(&api_);
  }
  ~FakeDriver() { iris::driver::set_api_for_testing(nullptr); }
  FakeDriver(const FakeDriver&) = delete;
  FakeDriver& operator=(const FakeDriver&) = delete;

 private:
  iris::driver::Api api_;
};

// What this process still holds of the fake driver, "" when nothing (and nothing was misused).
std::string left_behind() {
  std::lock_guard lock(vmm().mu);
  std::string s;
  if (!vmm().handles.empty()) s += std::to_string(vmm().handles.size()) + " handles; ";
  if (!vmm().mappings.empty()) s += std::to_string(vmm().mappings.size()) + " mappings; ";
  if (!vmm().reservations.empty()) s += std::to_string(vmm().reservations.size()) + " reservations; ";
  for (const std::string& m : vmm().misuse) s += m + "; ";
  return s;
}

// One rank's outcome: "" when the heap was built (and then destroyed), else the exception's type and text.
std::string outcome_of(iris::Bootstrap& bootstrap, int rank) {
  t_rank = rank;
  try {
    iris::SymmetricHeap heap(bootstrap, /*device=*/rank, kHeapBytes, kGranularity);
  } catch (const iris::RemoteError& e) {
    return std::string("RemoteError: ") + e.what();
  } catch (const iris::CuError& e) {
    return std::string("CuError: ") + e.what();
  } catch (const iris::InvalidArgument& e) {
    return std::string("InvalidArgument: ") + e.what();
  } catch (const iris::Error& e) {
    return std::string("Error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "";
}

// The start of the text the failing rank raises for its own failure of `c`.
std::string own_head(Call c, int rank) {
  if (c == Call::kSetAccess)
    return "CuError: cannot give device " + std::to_string(rank) +
           " access to a peer's heap (CUDA_ERROR_INVALID_DEVICE)";
  return std::string("CuError: CUDA driver error ") + code_name(failure_code(c));
}

// Checks rank r's outcome `got` when `c` failed on rank `failed` in the step agree names `step`: "" when
// right, else what is wrong. Nothing failing: the heap was built. cuMemCreate (out of memory): every rank
// raises the same Error naming the rank and what to change. Otherwise the failing rank raises its own error, the
// others RemoteError naming the rank, the step and that error.
std::string check_outcome(const std::string& got, int r, Call c, int failed, const std::string& step) {
  std::string want;
  if (c == Call::kNone) {
    return got.empty() ? "" : "rank " + std::to_string(r) + " raised: " + got + "\n";
  } else if (c == Call::kCreate) {
    want = "Error: rank " + std::to_string(failed) + " could not create its " + std::to_string(kHeapBytes) +
           "-byte symmetric heap: its GPU (device " + std::to_string(failed) +
           ") cannot hold it; set a smaller IRIS_HEAP_SIZE (or ContextOptions::heap_size) on every rank, or free "
           "memory on that GPU. CUDA driver error CUDA_ERROR_OUT_OF_MEMORY";
  } else if (r == failed) {
    want = own_head(c, r);
  } else {
    const std::string own = own_head(c, failed);
    want = "RemoteError: rank " + std::to_string(failed) + " failed " + step + ": " + own.substr(own.find(' ') + 1);
  }
  if (got.starts_with(want)) return "";
  return "rank " + std::to_string(r) + "\n   got: " + got + "\n  want: " + want + "...\n";
}

struct Failure {
  Call call;
  int rank;
  const char* step;  // what agree names
};

// ---- threads of one process: one window, rank 0 reserves it -------------------------------------------

std::vector<std::string> outcomes_on_threads(int world) {
  auto bootstraps = iris::make_thread_bootstraps(world, 20s);
  std::vector<std::string> got(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { got[r] = outcome_of(*bootstraps[r], r); });
  for (auto& t : threads) t.join();
  return got;
}

TEST(SymmetricHeapHost, ThreadsRaiseTogetherAndReleaseEverything) {
  for (int world : {2, 3}) {
    const int last = world - 1;
    for (const Failure& f : {Failure{Call::kNone, -1, ""}, Failure{Call::kCreate, last, ""},
                             Failure{Call::kReserve, 0, "to reserve the heap window"},
                             Failure{Call::kMap, last, "to map its heap"}, Failure{Call::kMap, 0, "to map its heap"},
                             Failure{Call::kSetAccess, last, "to give its device access to every heap"}}) {
      SCOPED_TRACE(::testing::Message() << world << " threads, " << call_name(f.call) << " failing on rank " << f.rank);
      const FakeDriver fake(f.call, f.rank);
      const auto start = std::chrono::steady_clock::now();
      const std::vector<std::string> got = outcomes_on_threads(world);
      EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "a rank waited for the bootstrap timeout";
      for (int r = 0; r < world; ++r) EXPECT_EQ(check_outcome(got[r], r, f.call, f.rank, f.step), "");
      EXPECT_EQ(left_behind(), "");
    }
  }
}

// A job whose bootstrap failed after the heaps were built (a rank threw; run_threads aborts): no rank's
// teardown can wait for its peers, whose kernels may still spin on its slot until their device timeout. Each
// slot stays mapped until every rank has torn down, and the last one out unmaps them all and frees the window
// (before 2026-12-06 each rank unmapped its own slot at once, so a peer's kernel faulted on an unmapped
// address, and rank 0 left the window reserved for good).
TEST(SymmetricHeapHost, ThreadsOfAFailedJobKeepEverySlotMappedUntilTheLastRankLeaves) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << world << " threads");
    const FakeDriver fake(Call::kNone, -1);
    auto bootstraps = iris::make_thread_bootstraps(world, 20s);
    std::vector<std::unique_ptr<iris::SymmetricHeap>> heaps(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        t_rank = r;
        heaps[r] = std::make_unique<iris::SymmetricHeap>(*bootstraps[r], /*device=*/r, kHeapBytes, kGranularity);
      });
    for (auto& t : threads) t.join();
    ASSERT_EQ(vmm().mappings.size(), static_cast<size_t>(world));
    bootstraps[world - 1]->abort("the test's body threw");
    // The failing rank first, then the others: the barrier of each teardown raises at once.
    for (int left = world, r = world - 1; left > 0; --left, r = (r + 1) % world) {
      heaps[r].reset();
      if (left == 1) break;
      std::lock_guard lock(vmm().mu);
      EXPECT_EQ(vmm().mappings.size(), static_cast<size_t>(world))
          << "a slot was unmapped while " << left - 1 << " rank(s) could still reach it";
      EXPECT_EQ(vmm().reservations.size(), 1u);
    }
    EXPECT_EQ(left_behind(), "");
  }
}

// ---- one process per rank: each reserves its own window and imports its peers' memory ----------------

TEST(SymmetricHeapHost, ProcessesRaiseTogetherAndReleaseEverything) {
  const int world = 3;
  const int last = world - 1;
  for (const Failure& f :
       {Failure{Call::kNone, -1, ""}, Failure{Call::kCreate, last, ""},
        Failure{Call::kReserve, last, "to map its heap"}, Failure{Call::kMap, 0, "to map its heap"},
        Failure{Call::kExport, last, "to map its heap"}, Failure{Call::kImport, last, "to map its peers' heaps"},
        Failure{Call::kSetAccess, 0, "to give its device access to every heap"}}) {
    SCOPED_TRACE(::testing::Message() << call_name(f.call) << " failing on rank " << f.rank);
    const FakeDriver fake(f.call, f.rank);
    const Rendezvous rv;
    const std::vector<int> codes = run_ranks(
        world,
        [&](int rank) {
          auto bootstrap = iris::make_tcp_bootstrap(rv.info(rank, world), 10s);
          const int fds = open_fd_count();
          const std::string got = outcome_of(*bootstrap, rank);
          const std::string wrong = check_outcome(got, rank, f.call, f.rank, f.step);
          if (!wrong.empty()) std::fprintf(stderr, "[rank %d] %s", rank, wrong.c_str());
          const std::string left = left_behind();
          if (!left.empty()) std::fprintf(stderr, "[rank %d] left behind: %s\n", rank, left.c_str());
          const int fds_after = open_fd_count();
          if (fds_after != fds)
            std::fprintf(stderr, "[rank %d] %d descriptors before, %d after\n", rank, fds, fds_after);
          bootstrap->barrier();  // no rank's store goes away while a peer still checks
          return wrong.empty() && left.empty() && fds_after == fds ? 0 : kCheckFailed;
        },
        30s);
    expect_all_zero(codes);
  }
}

// Ranks 0 and 1 are threads of one process, rank 2 a process of its own: every rank refuses the layout, at
// once (before 2026-12-05 rank 2, alone in its process, took the layout for "one process each" and went on
// to wait for peers that had raised).
TEST(SymmetricHeapHost, AMixOfThreadsAndProcessesIsRefusedEverywhere) {
  const FakeDriver fake(Call::kNone, -1);
  const Rendezvous rv;
  const int world = 3;
  auto want = [](int rank, int shares) {
    return "InvalidArgument: iris ranks must be either all threads of one process or one process each; the 3 ranks "
           "are in 2 processes (rank " +
           std::to_string(rank) + " shares its process with " + std::to_string(shares) + " of 2 peers).";
  };
  const std::vector<int> codes = run_processes(
      {0, 2},
      [&](int process) {
        std::vector<int> ranks = process == 0 ? std::vector<int>{0, 1} : std::vector<int>{2};
        std::vector<std::string> got(ranks.size());
        std::vector<std::thread> threads;
        for (size_t i = 0; i < ranks.size(); ++i)
          threads.emplace_back([&, i] {
            auto bootstrap = iris::make_tcp_bootstrap(rv.info(ranks[i], world), 10s);
            got[i] = outcome_of(*bootstrap, ranks[i]);
            bootstrap->barrier();
          });
        for (auto& t : threads) t.join();
        int code = 0;
        for (size_t i = 0; i < ranks.size(); ++i)
          if (same_text(ranks[i], got[i], want(ranks[i], process == 0 ? 1 : 0)) != 0) code = kCheckFailed;
        const std::string left = left_behind();
        if (!left.empty()) {
          std::fprintf(stderr, "[process %d] left behind: %s\n", process, left.c_str());
          code = kCheckFailed;
        }
        return code;
      },
      30s);
  expect_all_zero(codes, {0, 2});
}

}  // namespace
