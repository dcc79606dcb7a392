#include "iris/context.hpp"

#include <nvtx3/nvToolsExtMem.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "core/first_launch.hpp"
#include "core/kernel_modules.hpp"
#include "core/relaxed_query.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/log.hpp"
#include "iris/device/common.cuh"
#include "runtime/agree.hpp"
#include "runtime/bootstrap_detail.hpp"
#include "runtime/device_error_record.hpp"
#include "runtime/heap_allocator.hpp"
#include "runtime/heap_guard.hpp"
#include "runtime/symmetric_heap.hpp"

namespace iris {
namespace {

constexpr size_t kDefaultHeapSize = size_t{1} << 30;

// A switch in the environment (IRIS_HEAP_GUARDS, IRIS_CHECK_CALLS, IRIS_LOAD_KERNELS): 0 off, 1 on,
// unset or empty `otherwise`.
bool switch_from_env(const char* name, bool otherwise = false) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return otherwise;
  IRIS_CHECK_ARG(std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0, "Invalid ", name, "='", env,
                 "': expected 0 or 1.");
  return env[0] == '1';
}

std::string hex_byte(unsigned v) {
  char b[8];
  std::snprintf(b, sizeof(b), "0x%02x", v & 0xffu);
  return b;
}

// One damaged guard region, for HeapCorruption's message.
std::string describe_damage(const HeapAllocator::GuardRegion& r, const detail::GuardDamage& d, bool freed) {
  return detail::str_cat(d.changed, " of ", r.end - r.begin, " guard bytes after the heap object at offset ", r.object,
                         " (", r.requested, " bytes, allocation #", r.serial, freed ? ", freed since" : "",
                         ") changed, the first at byte ", d.first - r.begin, " past its end (", hex_byte(d.found),
                         " instead of ", hex_byte(d.want), ")");
}

// The device's spins count nanoseconds in 64 bits: 10^9 s is far inside, and far above any real wait.
constexpr std::chrono::milliseconds kMaxDeviceTimeout{1'000'000'000'000};
// Above this a heap is more than a GPU can address (and rounding it up to the granularity could wrap).
constexpr size_t kMaxHeapBytes = size_t{1} << 48;

template <typename T>
std::string pod_bytes(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}
// What rank `from` sent to this rank's collective `what`, which every rank makes with a T. A word of
// another size is another collective of that rank's: the ranks' collective calls are out of step (one made
// a call, or an op's call check with IRIS_CHECK_CALLS, that the others did not), and each raises.
template <typename T>
T pod_from(const std::string& s, const char* what, int rank, int from) {
  T v{};
  if (s.size() != sizeof(T))
    throw InvalidArgument(detail::str_cat(
        "Collective calls out of step across ranks: rank ", rank, " in ", what, " received ", s.size(),
        " bytes from rank ", from, " where every rank sends ", sizeof(T), ", so rank ", from,
        " made another collective call at this point (a call of an iris::ccl or iris::ops op "
        "checked with IRIS_CHECK_CALLS, a preamble, an allocation...). Every rank must make the same collective "
        "calls in the same order."));
  std::memcpy(&v, s.data(), sizeof(T));
  return v;
}

nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t domain = nvtxDomainCreateA("iris");
  return domain;
}

// One NVTX heap per heap window of the process (the reservation that holds every rank's slot), shared
// by the contexts of a threads-mode group. With a heap per slot (the first design), compute-sanitizer
// on 4 x H200 accepted only the first registration of a test and refused the other slots' and every
// later one ("One or more of the parameters is invalid"; the unregister of the accepted one failed
// too), so it never saw a heap object. The working guess: it takes the whole reservation for one
// allocation, which holds one heap, and wants the heap's regions dropped (reset) before unregister.
struct NvtxWindow {
  nvtxMemHeapHandle_t heap = nullptr;
  int users = 0;
};
std::mutex& nvtx_mutex() {
  static std::mutex m;
  return m;
}
std::map<const char*, NvtxWindow>& nvtx_windows() {
  static std::map<const char*, NvtxWindow> windows;
  return windows;
}

nvtxMemHeapHandle_t nvtx_window_acquire(char* base, size_t bytes) {
  std::lock_guard<std::mutex> lock(nvtx_mutex());
  NvtxWindow& w = nvtx_windows()[base];
  if (w.users++ == 0) {
    nvtxMemVirtualRangeDesc_t range{};
    range.ptr = base;
    range.size = bytes;
    nvtxMemHeapDesc_t desc{};
    desc.extCompatID = NVTX_EXT_COMPATID_MEM;
    desc.structSize = sizeof(desc);
    desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
    desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    desc.typeSpecificDescSize = sizeof(range);
    desc.typeSpecificDesc = &range;
    w.heap = nvtxMemHeapRegister(nvtx_domain(), &desc);
  }
  return w.heap;
}

