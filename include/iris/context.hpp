// iris::Context: one rank's view of the job: rank, world size, device, stream, symmetric heap,
// host barrier, and the POD device handle kernels receive.
//
//   // one process per GPU (torchrun, mpirun, srun):
//   auto ctx = iris::Context::create_from_env();
//   // one thread per local GPU:
//   iris::run_threads(iris::local_device_count(), [](iris::Context& ctx) { ... });
//
// Heap allocation is collective: every rank makes the same alloc/free calls in the same order, so
// an allocation has the same offset in every rank's heap. alloc/free talk to no other rank (no
// hidden collective); instead they extend a running hash of the allocation sequence that every
// barrier() and every op's preamble compare across ranks, and a rank out of step makes every rank throw.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "iris/core/error.hpp"
#include "iris/device/device_context.hpp"
#include "iris/runtime/bootstrap.hpp"

namespace iris {

class SymmetricHeap;
class HeapAllocator;
namespace detail {
class HeapGuards;
}

struct ContextOptions {
  // Bytes per rank's heap; 0 takes IRIS_HEAP_SIZE (bytes, or with a K/M/G suffix) or 1 GiB.
  // Rounded up to the VMM allocation granularity. Must be the same on every rank.
  size_t heap_size = 0;
  // CUDA device of this rank; -1 takes the local rank.
  int device = -1;
  // Bound on host bootstrap operations; 0 takes IRIS_BOOTSTRAP_TIMEOUT or 300 s.
  std::chrono::milliseconds bootstrap_timeout{0};
  // Bound on every device-side spin, at most 10^9 s; 0 takes IRIS_DEVICE_TIMEOUT (seconds) or 10 s.
  std::chrono::milliseconds device_timeout{0};
  // Debug mode (also IRIS_HEAP_GUARDS=1): every heap allocation takes heap_guard_bytes() more, which
  // with the padding after the request hold a pattern; barrier() checks every live allocation's guard
  // and free() the freed one's, and a changed guard (a kernel wrote past the end of a heap object)
  // raises HeapCorruption on every rank at the next barrier(), naming the rank, the object and the
  // bytes; the guard is then restored. Must be the same on every rank.
  bool heap_guards = false;
  // Debug mode (also IRIS_CHECK_CALLS=1): every call of an iris::ccl collective or an iris::ops fused op
  // first compares itself across ranks through the bootstrap: the op, shapes, dtype, the config's
  // choices, the workspace (its heap offset) and how many calls it has served. A call that differs on any
  // rank, or that a rank refused, raises InvalidArgument on every rank, naming both calls, before
  // anything is launched: instead of a hang, or peers reading and writing each other's buffers in other
  // layouts. Costs a host round trip per call; a CUDA graph replays calls checked when it was captured.
  // Must be the same on every rank.
  bool check_calls = false;
  // Loads every iris kernel into the device's context while the Context is created (IRIS_LOAD_KERNELS=0
  // turns it off), as NCCL does when a communicator is created, raises the device's stack limit to the
  // deepest iris kernel's need (1344 bytes per thread with the GEMM core) and sets up the printf buffer
  // that every iris kernel's error path names. Otherwise each of those happens at a first launch and waits
  // until every kernel the process has running on the device has ended: the first call of an op then
  // overlaps nothing, and a kernel that waits on the GPU for an iris call made after it keeps that call
  // from running. Takes 0.1-0.2 s; a driver older than CUDA 12.5 cannot load ahead, which is logged as a
  // warning.
  bool load_kernels = true;
};

// Heap size from IRIS_HEAP_SIZE ("1073741824", "512M", "2G", "64K"), or 1 GiB when unset.
// Throws InvalidArgument with the accepted forms when malformed.
size_t heap_size_from_env();
// Parses a byte count with optional K/M/G/T suffix (powers of 1024).
size_t parse_byte_size(const std::string& text);
// Device timeout from IRIS_DEVICE_TIMEOUT (seconds, from 0.001 to 10^9, fractions allowed), or 10 s when unset.
// Throws InvalidArgument naming the range otherwise ("inf" included: the device's clock counts to 10^9 s).
std::chrono::milliseconds device_timeout_from_env();

class Context {
 public:
  // One process per rank, from the launcher's environment (see detect_launch_info()): a TCP store on
  // MASTER_PORT between the ranks; a job of one rank (no launcher, or a launcher's world of 1) takes no port.
  static std::unique_ptr<Context> create_from_env(const ContextOptions& options = {});

