#include "runtime/symmetric_heap.hpp"

#include <unistd.h>

#include <compare>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "core/driver_api.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/log.hpp"
#include "runtime/agree.hpp"
#include "runtime/bootstrap_detail.hpp"

namespace iris {
namespace {

CUmemAllocationProp allocation_prop(int device, bool exportable) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

template <typename T>
std::string to_bytes(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T from_bytes(const std::string& s) {
  IRIS_ASSERT(s.size() == sizeof(T), "bootstrap returned ", s.size(), " bytes, expected ", sizeof(T));
  T v;
  std::memcpy(&v, s.data(), sizeof(T));
  return v;
}

void grant_access(char* ptr, size_t size, int device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUresult res = driver::api().cuMemSetAccess(reinterpret_cast<CUdeviceptr>(ptr), size, &access, 1);
  if (res != CUDA_SUCCESS) {
    const char* name = driver::error_name(res);
    throw CuError(detail::str_cat("cannot give device ", device, " access to a peer's heap (", name,
                                  "): the GPUs of this job must be peer-capable (NVLink or PCIe P2P). "
                                  "Check `nvidia-smi topo -m`."),
                  res);
  }
}

// Who this process is, for telling threads of one process from processes: its pid with 64 random bits
// drawn once per program. Pids alone repeat across pid namespaces (one container per rank: every rank
// may be pid 1), which would take processes for threads of one and share a window they cannot share.
// The pid is read at each call: a fork()ed child keeps its parent's random bits but not its pid.
struct ProcessToken {
  int64_t pid;
  uint64_t random;
  auto operator<=>(const ProcessToken&) const = default;
};
ProcessToken process_token() {
  static const uint64_t random = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  return ProcessToken{static_cast<int64_t>(getpid()), random};
}

// The windows that threads of this process share, by base, while some of their ranks have not torn down:
// how many have, and the slots still mapped. A rank whose teardown cannot wait for its peers (the bootstrap
// failed: a peer threw, or left) keeps its slot mapped, since a peer's kernel may still read or spin on it
// until its device timeout; the last rank out unmaps what is left and frees the window. (Before 2026-12-06
// such a rank unmapped its slot at once, and a peer's kernel still polling it faulted with an illegal
// address: a sticky error that ends the peer device's context for the whole process, instead of the
// TimeoutError it would have raised; and rank 0 left the window reserved for good.)
struct SharedWindows {
  struct Window {
    int departed = 0;
    std::vector<char*> mapped;  // slots whose rank left them mapped
  };
  std::mutex mu;
  std::map<char*, Window> by_base;
};
SharedWindows& shared_windows() {
  static SharedWindows windows;
  return windows;
}

}  // namespace

size_t SymmetricHeap::allocation_granularity(int device) {
  CUmemAllocationProp prop = allocation_prop(device, true);
  size_t granularity = 0;
  IRIS_CU_CHECK(driver::api().cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  return granularity;
}

SymmetricHeap::SymmetricHeap(Bootstrap& bootstrap, int device, size_t heap_size, size_t granularity)
    : bootstrap_(bootstrap),
      rank_(bootstrap.rank()),
      world_(bootstrap.world_size()),
      device_(device),
      size_(heap_size),
      granularity_(granularity),
      mapped_(world_, false),
      imported_(world_, 0) {
  // A constructor that throws runs no destructor: undo here what was set up. After a failure every rank
  // learned at once (detail::agree), the ranks tear down together; after one of the bootstrap's own, this
  // rank cannot know where its peers are, and tears down as ~SymmetricHeap does after a failed barrier.
  bool together = false;
  try {
    build(together);
  } catch (...) {
    teardown(together);
    throw;
  }
  IRIS_LOG_DEBUG("symmetric heap: ", size_, " bytes per rank, window at ", static_cast<void*>(base_),
                 shared_window_ ? " (shared by the threads of this process)" : "");
}

void SymmetricHeap::build(bool& together) {
  // Are the ranks threads of one process or separate processes? Decided from every rank's process token,
  // so that every rank decides alike (a mix raises on all of them).
  const ProcessToken mine = process_token();
  auto tokens = bootstrap_.allgather(to_bytes(mine));
  std::set<ProcessToken> processes;
  int same = 0;
  for (const auto& t : tokens) {
    processes.insert(from_bytes<ProcessToken>(t));
    same += from_bytes<ProcessToken>(t) == mine ? 1 : 0;
  }
  const int count = static_cast<int>(processes.size());
  IRIS_CHECK_ARG(count == 1 || count == world_,
                 "iris ranks must be either all threads of one process or one process each; the ", world_,
                 " ranks are in ", count, " processes (rank ", rank_, " shares its process with ", same - 1, " of ",
                 world_ - 1, " peers).");
  shared_window_ = world_ > 1 && count == 1;

  // Creating the physical memory can fail on one rank only (out of memory): agree before mapping.
  std::string failure;
  try {
    CUmemAllocationProp prop = allocation_prop(device_, !shared_window_ && world_ > 1);
    IRIS_CU_CHECK(driver::api().cuMemCreate(&own_, size_, &prop, 0));
  } catch (const CuError& e) {
    failure = e.code() == CUDA_ERROR_OUT_OF_MEMORY
                  ? detail::str_cat("its GPU (device ", device_,
                                    ") cannot hold it; set a smaller IRIS_HEAP_SIZE (or ContextOptions::heap_size) on "
                                    "every rank, or free memory on that GPU. ",
                                    e.what())
                  : std::string(e.what());
  } catch (const std::exception& e) {
    failure = e.what();
  }
  auto failures = bootstrap_.allgather(failure);
  for (int r = 0; r < world_; ++r)
    if (!failures[r].empty()) {
      together = true;
      throw Error(detail::str_cat("rank ", r, " could not create its ", size_, "-byte symmetric heap: ", failures[r]));
    }

  const auto grant_everywhere = [&] {
    for (int r = 0; r < world_; ++r) grant_access(slot(r), size_, device_);
  };
  if (shared_window_) {
    // One window for the whole process: rank 0 reserves it and tells the others where it is.
    detail::agree(
        bootstrap_, "to reserve the heap window",
        [&] {
          if (rank_ != 0) return;
          CUdeviceptr p = 0;
          IRIS_CU_CHECK(driver::api().cuMemAddressReserve(&p, size_ * world_, granularity_, 0, 0));
          base_ = reinterpret_cast<char*>(p);
        },
        &together);
    base_ = reinterpret_cast<char*>(
        from_bytes<uintptr_t>(bootstrap_.broadcast(to_bytes(reinterpret_cast<uintptr_t>(base_)), 0)));
    // Every slot is mapped before anyone sets access on it (the agreement is that barrier).
    detail::agree(
        bootstrap_, "to map its heap",
        [&] {
          IRIS_CU_CHECK(driver::api().cuMemMap(reinterpret_cast<CUdeviceptr>(slot(rank_)), size_, 0, own_, 0));
          mapped_[rank_] = true;
        },
        &together);
    detail::agree(bootstrap_, "to give its device access to every heap", grant_everywhere, &together);
    return;
  }
  detail::UniqueFd fd;
  detail::agree(
      bootstrap_, "to map its heap",
      [&] {
        CUdeviceptr p = 0;
        IRIS_CU_CHECK(driver::api().cuMemAddressReserve(&p, size_ * world_, granularity_, 0, 0));
        base_ = reinterpret_cast<char*>(p);
        IRIS_CU_CHECK(driver::api().cuMemMap(reinterpret_cast<CUdeviceptr>(slot(rank_)), size_, 0, own_, 0));
        mapped_[rank_] = true;
        if (world_ == 1) return;
        int exported = -1;
        IRIS_CU_CHECK(
            driver::api().cuMemExportToShareableHandle(&exported, own_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        fd.reset(exported);
      },
      &together);
  if (world_ > 1) {
    // Room for every descriptor before any arrives: once they are this rank's, taking them into owners
    // allocates nothing, so none can leak to a bad_alloc half-way.
    std::vector<detail::UniqueFd> peers;
    peers.reserve(static_cast<size_t>(world_));
    for (int received : bootstrap_.exchange_fds(fd.get())) peers.emplace_back(received);
    fd.reset();
    detail::agree(
        bootstrap_, "to map its peers' heaps",
        [&] {
          for (int r = 0; r < world_; ++r) {
            if (r == rank_) continue;
            IRIS_CU_CHECK(driver::api().cuMemImportFromShareableHandle(
                &imported_[r], reinterpret_cast<void*>(static_cast<uintptr_t>(peers[r].get())),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
            peers[r].reset();
            IRIS_CU_CHECK(driver::api().cuMemMap(reinterpret_cast<CUdeviceptr>(slot(r)), size_, 0, imported_[r], 0));
            mapped_[r] = true;
          }
        },
        &together);
  }
  // Every rank can reach every heap before anyone returns (the agreement is that barrier).
  detail::agree(bootstrap_, "to give its device access to every heap", grant_everywhere, &together);
}

std::vector<int> SymmetricHeap::registered_slots() const {
  if (shared_window_) return {rank_};
  std::vector<int> all(world_);
  for (int r = 0; r < world_; ++r) all[r] = r;
  return all;
}

SymmetricHeap::~SymmetricHeap() {
  // Wait until no rank can still touch any heap. If a peer failed we cannot know: as processes each rank
  // still unmaps its own mappings (a peer's kernel keeps the memory it imported), as threads each slot stays
  // mapped until every rank has torn down (teardown).
  bool peers_done = true;
  try {
    bootstrap_.barrier();
  } catch (const std::exception& e) {
    peers_done = false;
    IRIS_LOG_WARN("heap teardown without a final barrier (", e.what(), ")");
  }
  teardown(peers_done);
}

void SymmetricHeap::teardown(bool peers_done) noexcept {
  auto unmap = [&](int r) {
    if (!mapped_[r]) return;
    CUresult res = driver::api().cuMemUnmap(reinterpret_cast<CUdeviceptr>(slot(r)), size_);
    if (res != CUDA_SUCCESS) IRIS_LOG_WARN("cuMemUnmap of slot ", r, " failed with code ", res);
    mapped_[r] = false;
  };
  if (shared_window_) {
    // One mapping of each slot serves every thread's device. After the barrier no peer's kernel reaches this
    // slot (each synchronized its device first: ~Context); without it one may, until its device timeout: the
    // slot stays mapped for the last rank out (leave_shared_window). Its handle goes now either way: a mapped
    // allocation lives on until it is unmapped.
    if (peers_done) unmap(rank_);
    if (own_ != 0) driver::api().cuMemRelease(own_);
    own_ = 0;
    if (base_ != nullptr) leave_shared_window();
  } else {
    for (int r = 0; r < world_; ++r) unmap(r);
    for (int r = 0; r < world_; ++r)
      if (imported_[r] != 0) driver::api().cuMemRelease(imported_[r]);
    if (own_ != 0) driver::api().cuMemRelease(own_);
    if (base_ != nullptr) driver::api().cuMemAddressFree(reinterpret_cast<CUdeviceptr>(base_), size_ * world_);
  }
  own_ = 0;
  base_ = nullptr;
  imported_.assign(world_, 0);
}

void SymmetricHeap::leave_shared_window() noexcept {
  try {
    SharedWindows& windows = shared_windows();
    std::lock_guard lock(windows.mu);
    SharedWindows::Window& window = windows.by_base[base_];
    const bool left_mapped = mapped_[rank_];
    if (left_mapped) {
      window.mapped.push_back(slot(rank_));
      mapped_[rank_] = false;
    }
    if (++window.departed < world_) {
      if (left_mapped)
        IRIS_LOG_WARN("rank ", rank_,
                      " leaves its heap mapped until every rank of the window has torn down: a "
                      "peer failed, and its kernels may still reach this heap");
      return;
    }
    for (char* p : window.mapped) {
      CUresult res = driver::api().cuMemUnmap(reinterpret_cast<CUdeviceptr>(p), size_);
      if (res != CUDA_SUCCESS) IRIS_LOG_WARN("cuMemUnmap of a heap slot left mapped failed with code ", res);
    }
    driver::api().cuMemAddressFree(reinterpret_cast<CUdeviceptr>(base_), size_ * world_);
    windows.by_base.erase(base_);
  } catch (const std::exception& e) {  // an allocation of the registry: the window stays as it is
    IRIS_LOG_WARN("heap teardown could not record the shared window (", e.what(), "); it stays reserved");
  }
}

}  // namespace iris