void nvtx_window_release(char* base) {
  std::lock_guard<std::mutex> lock(nvtx_mutex());
  auto it = nvtx_windows().find(base);
  if (it == nvtx_windows().end() || --it->second.users > 0) return;
  nvtxMemHeapReset(nvtx_domain(), it->second.heap);  // drops the regions of every rank of the window
  nvtxMemHeapUnregister(nvtx_domain(), it->second.heap);
  nvtx_windows().erase(it);
}

}  // namespace

size_t parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string digits = text.substr(0, i), suffix = text.substr(i);
  auto bad = [&]() {
    return InvalidArgument("Invalid byte size '" + text +
                           "': expected a positive integer with an optional K, M, G or T suffix (powers of 1024), "
                           "e.g. 1073741824, 512M or 2G.");
  };
  if (digits.empty() || digits.size() > 19) throw bad();
  unsigned long long value = std::stoull(digits);
  int shift = 0;
  if (suffix.empty() || suffix == "B") shift = 0;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB") shift = 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") shift = 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") shift = 30;
  else if (suffix == "T" || suffix == "t" || suffix == "TiB") shift = 40;
  else throw bad();
  if (value == 0 || (shift > 0 && value > (~0ull >> shift))) throw bad();
  return static_cast<size_t>(value << shift);
}

std::chrono::milliseconds device_timeout_from_env() {
  const char* env = std::getenv("IRIS_DEVICE_TIMEOUT");
  if (env == nullptr || *env == '\0') return std::chrono::milliseconds(10000);
  // At least a millisecond (what the device counts in) and at most 10^9 s: "inf", 1e300 or 1e-4 would
  // otherwise become 0 ms or wrap, and the device takes a 0 for its 10 s default.
  const std::optional<double> s = detail::parse_seconds(env);
  IRIS_CHECK_ARG(s && *s >= 0.001 && *s <= 1e9, "Invalid IRIS_DEVICE_TIMEOUT='", env,
                 "': expected a number of seconds from 0.001 to 1000000000 (e.g. 10 or 2.5).");
  return std::chrono::milliseconds(static_cast<int64_t>(*s * 1000.0 + 0.5));
}

size_t heap_size_from_env() {
  const char* env = std::getenv("IRIS_HEAP_SIZE");
  if (env == nullptr || *env == '\0') return kDefaultHeapSize;
  try {
    return parse_byte_size(env);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("IRIS_HEAP_SIZE: ") + e.what());
  }
}

bool library_device_checks() noexcept { return IRIS_DEVICE_CHECKS != 0; }

int local_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" state
    return 0;
  }
  return n;
}

std::unique_ptr<Context> Context::create_from_env(const ContextOptions& options) {
  LaunchInfo info = detect_launch_info();
  IRIS_CHECK_ARG(info.local_world_size == info.world_size,
                 "iris maps every rank's heap over NVLink, so all ranks must share one host: this job has ",
                 info.world_size, " ranks but ", info.local_world_size,
                 " on this host (multi-node fabric handles are not implemented).");
  ContextOptions opts = options;
  if (opts.device < 0) opts.device = info.local_rank;
  auto timeout = opts.bootstrap_timeout.count() > 0 ? opts.bootstrap_timeout : default_bootstrap_timeout();
  // One rank exchanges with nobody: no store, so no port to take. With a TCP store, a second program of one
  // rank on the host (another GPU's single-rank job, a batch script's, iris's own tests) found MASTER_PORT
  // (29500 by default) taken by the first and failed ("cannot host the bootstrap store ...").
  if (info.world_size == 1) return std::make_unique<Context>(make_thread_bootstraps(1, timeout)[0], opts);
  return std::make_unique<Context>(make_tcp_bootstrap(info, timeout), opts);
}