  // Collective over `bootstrap`'s ranks: creates this rank's heap, exchanges it with every peer and
  // maps every peer's heap. Throws on every rank together when ranks disagree (heap size...).
  explicit Context(std::shared_ptr<Bootstrap> bootstrap, const ContextOptions& options = {});
  // Collective: waits for the kernels of every stream of this device (a call made on a stream of the caller's
  // may still run), then for every rank (so no peer still reads this heap), then unmaps and releases. Threads
  // of a job that failed keep their heaps mapped until the last of them is destroyed (a peer's kernel may
  // still reach them until its device timeout).
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }
  // ContextOptions::check_calls, or IRIS_CHECK_CALLS=1.
  bool check_calls() const { return check_calls_; }
  // A non-blocking stream owned by the context, on device().
  cudaStream_t stream() const { return stream_; }
  // A second non-blocking stream on device(), at the highest priority, created on first use: ops that
  // overlap communication with computation (iris::ops) fork onto it from the caller's stream with events
  // and join back before they return, so it never outlives a call and is capturable in CUDA graphs.
  cudaStream_t side_stream();
  // The context's i-th reusable event (cudaEventDisableTiming, on device()), created on first use and
  // destroyed with the context: the events with which an op orders side_stream() against the caller's
  // stream. A call records one and makes a stream wait on it before it returns (a wait binds the record
  // it follows, so the next call may record the same event again), instead of creating and destroying
  // events on every call.
  cudaEvent_t ordering_event(size_t i);
  // How many of those events exist (the fused ops' preambles create as many as one call uses).
  size_t ordering_events_created() const { return ordering_events_.size(); }
  Bootstrap& bootstrap() { return *bootstrap_; }

  // ---- heap ------------------------------------------------------------------------------------
  size_t heap_size() const { return heap_size_; }
  // A number no other Context of this process has had (from 1). A workspace records it with its arrays:
  // a context created after another was destroyed may map its heap at the same addresses, where arrays of
  // the destroyed heap would lie inside this one's allocations.
  uint64_t heap_id() const { return heap_id_; }
  // Address at which rank r's heap is mapped in this rank's address space.
  char* heap_base(int r) const;
  std::vector<char*> heap_bases() const;
  // Same object in rank `to`'s heap; ptr must point into this rank's heap.
  template <typename T>
  T* translate(T* ptr, int to) const {
    return reinterpret_cast<T*>(translate_bytes(const_cast<void*>(static_cast<const void*>(ptr)), to));
  }