Context::Context(std::shared_ptr<Bootstrap> bootstrap, const ContextOptions& options)
    : bootstrap_(std::move(bootstrap)) {
  IRIS_CHECK_ARG(bootstrap_ != nullptr, "Context needs a bootstrap.");
  static std::atomic<uint64_t> contexts{0};
  heap_id_ = ++contexts;
  rank_ = bootstrap_->rank();
  world_size_ = bootstrap_->world_size();
  set_thread_rank(rank_, world_size_);

  size_t requested = 0;
  size_t granularity = 0;
  bool guards = false;
  bool load_kernels = false;
  bool nvtx_heap = false;
  detail::agree(*bootstrap_, "to set up its device", [&] {
    guards = options.heap_guards || switch_from_env("IRIS_HEAP_GUARDS");
    nvtx_heap = switch_from_env("IRIS_NVTX_HEAP");  // before 2026-12-07 any value but "1" was silently off
    load_kernels = options.load_kernels && switch_from_env("IRIS_LOAD_KERNELS", true);
    check_calls_ = options.check_calls || switch_from_env("IRIS_CHECK_CALLS");
    device_timeout_ = options.device_timeout.count() > 0 ? options.device_timeout : device_timeout_from_env();
    IRIS_CHECK_ARG(device_timeout_ <= kMaxDeviceTimeout, "ContextOptions::device_timeout of ", device_timeout_.count(),
                   " ms is above 10^9 s, more than the device's clock counts to; pass at "
                   "most that.");
    requested = options.heap_size > 0 ? options.heap_size : heap_size_from_env();
    IRIS_CHECK_ARG(requested <= kMaxHeapBytes, "a symmetric heap of ", requested,
                   " bytes is more than a GPU can address (2^48); set IRIS_HEAP_SIZE or ContextOptions::heap_size to "
                   "what the GPU holds.");
    int count = local_device_count();
    device_ = options.device >= 0 ? options.device : rank_;
    IRIS_CHECK_ARG(count > 0, "rank ", rank_, " found no CUDA device (cudaGetDeviceCount returned 0).");
    IRIS_CHECK_ARG(device_ < count, "rank ", rank_, " was assigned device ", device_, " but only ", count,
                   " CUDA device(s) are visible to it (ContextOptions::device, which create_from_env sets to the "
                   "local rank and run_threads to the rank). Make every GPU of the host visible to every rank (a "
                   "launcher that binds one GPU per task, such as srun --gpus-per-task=1 or a CUDA_VISIBLE_DEVICES "
                   "per rank, leaves each rank device 0 only), or pass a device it sees.");
    IRIS_CUDA_CHECK(cudaSetDevice(device_));
    IRIS_CUDA_CHECK(cudaFree(nullptr));  // create the primary context so driver calls have one
    granularity = SymmetricHeap::allocation_granularity(device_);
  });

  // Every rank must use the same heap size and guards: the window layout and the offsets depend on them.
  // And the same check_calls: a rank that checks its calls waits in the bootstrap for peers that never come.
  // The heap size is the request rounded up to the coarsest allocation granularity of the ranks' GPUs (powers
  // of two, so a multiple of every rank's): before 2026-12-07 each rank rounded to its own, and GPUs of
  // different granularity were told to set the same IRIS_HEAP_SIZE, which they had.
  struct Layout {
    uint64_t requested, granularity, guards, check_calls;
  };
  auto layouts =
      bootstrap_->allgather(pod_bytes(Layout{requested, granularity, guards ? 1u : 0u, check_calls_ ? 1u : 0u}));
  std::vector<Layout> ranks;
  size_t coarsest = granularity;
  for (int r = 0; r < world_size_; ++r) {
    ranks.push_back(pod_from<Layout>(layouts[r], "creating the Context", rank_, r));
    coarsest = std::max<size_t>(coarsest, ranks.back().granularity);
  }
  const auto rounded = [&](uint64_t bytes) { return (bytes + coarsest - 1) / coarsest * coarsest; };
  heap_size_ = rounded(requested);
  for (int r = 0; r < world_size_; ++r) {
    const Layout& l = ranks[r];
    IRIS_CHECK_ARG(
        l.granularity > 0 && coarsest % l.granularity == 0, "Heap allocation granularities of rank ", rank_, " (",
        granularity, " bytes) and rank ", r, " (", l.granularity,
        " bytes) are not multiples of one another, as a heap both could map needs: run the job on GPUs of one "
        "model.");
    IRIS_CHECK_ARG(rounded(l.requested) == heap_size_, "Heap sizes differ across ranks: rank ", rank_, " has ",
                   heap_size_, " bytes but rank ", r, " has ", rounded(l.requested),
                   ". Set the same IRIS_HEAP_SIZE (or heap_size) on every rank.");
    IRIS_CHECK_ARG((l.guards != 0) == guards, "Heap guards differ across ranks: rank ", rank_, " has them ",
                   guards ? "on" : "off", " but rank ", r, " has them ", l.guards ? "on" : "off",
                   ". Set the same IRIS_HEAP_GUARDS (or heap_guards) on every rank.");
    IRIS_CHECK_ARG((l.check_calls != 0) == check_calls_, "Call checks differ across ranks: rank ", rank_, " has them ",
                   check_calls_ ? "on" : "off", " but rank ", r, " has them ", l.check_calls ? "on" : "off",
                   ". Set the same IRIS_CHECK_CALLS (or check_calls) on every rank.");
  }

  // From here the constructor holds what ~Context would release, which does not run when it throws: the
  // catch below releases the stream, the pinned record and the NVTX window, and the members (the heap, whose
  // teardown is collective) go with the constructor. Each step is agreed, so that the ranks throw together
  // and meet in that teardown.
  try {
    detail::agree(*bootstrap_, "to create its stream and error record", [&] {
      IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      int pageable = 0;
      IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device_));
      pageable_access_ = pageable != 0;
      IRIS_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&error_record_), sizeof(DeviceErrorRecord),
                                    cudaHostAllocMapped | cudaHostAllocPortable));
      std::memset(error_record_, 0, sizeof(DeviceErrorRecord));
    });

    heap_ = std::make_unique<SymmetricHeap>(*bootstrap_, device_, heap_size_, coarsest);  // agrees its own steps

    detail::agree(*bootstrap_, "to finish its context", [&] {
      allocator_ = std::make_unique<HeapAllocator>(heap_size_, guards ? detail::kHeapGuardBytes : 0,
                                                   std::max(coarsest, HeapAllocator::kMinAlignment));
      if (guards) guards_ = std::make_unique<detail::HeapGuards>();

      // IRIS_NVTX_HEAP=1: tell memory checkers about every heap object through the NVTX memory API, so a
      // write running past one object into the next would be reported. Off by default: compute-sanitizer
      // 2025 on the H200 machines refused every such registration ("One or more of the parameters is
      // invalid", per slot and per window alike) and counted each refusal as an error; without it memcheck
      // still checks every access against the heap as a whole.
      if (nvtx_heap) {
        nvtx_heap_ =
            static_cast<void*>(nvtx_window_acquire(heap_->base(), heap_size_ * static_cast<size_t>(world_size_)));
        nvtx_on_ = true;
      }

      device_ctx_.heap_base = heap_->base();
      device_ctx_.heap_size = heap_size_;
      device_ctx_.rank = rank_;
      device_ctx_.world_size = world_size_;
      DeviceErrorRecord* device_record = nullptr;
      IRIS_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_record), error_record_, 0));
      device_ctx_.error = device_record;
      device_ctx_.timeout_ns = static_cast<uint64_t>(device_timeout_.count()) * 1000000ull;
    });
  } catch (...) {
    if (nvtx_on_) nvtx_window_release(heap_->base());
    if (error_record_ != nullptr) cudaFreeHost(error_record_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    throw;
  }
  std::string kernels = ", kernels load at their first launch";
  // Loading ahead saves a first launch's wait and nothing more, so nothing here may fail the context: past
  // the agreed steps above, a throw would leak the stream and the pinned record (this constructor's catch is
  // behind) and leave this rank's peers to find it gone.
  if (load_kernels) {
    try {
      const detail::DeviceGuard device(device_);
      const auto start = std::chrono::steady_clock::now();
      const detail::KernelLoadReport loaded = detail::load_kernel_modules();
      // Loaded is not yet ready: a first launch also waits for the device to idle where it needs more stack
      // than the device's limit or names printf (core/first_launch.hpp).
      const detail::FirstLaunchReport prepared = detail::prepare_first_launches(stream_, loaded.max_local_bytes);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      if (loaded.failure.empty())
        kernels = detail::str_cat(", ", loaded.kernels, " kernels of ", loaded.libraries, " libraries loaded in ",
                                  ms.count(), " ms, stack limit ", prepared.stack_after, " bytes per thread (was ",
                                  prepared.stack_before, "; the deepest kernel needs ", loaded.max_local_bytes, ")");
      else
        IRIS_LOG_WARN("rank ", rank_, " could not load iris's kernels ahead (", loaded.failure,
                      "): the rest load at their first launch, which waits for the kernels running on device ", device_,
                      ".");
      if (!prepared.failure.empty())
        IRIS_LOG_WARN("rank ", rank_, " could not prepare the first launches of iris's kernels (", prepared.failure,
                      "): a process's first iris kernel, and the first needing more than ", prepared.stack_after,
                      " bytes of stack, wait for the kernels running on device ", device_, ".");
    } catch (...) {
      kernels = ", kernels load at their first launch (loading them ahead failed)";
    }
  }
  IRIS_LOG_INFO("context ready: device ", device_, ", heap ", heap_size_, " bytes, window ",
                static_cast<void*>(heap_->base()), guards_ != nullptr ? ", heap guards on" : "",
                library_device_checks() ? ", iris's kernels built with IRIS_DEVICE_CHECKS" : "", kernels);
}

Context::~Context() {
  // Unwinding an exception on this rank: peers may be blocked in a collective waiting for us, and
  // the heap teardown below waits for them. Release them first so neither side waits forever.
  if (std::uncaught_exceptions() > 0)
    bootstrap_->abort(detail::str_cat("rank ", rank_, " destroyed its context while unwinding an exception"));
  // The teardown below synchronizes this context's stream, reads its guards and frees its memory: on the
  // context's device, whichever the destroying thread has current. A destructor cannot raise: should the
  // switch fail, the teardown goes on with the device that is current.
  std::optional<detail::DeviceGuard> device;
  try {
    device.emplace(device_);
  } catch (const std::exception& e) {
    IRIS_LOG_WARN("context teardown on rank ", rank_, " could not make device ", device_, " current: ", e.what());
  }
  // Every stream of the device, not only stream(): calls made on the caller's own streams may still run, and a
  // kernel of theirs reaching the heap once it is unmapped faults or, where a later context maps its heap at the
  // same addresses, writes into that one's objects (before 2026-12-06 only stream() was waited for). Like the
  // other setup calls, a context is destroyed outside CUDA graph captures: a capture open on this device (or, in
  // global mode, on any thread) refuses the device-wide wait, and may end invalidated. Then stream() alone, and
  // the refusal is cleared, so that neither the checks below nor the caller's next one take it for theirs.
  if (cudaDeviceSynchronize() != cudaSuccess) {
    (void)cudaGetLastError();
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  }
  if (guards_ != nullptr && std::uncaught_exceptions() == 0) {
    // Last look (a destructor cannot raise): writes since the last barrier() would go unnoticed.
    try {
      const std::string report = heap_guard_report();
      if (!report.empty()) IRIS_LOG_ERROR("heap guard damaged on rank ", rank_, " at context teardown: ", report);
    } catch (const std::exception& e) {
      IRIS_LOG_ERROR("heap guard check at context teardown failed: ", e.what());
    }
  }
  guards_.reset();
  if (nvtx_on_) nvtx_window_release(heap_->base());
  heap_.reset();  // collective
  allocator_.reset();
  if (error_record_ != nullptr) cudaFreeHost(error_record_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (side_stream_ != nullptr) cudaStreamDestroy(side_stream_);
  for (cudaEvent_t e : ordering_events_) cudaEventDestroy(e);
}

cudaStream_t Context::side_stream() {
  const detail::DeviceGuard device(device_);  // the calling thread may have another device current
  if (side_stream_ == nullptr) {
    int least = 0, greatest = 0;
    IRIS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    IRIS_CUDA_CHECK(cudaStreamCreateWithPriority(&side_stream_, cudaStreamNonBlocking, greatest));
  }
  return side_stream_;
}

cudaEvent_t Context::ordering_event(size_t i) {
  const detail::DeviceGuard device(device_);
  while (ordering_events_.size() <= i) {
    cudaEvent_t e = nullptr;
    IRIS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    ordering_events_.push_back(e);
  }
  return ordering_events_[i];
}

char* Context::heap_base(int r) const {
  IRIS_CHECK_ARG(r >= 0 && r < world_size_, "rank ", r, " is outside [0, ", world_size_, ").");
  return heap_->slot(r);
}

std::vector<char*> Context::heap_bases() const {
  std::vector<char*> bases(world_size_);
  for (int r = 0; r < world_size_; ++r) bases[r] = heap_->slot(r);
  return bases;
}

size_t Context::offset_of(const void* ptr) const {
  auto p = static_cast<const char*>(ptr);
  const char* own = heap_->slot(rank_);
  IRIS_CHECK_ARG(p >= own && p < own + heap_size_, "Pointer ", ptr, " is not in rank ", rank_,
                 "'s symmetric heap [", static_cast<const void*>(own), ", +", heap_size_, ").");
  return static_cast<size_t>(p - own);
}

void* Context::translate_bytes(void* ptr, int to) const {
  IRIS_CHECK_ARG(to >= 0 && to < world_size_, "translate: rank ", to, " is outside [0, ", world_size_, ").");
  return heap_->slot(to) + offset_of(ptr);
}

void* Context::alloc(size_t bytes, size_t alignment) {
  const detail::DeviceGuard device(device_);
  size_t offset = allocator_->allocate(bytes, alignment);
  char* ptr = heap_->slot(rank_) + offset;
  if (guards_ != nullptr) {
    try {
      guards_->fill(heap_->slot(rank_), {allocator_->guard_region(offset)}, stream_);
    } catch (...) {
      // Never handed out, and its guard never written (a fill refused under a caller's graph capture, say):
      // released, so that the next check does not report the unwritten guard as damage (seen on an H100 with
      // guards on: a preamble refused inside a capture left its first array allocated, and the next barrier
      // raised HeapCorruption for it) and the block is not lost.
      allocator_->release(offset);
      throw;
    }
  }
  if (nvtx_heap_ == nullptr) return ptr;
  for (int slot : heap_->registered_slots()) {
    nvtxMemVirtualRangeDesc_t region{};
    region.ptr = heap_->slot(slot) + offset;
    region.size = bytes == 0 ? 1 : bytes;  // exactly what was asked: padding stays out of bounds
    nvtxMemRegionsRegisterBatch_t batch{};
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof(batch);
    batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    batch.heap = static_cast<nvtxMemHeapHandle_t>(nvtx_heap_);
    batch.regionCount = 1;
    batch.regionDescElementSize = sizeof(region);
    batch.regionDescElements = &region;
    nvtxMemRegionsRegister(nvtx_domain(), &batch);
  }
  return ptr;
}

void Context::free(void* ptr) {
  if (ptr == nullptr) return;
  const detail::DeviceGuard device(device_);
  size_t offset = offset_of(ptr);
  if (guards_ != nullptr && allocator_->block_size(offset) > 0) {
    // The freed object's guard is checked now (its block may be reused before the next barrier), and
    // any damage reported collectively at the next check.
    IRIS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const HeapAllocator::GuardRegion r = allocator_->guard_region(offset);
    const detail::GuardDamage d = guards_->inspect(heap_->slot(rank_), r, stream_);
    if (d.changed > 0) freed_damage_.push_back(describe_damage(r, d, /*freed=*/true));
  }
  allocator_->release(offset);
  if (nvtx_heap_ == nullptr) return;
  for (int slot : heap_->registered_slots()) {
    nvtxMemRegionRef_t ref{};
    ref.pointer = heap_->slot(slot) + offset;
    nvtxMemRegionsUnregisterBatch_t batch{};
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof(batch);
    batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
    batch.refCount = 1;
    batch.refElementSize = sizeof(ref);
    batch.refElements = &ref;
    nvtxMemRegionsUnregister(nvtx_domain(), &batch);
  }
}

std::string Context::reach_problem(const void* ptr) const {
  const auto p = static_cast<const char*>(ptr);
  const char* window = heap_->slot(0);
  if (p >= window && p < window + heap_size_ * static_cast<size_t>(world_size_)) return "";
  const detail::DeviceGuard device(device_);  // devicePointer is answered for the current device
  cudaPointerAttributes a{};
  if (detail::relaxed_query([&] { return cudaPointerGetAttributes(&a, ptr); }) != cudaSuccess) {
    (void)cudaGetLastError();  // the query's own error, not a launch's: nothing known, nothing refused
    return "";
  }
  switch (a.type) {
    case cudaMemoryTypeDevice:
      if (a.device == device_) return "";
      return detail::str_cat("is memory of device ", a.device, ", but rank ", rank_, "'s context runs on device ",
                             device_, "; pass memory of device ", device_,
                             " (or an allocation of the symmetric heap).");
    case cudaMemoryTypeManaged:
      return "";
    case cudaMemoryTypeHost:
      if (a.devicePointer == ptr) return "";  // the kernels are handed ptr itself
      return detail::str_cat("is pinned host memory that device ", device_,
                             " reaches at another address or not at all; pass its device address "
                             "(cudaHostGetDevicePointer), or device memory.");
    default:  // cudaMemoryTypeUnregistered: pageable host memory
      if (pageable_access_) return "";
      return detail::str_cat("is pageable host memory, which device ", device_,
                             " cannot read; pass device memory (or pinned, mapped host memory).");
  }
}

bool Context::op_stream_checks_device() {
#if CUDART_VERSION >= 12080
  int driver = 0;
  return cudaDriverGetVersion(&driver) == cudaSuccess && driver >= 12080;
#else
  return false;
#endif
}

cudaStream_t Context::op_stream(const char* op, cudaStream_t stream) const {
  if (stream == nullptr) return stream_;
  if (stream == cudaStreamLegacy || stream == cudaStreamPerThread) return stream;  // device()'s: the op sets it
#if CUDART_VERSION >= 12080  // cudaStreamGetDevice; with older toolkits or drivers the launch's own check stays
  // A stream being captured is taken as given: nothing runs until a replay, and its capture sees the launch
  // fail; only capture-safe queries are made on it (cudaStreamIsCapturing).
  if (detail::capturing(stream)) return stream;
  int device = -1;
  if (detail::relaxed_query([&] { return cudaStreamGetDevice(stream, &device); }) != cudaSuccess) {
    (void)cudaGetLastError();  // a driver before 12.8
    return stream;
  }
  IRIS_CHECK_ARG(device == device_, op, ": the stream belongs to device ", device, ", but rank ", rank_,
                 "'s context runs on device ", device_, "; pass a stream of device ", device_,
                 " (or none, for ctx.stream()).");
#endif
  return stream;
}

bool Context::is_symmetric(const void* ptr) const {
  auto p = static_cast<const char*>(ptr);
  const char* own = heap_->slot(rank_);
  if (p < own || p >= own + heap_size_) return false;
  return allocator_->contains(static_cast<size_t>(p - own));
}

std::string Context::heap_span_problem(const void* ptr, size_t bytes) const {
  const auto p = static_cast<const char*>(ptr);
  const char* window = heap_->slot(0);
  if (bytes == 0) return "";
  // Memory below the window is another allocation: a view reaching into the heap from there spans two.
  if (p < window)
    return bytes > static_cast<size_t>(window - p)
               ? detail::str_cat("starts ", window - p,
                                 " bytes below the symmetric heap and runs into it; pass a view that lies within "
                                 "one allocation.")
               : "";
  if (p >= window + heap_size_ * static_cast<size_t>(world_size_)) return "";
  const int r = static_cast<int>(static_cast<size_t>(p - window) / heap_size_);
  if (r != rank_)
    return detail::str_cat("lies in rank ", r, "'s heap, not in rank ", rank_,
                           "'s; pass this rank's own buffer (the kernels reach peers' memory themselves).");
  const size_t offset = static_cast<size_t>(p - heap_->slot(rank_));
  const auto span = allocator_->live_span(offset);
  if (!span)
    return detail::str_cat("lies in this rank's heap at offset ", offset,
                           " but in no live allocation; pass a buffer that is allocated (was it freed?).");
  const size_t end = span->offset + span->requested;
  // (not offset + bytes > end, which a huge view's bytes could wrap; offset may lie in the padding past end)
  if (offset > end || bytes > end - offset)
    return detail::str_cat("runs ", offset + bytes - end, " bytes past the end of its heap allocation (",
                           span->requested, " bytes at heap offset ", span->offset,
                           "); pass a view that lies within one allocation.");
  return "";
}

size_t Context::heap_bytes_in_use() const { return allocator_->bytes_in_use(); }
size_t Context::heap_guard_bytes() const { return allocator_->guard_bytes(); }
size_t Context::heap_bytes_free() const { return allocator_->bytes_free(); }
uint64_t Context::allocation_hash() const { return allocator_->sequence_hash(); }
uint64_t Context::allocation_count() const { return allocator_->sequence_length(); }

std::string Context::heap_guard_report() {
  std::string report;
  auto add = [&report](const std::string& s) { report += (report.empty() ? "" : "; ") + s; };
  const std::vector<HeapAllocator::GuardRegion> regions = allocator_->guard_regions();
  char* heap = heap_->slot(rank_);
  const detail::GuardCheck c = guards_->check(heap, regions, stream_);
  if (c.first != SIZE_MAX) {
    for (const HeapAllocator::GuardRegion& r : regions) {
      if (c.first < r.begin || c.first >= r.end) continue;
      add(describe_damage(r, guards_->inspect(heap, r, stream_), /*freed=*/false));
      break;
    }
    if (c.damaged_regions > 1) add(detail::str_cat("and ", c.damaged_regions - 1, " more damaged guard(s)"));
    guards_->fill(heap, regions, stream_);  // restored: the next check reports only new damage
  }
  for (const std::string& s : freed_damage_) add(s);
  freed_damage_.clear();
  return report;
}

// Every rank's stream is done before the exchanges that follow. A rank whose stream failed (a sticky
// CUDA error) still takes part, so that its peers raise with its error instead of waiting for it in
// those exchanges until the bootstrap timeout.
void Context::finish_stream_everywhere(const char* what, bool device_errors) {
  detail::agree(*bootstrap_, what, [&] {
    const detail::DeviceGuard device(device_);
    if (device_errors)
      synchronize();  // a kernel stopped by IRIS_DEVICE_CHECKS raises its recorded reason, not the CUDA error
    else
      IRIS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  });
}

void Context::check_heap_guards() {
  if (guards_ == nullptr) return;
  // Every rank's stream is done first: a peer's kernel may write (past an object) into this heap.
  finish_stream_everywhere("to finish its stream for the heap guard check");
  exchange_heap_guard_reports();
}

void Context::exchange_heap_guard_reports() {
  // Each rank's report travels in the agreed step's own exchange.
  const std::vector<std::string> all = detail::agree_gather(*bootstrap_, "to read its heap guards", [&] {
    const detail::DeviceGuard device(device_);
    return heap_guard_report();
  });
  std::string damage;
  for (int r = 0; r < world_size_; ++r)
    if (!all[r].empty()) damage += detail::str_cat(damage.empty() ? "" : "; ", "on rank ", r, ": ", all[r]);
  if (!damage.empty())
    throw HeapCorruption(
        "Heap guard damaged " + damage +
        ". A kernel wrote past the end of a heap object (or before the start of the next) since the last check "
        "(heap guards are checked at barrier() and free()); the guards are restored.");
}

void Context::check_heap_symmetry() {
  struct Seq {
    uint64_t hash, count;
  } mine{allocator_->sequence_hash(), allocator_->sequence_length()};
  auto all = bootstrap_->allgather(pod_bytes(mine));
  bool same = true;
  std::string detail;
  for (int r = 0; r < world_size_; ++r) {
    auto s = pod_from<Seq>(all[r], "the comparison of heap allocation sequences (barrier(), check_heap_symmetry())",
                           rank_, r);
    same = same && s.hash == mine.hash && s.count == mine.count;
    char hex[32];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(s.hash));
    detail += detail::str_cat(r == 0 ? "" : ", ", "rank ", r, " made ", s.count, " (hash ", hex, ")");
  }
  if (!same)
    throw InvalidArgument("Heap allocation sequence differs across ranks: " + detail +
                          " alloc/free calls. Every rank must allocate and free the same sizes in the same order.");
}