  // Collective allocation: same offset on every rank; alignment a power of two, raised to 256, at most the
  // heap's allocation granularity (2 MiB on H100 and H200; above it InvalidArgument).
  // Throws InvalidArgument when the heap cannot fit the request (naming the size and free space).
  void* alloc(size_t bytes, size_t alignment = 256);
  // Collective free of a pointer returned by alloc (or a typed helper). Reused by later allocations.
  // It does not wait (unlike cudaFree): the next alloc may hand the block out at once, and its fill runs on
  // stream(). The caller makes sure no queued work still reads or writes it: work on other streams than
  // stream() synchronized first, and, for a buffer peers write into (a fused op's C on the heap), a barrier()
  // after every rank's calls on it have finished.
  void free(void* ptr);
  // True when ptr points into a live allocation of this rank's heap.
  bool is_symmetric(const void* ptr) const;
  // Why the bytes [ptr, ptr + bytes) may not be an op's argument, as the rest of a sentence that starts
  // with the argument's name, or "" when they may: they lie outside every rank's heap (device memory of the
  // caller's own), or within the bytes of one live allocation of this rank's heap. Otherwise they lie in a
  // peer's heap, in no live allocation, or run past the end of theirs (an output described larger than
  // it was allocated, which would write into the next heap object), or start below the heap and run into it.
  std::string heap_span_problem(const void* ptr, size_t bytes) const;
  // Why this rank's kernels (on device()) cannot reach ptr, as the rest of a sentence that starts with the
  // argument's name, or "" when they can: the symmetric window (heap_span_problem's to judge), device memory
  // of device(), managed memory, host memory mapped for the device, and pageable host memory where the device
  // reads it (HMM, ATS). Memory of another device (iris enables no peer access but its heap's, and looks at
  // none the caller enabled: pass memory of device()) or pageable memory elsewhere would fault in the
  // kernel: a sticky error that ends this process's use of the device, while its peers wait out their device
  // timeouts. One cudaPointerGetAttributes outside the window. Refused at one rank too, where the op is a
  // cudaMemcpyAsync that could take it: a program then runs alike at every world size.
  std::string reach_problem(const void* ptr) const;
  // The stream an op runs on: `stream`, or stream() for nullptr (not CUDA's legacy default stream: pass
  // cudaStreamLegacy for that, which, as cudaStreamPerThread, means device()'s). Throws InvalidArgument,
  // naming `op`, for a stream of another device: a kernel launched there fails after the peers have
  // launched theirs, which would then wait out their device timeouts. Needs a CUDA 12.8 toolkit and driver
  // (cudaStreamGetDevice); with older ones, and for a stream being captured, the stream is taken as given. Every op and
  // DeviceBarrier::arrive_and_wait resolve their stream here.
  cudaStream_t op_stream(const char* op, cudaStream_t stream) const;
  // True when op_stream can tell a stream's device (CUDA 12.8 toolkit and driver).
  static bool op_stream_checks_device();
  // Offset of ptr within this rank's heap (throws InvalidArgument when not in the heap).
  size_t offset_of(const void* ptr) const;