void Context::barrier() {
  // A device error this rank's kernels recorded (a timeout, a misuse, calls that differ) is part of the
  // agreed finish: its peers raise RemoteError naming it together with it, instead of passing the
  // barrier and launching calls whose waits for this rank would time out one by one.
  finish_stream_everywhere("to finish its stream in barrier()", /*device_errors=*/true);
  if (guards_ != nullptr) exchange_heap_guard_reports();
  check_heap_symmetry();
}

void Context::synchronize() {
  const cudaError_t status = cudaStreamSynchronize(stream_);
  // A kernel that IRIS_DEVICE_CHECKS stopped (a trap) left why in the record: that, not "unspecified launch failure".
  if (status != cudaSuccess) check_device_error();
  IRIS_CUDA_CHECK(status);
  check_device_error();
}

void Context::check_device_error() {
  DeviceErrorRecord copy{};
  if (!detail::take_device_error(*error_record_, copy, error_record_abandoned_)) return;
  // Counted whatever the code: a misuse also made every bounded wait of this rank's running kernels give
  // up (timeout.cuh), so workspaces and barriers may be out of step all the same.
  ++device_timeouts_;
  detail::throw_device_error(copy);
}

void run_threads(int world_size, const std::function<void(Context&)>& fn, const ContextOptions& options) {
  IRIS_CHECK_ARG(world_size >= 1, "run_threads needs at least one rank, got ", world_size, ".");
  int count = local_device_count();
  IRIS_CHECK_ARG(world_size <= count, "run_threads needs ", world_size, " GPUs (one per rank) but ", count,
                 " CUDA device(s) are visible.");
  auto timeout = options.bootstrap_timeout.count() > 0 ? options.bootstrap_timeout : default_bootstrap_timeout();
  auto bootstraps = make_thread_bootstraps(world_size, timeout);
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  const auto rank_main = [&](int r) {
    ContextOptions opts = options;
    if (opts.device < 0) opts.device = r;
    std::unique_ptr<Context> ctx;
    try {
      ctx = std::make_unique<Context>(bootstraps[r], opts);
      fn(*ctx);
    } catch (const std::exception& e) {
      errors[r] = std::current_exception();
      bootstraps[r]->abort(e.what());
    } catch (...) {
      errors[r] = std::current_exception();
      bootstraps[r]->abort("unknown exception");
    }
    try {
      ctx.reset();
    } catch (...) {
      if (!errors[r]) errors[r] = std::current_exception();
    }
    set_thread_rank(-1, -1);
  };
  for (int r = 0; r < world_size; ++r) {
    try {
      threads.emplace_back(rank_main, r);
    } catch (const std::exception& e) {
      // The ranks started wait for this one in their first exchange: stopped with the reason and joined, and
      // the reason raised (before 2026-12-07 the vector of joinable threads went out of scope: std::terminate).
      // std::thread raises system_error (a thread limit), or bad_alloc.
      const std::string why =
          detail::str_cat("run_threads could not start the thread of rank ", r, " of ", world_size, " (", e.what(),
                          "): raise the process's thread limit (ulimit -u) or run fewer ranks.");
      bootstraps[r]->abort(why);
      for (auto& t : threads) t.join();
      if (const auto* sys = dynamic_cast<const std::system_error*>(&e)) throw SysError(why, sys->code().value());
      throw Error(why);
    }
  }
  for (auto& t : threads) t.join();
  // Prefer the root cause over the RemoteErrors it caused on the other ranks.
  std::exception_ptr first_remote;
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const RemoteError&) {
      if (!first_remote) first_remote = e;
    } catch (...) {
      std::rethrow_exception(e);
    }
  }
  if (first_remote) std::rethrow_exception(first_remote);
}

}  // namespace iris