  // Typed helpers. Fills run on stream() and are complete when they return. A count whose bytes overflow
  // size_t is refused (it would wrap to a small allocation that the fills then run past). A fill that fails
  // (a CUDA error) throws with the allocation still made, as it is on every peer whose fill passed, so that
  // the ranks' allocation sequences stay the same: its bytes stay in use until the context ends.
  template <typename T>
  T* empty(size_t count) {
    IRIS_CHECK_ARG(count <= SIZE_MAX / sizeof(T), "Context::empty: ", count, " elements of ", sizeof(T),
                   " bytes overflow a byte count; no heap holds them.");
    return static_cast<T*>(alloc(count * sizeof(T), alignof(T) > 256 ? alignof(T) : 256));
  }
  template <typename T>
  T* zeros(size_t count) {
    T* p = empty<T>(count);
    fill_bytes(p, 0, count * sizeof(T));
    return p;
  }
  template <typename T>
  T* full(size_t count, T value) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                  "Context::full fills elements of 1, 2, 4, 8 or 16 bytes");
    T* p = empty<T>(count);
    fill_pattern(p, &value, sizeof(T), count);
    return p;
  }
  // Uniform random values in [lo, hi) for float/double/int32/uint32/int64/uint64, __half and
  // __nv_bfloat16 (instantiated in src/runtime/heap_fill.cu). Deterministic in (seed, index).
  template <typename T>
  T* random(size_t count, uint64_t seed, double lo = -1.0, double hi = 1.0);

  size_t heap_bytes_in_use() const;
  size_t heap_bytes_free() const;
  // Heap bytes each allocation takes beyond its whole 256-byte units: 0, or 256 with heap guards.
  size_t heap_guard_bytes() const;
  // Running hash of this rank's alloc/free sequence and its length.
  uint64_t allocation_hash() const;
  uint64_t allocation_count() const;

  // ---- synchronization -------------------------------------------------------------------------
  // Host barrier: synchronizes stream(), then waits for every rank; also compares the allocation
  // sequence across ranks and throws InvalidArgument on every rank when they differ, and with heap
  // guards checks them (check_heap_guards). A rank whose stream fails raises its CUDA error, and one
  // whose kernels recorded a device error raises it (check_device_error); its peers raise RemoteError
  // naming it (they neither wait for it nor pass the barrier without it).
  void barrier();
  // Collective, with heap guards (nothing without): synchronizes stream(), waits for every rank (whose
  // kernels may write into this heap), checks the guard of every live allocation (and reports those of
  // objects freed since the last check), and throws HeapCorruption on every rank when any rank's guard
  // changed; the guards are then restored.
  void check_heap_guards();
  // Compares the allocation sequence across ranks without synchronizing the stream (collective).
  void check_heap_symmetry();
  // Throws TimeoutError if a kernel launched with device_context() recorded a timeout, InvalidArgument
  // if it recorded a misuse (an argument out of range, e.g. a barrier slot); the record is cleared.
  void check_device_error();
  // How many device errors (those TimeoutErrors and misuses) check_device_error() has raised on this
  // rank: either leaves the running kernels' waits given up. Workspaces note it when
  // prepared: the ops refuse a workspace prepared before a timeout since (its flags and epochs may be
  // out of step between ranks), and preparing it again starts its state over on every rank.
  uint64_t device_timeouts() const { return device_timeouts_; }
  // Synchronizes stream(), then check_device_error(). A synchronization that fails raises the recorded device
  // error when there is one (a kernel that IRIS_DEVICE_CHECKS stopped with a trap, device/memory.cuh), else the
  // CUDA error.
  void synchronize();

  // POD handle for kernels; valid while this Context lives.
  DeviceContext device_context() const { return device_ctx_; }
  std::chrono::milliseconds device_timeout() const { return device_timeout_; }

 private:
  void* translate_bytes(void* ptr, int to) const;
  void fill_bytes(void* dst, int value, size_t bytes);
  void fill_pattern(void* dst, const void* pattern, size_t pattern_size, size_t count);
  // barrier()'s and check_heap_guards()'s steps, each agreed across the ranks (a rank that fails one
  // tells its peers instead of leaving them waiting in the next exchange).
  // With `device_errors`, a device error recorded on a rank fails its step too (barrier()).
  void finish_stream_everywhere(const char* what, bool device_errors = false);
  void exchange_heap_guard_reports();
  // This rank's damaged heap guards (restored), and those found at free(); empty when none.
  std::string heap_guard_report();

  std::shared_ptr<Bootstrap> bootstrap_;
  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_stream_ = nullptr;
  std::vector<cudaEvent_t> ordering_events_;
  size_t heap_size_ = 0;
  uint64_t heap_id_ = 0;
  std::chrono::milliseconds device_timeout_{10000};
  uint64_t device_timeouts_ = 0;
  bool check_calls_ = false;
  std::unique_ptr<SymmetricHeap> heap_;
  std::unique_ptr<HeapAllocator> allocator_;
  DeviceErrorRecord* error_record_ = nullptr;  // pinned, mapped host memory
  bool error_record_abandoned_ = false;        // its claim reported before its writer finished (take_device_error)
  DeviceContext device_ctx_{};
  std::unique_ptr<detail::HeapGuards> guards_;  // heap guards on
  std::vector<std::string> freed_damage_;       // found at free(), reported at the next check
  bool pageable_access_ = false;                // device() reaches pageable host memory (HMM, ATS): reach_problem
  bool nvtx_on_ = false;        // IRIS_NVTX_HEAP=1
  void* nvtx_heap_ = nullptr;  // nvtxMemHeapHandle_t of this process's heap window (shared in threads mode)
};

// Number of CUDA devices visible to this process (0 when there is no driver or no device).
int local_device_count();

// Whether this iris library was built with its own kernels checked (CMake option IRIS_DEVICE_CHECKS=ON, a debug
// build): every translation of theirs to a peer checks the rank and that the object lies in this rank's heap
// (device/memory.cuh), and a wrong one stops the kernel before the access. Their times are then not what a
// release build's are.
bool library_device_checks() noexcept;

// Runs fn on `world_size` threads, thread r with its own Context of rank r on device r (contexts
// share one process and one symmetric window). If any rank throws, the other ranks are released
// from blocking bootstrap operations with RemoteError, every thread is joined, and the first
// exception is rethrown to the caller.
void run_threads(int world_size, const std::function<void(Context&)>& fn, const ContextOptions& options = {});

}  // namespace iris
