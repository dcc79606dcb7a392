// Workspaces: the per-op state that lives on the symmetric heap between calls.
//
// A workspace records what it was prepared for (operation, shape, dtype, world size, variant and
// block sizes) and owns the heap arrays that the variant's kernels index:
//   locks        one 32-bit word per output tile                      (spinlock)
//   flags        total_tiles * flags_per_tile 64-bit words             (ring, two_shot, atomic)
//   staging      bytes for data pushed by peers                         (one_shot, two_shot, ...)
//   block_state  8 + 3 * world_size 64-bit words (epochs, layout fence, call words, LL cleans) (every op alike)
//
// Preparing (a *preamble*) is collective: it compares the call's parameters across ranks (ranks that
// disagree all raise together), allocates every array that is missing, keeps an array larger than
// needed (no shrink churn), and rejects an array that is too small with iris::WorkspaceTooSmall (a
// std::invalid_argument, include/iris/core/error.hpp):
//   Lock array too small: have 16 but need 64. Pre-allocate workspace with the smallest block sizes you intend to use.
// Every op checks capacity again right before launch, whether or not the preamble ran, so a
// workspace prepared for large tiles can never be used to index past its arrays (the founding bug).
//
// Each array is sized by the first preamble that needs it. Smaller blocks need more locks and flags, larger
// blocks (and larger tensors) more staging, so no single call may size a workspace for a set of calls:
// reserve room for all of them first (iris::ccl::reserve_workspace in collectives.hpp,
// WorkspaceNeeds::include), then each call's preamble keeps the arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "iris/ccl/config.hpp"
#include "iris/core/call_order.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/tensor.hpp"

namespace iris {
class Context;
}

namespace iris::ccl {

enum class OpKind : uint8_t {
  kNone = 0,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  // Fused GEMM + communication ops (iris::ops, include/iris/ops/fused.hpp).
  kMatmulAllReduce,
  kMatmulReduceScatter,
  kAllGatherMatmul,
  kMatmulAllGather,
  kAllGatherMatmulKSharded,
};
const char* op_name(OpKind op);

// What a workspace needs from the runtime: collective heap allocation, zeroing, and host exchange.
// A Context provides it (context_host()); host tests provide one backed by host memory.
class WorkspaceHost {
 public:
  virtual ~WorkspaceHost() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual void* alloc(size_t bytes) = 0;  // collective, 256-byte aligned
  virtual void free(void* ptr) = 0;       // collective
  virtual void zero(void* ptr, size_t bytes) = 0;  // complete on return
  virtual std::vector<std::string> allgather(std::string_view mine) = 0;
  // Device timeouts raised on this rank so far (Context::device_timeouts()), and a wait until every
  // kernel on this rank's device has ended; a host without a device has neither.
  virtual uint64_t device_timeouts() const { return 0; }
  virtual void synchronize_device() {}
  // This rank's heap alloc/free calls so far and their running hash (Context::allocation_count() and
  // allocation_hash()): the preamble compares them across ranks before it allocates, since peers reach
  // the workspace's arrays at this rank's offsets of them. A host without a heap of its own: 0, 0.
  virtual uint64_t allocation_count() const { return 0; }
  virtual uint64_t allocation_hash() const { return 0; }
  // True when ptr lies in a live allocation of this host's heap (Context::is_symmetric): a workspace whose
  // arrays do not was prepared with another Context, or with one since destroyed (or its arrays were freed
  // behind its back), and its kernels would reach peers at offsets of another heap.
  virtual bool holds(const void* ptr) const = 0;
  // A number no other heap of this process has had (Context::heap_id()). A workspace records it with its
  // arrays: a heap created after another was destroyed may lie at the same addresses, where holds() would
  // take the destroyed heap's arrays for live allocations of its own.
  virtual uint64_t heap_id() const = 0;
  // Byte offset of ptr, a live allocation of this host's heap, within the heap (Context::offset_of), the
  // same on every rank for the same collective allocation; -1 for a host without a heap of its own.
  virtual int64_t heap_offset(const void* ptr) const {
    (void)ptr;
    return -1;
  }
  // True while the context's stream is being captured into a CUDA graph, which can capture none of a
  // reservation's allocations, memsets and synchronizations; a host without a device: false.
  virtual bool capturing() const { return false; }
};

// Number of tiles of a rows x cols tensor in block_m x block_n tiles: ceil(M/bm) * ceil(N/bn).
int64_t tile_count(int64_t rows, int64_t cols, int block_m, int block_n);

// The exact user-facing capacity errors.
void check_lock_capacity(size_t have, size_t need);
void check_flag_capacity(size_t have, size_t need);
void check_staging_capacity(size_t have, size_t need);
void check_block_state_capacity(size_t have, size_t need);

// What one call needs, in elements of each array (bytes for staging).
struct WorkspaceNeeds {
  size_t locks = 0;
  size_t flags = 0;
  size_t staging_bytes = 0;
  size_t block_state = 0;

  // Grows each array to hold `other`'s need too: what a workspace that serves both calls needs.
  WorkspaceNeeds& include(const WorkspaceNeeds& other);
  bool operator==(const WorkspaceNeeds&) const = default;
  std::string describe() const;
};

// Heap bytes a fresh workspace takes for `needs`: each array the preamble allocates (locks of 4 bytes,
// flags and block state of 8, the staging), rounded up to the heap's 256-byte blocks, plus `guard_bytes`
// per array (Context::heap_guard_bytes(): 0, or 256 with heap guards on).
size_t heap_bytes(const WorkspaceNeeds& needs, size_t guard_bytes = 0);

// The parameters a workspace is prepared for, and compared across ranks.
struct OpSignature {
  OpKind op = OpKind::kNone;
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kFloat32;
  int world_size = 0;
  AllReduceVariant variant = AllReduceVariant::kAuto;  // the resolved variant (never kAuto once prepared)
  // all_reduce one_shot: the resolved protocol (kAuto for every other call).
  OneShotProtocol protocol = OneShotProtocol::kAuto;
  int block_size_m = 0;
  int block_size_n = 0;
  int root = -1;  // broadcast
  ReduceOp reduce_op = ReduceOp::kSum;
  int64_t depth = 0;  // fused ops: K of the GEMM (0 for collectives)
  // fused ops: whether the call adds a bias. Every rank passes one, or none: the reducing ops add it once,
  // some variants from rank 0 and others from the rank that owns a band, so a bias on some ranks only
  // would be added to some rows only (or to none), silently.
  bool bias = false;
  // matmul_all_gather and matmul_all_reduce two_shot through the band pipeline with peers (not unfused,
  // not one rank): C lies on the symmetric heap, so peers write their rows straight into it, at the heap offset of
  // their own C: output_offset, C's byte offset in the heap
  // (-1 when C is elsewhere). Part of the signature so that every rank takes the same path and has C at
  // the same offset (a peer writing into a heap that holds no C, or holds it elsewhere, would corrupt
  // what lies there), and so that a call whose C is not where the preamble saw it is refused.
  bool symmetric_output = false;
  int64_t output_offset = -1;
  // all_gather, reduce_scatter and all_to_all between ranks: the block bytes up to which they take the
  // LL exchange (IRIS_LL_MAX_BYTES, or the measured rule), -1 for every other call. Ranks that differ
  // here would take different protocols over one staging and misread each other's words, so it is
  // compared like the shapes.
  int64_t ll_max_bytes = -1;
  // Choices of the config, or of the device, that the ranks' kernels must share beyond the shape (0, or
  // -1 for distribution, where the call has none). Ranks that differ here would read each other's flags
  // and staging in other layouts: the same tile index naming other rectangles (swizzle) or another
  // owner (distribution) silently, or waits that chain into the timeout (the ring's rings, slices and
  // grid; a fused op's bands). all_reduce's tile variants: swizzle_size, which orders tile t's
  // rectangle; two_shot: all_reduce_distribution; ring: all_reduce_num_rings, the columns of a slice
  // (ring_slice_n) and the grid (comm_sms, or the device's SMs); fused ops: the fusion threshold
  // (FusedConfig::min_band_tiles as resolved for the device), which decides unfused or banded and the bands.
  int swizzle = 0;
  int distribution = -1;
  int rings = 0;
  int slice_n = 0;
  int grid = 0;
  int min_band_tiles = 0;
  // fused ops: the GEMM's operand types, A's (and B's) and C's, as 256 * A's DType + C's (-1 for collectives).
  // `dtype` is the type that crosses ranks (C's, or A's for the gathering ops): ranks whose other type differs
  // would sum, or place, products of different inputs without a word (before 2026-12-07 a bf16 and an fp16
  // rank with float32 C passed the preamble, the ready tags and IRIS_CHECK_CALLS).
  int operand_dtypes = -1;

  bool operator==(const OpSignature&) const = default;
  std::string describe() const;
  // A 64-bit hash of every field operator== compares: equal signatures have equal keys, and signatures that
  // differ have different keys but by a 2^-64 chance. A collective's kernels store it in the workspace's
  // call words, which a wait that gives up compares with its peers' (DeviceContext::call_words).
  uint64_t key() const;
};

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  Workspace(Workspace&& other) noexcept;
  Workspace& operator=(Workspace&& other) noexcept;
  // Arrays stay allocated until release() (collective) or the Context goes away with its heap.
  ~Workspace() = default;

  // True when prepared for exactly this operation, shape, dtype, world size, variant and block sizes (and
  // the config's choices the signature carries).
  bool matches(const OpSignature& sig) const { return prepared_ && sig == signature_; }
  bool prepared() const { return prepared_; }
  const OpSignature& signature() const { return signature_; }

  // Collective: makes sure every array holds at least `needs` (allocating and zeroing the missing
  // ones, keeping larger ones, throwing for smaller ones), after checking that every rank passed the
  // same signature and has made the same heap allocations so far (else the arrays would lie at other
  // offsets on other ranks, and peers would write into whatever lies at theirs). On any error every
  // rank throws. When any rank has raised a device timeout since the workspace was last prepared,
  // every rank waits for its device's kernels to end and zeroes every array, epochs included: the
  // calls start over in step on every rank.
  void prepare(WorkspaceHost& host, const OpSignature& sig, const WorkspaceNeeds& needs);
  // Collective: allocates and zeroes arrays of `needs` in a workspace that holds none (never prepared or
  // reserved, or released), for no call yet: the preambles that follow keep them and check each call's
  // needs against them, as they would a preamble's arrays. The workspace stays unprepared, so a call
  // without its preamble is refused. Every rank must pass the same needs, and a workspace that holds
  // arrays is refused, on every rank together.
  void reserve(WorkspaceHost& host, const WorkspaceNeeds& needs);
  // Collective, for Context::check_calls() (IRIS_CHECK_CALLS): compares the call about to be launched with
  // this workspace, `sig` (its plan's signature), with every rank's, together with which workspace (the heap
  // offset of its arrays) and which call on it (calls() + 1). A rank that refused the call passes a null
  // sig and its reason as `refusal`, and returns (it then raises its own error). Throws InvalidArgument
  // on every other rank when any rank's call differs, or was refused, naming both.
  void check_call(WorkspaceHost& host, const OpSignature* sig, std::string_view refusal = {}) const;
  // Throws the capacity errors when this workspace cannot serve `needs` (no communication).
  void check_capacity(const WorkspaceNeeds& needs) const;
  // One of the arrays this workspace holds (null when it holds none): every array of a workspace comes from
  // the heap of the host that allocated it.
  const void* any_array() const;
  // True when this workspace holds no arrays, or holds them on `host`'s heap: allocated there (the heap's
  // id, recorded with them) and still live allocations of it.
  bool arrays_on(const WorkspaceHost& host) const;
  // The heap_id() of the host whose heap holds the arrays (0 while it holds none).
  uint64_t heap_id() const { return heap_id_; }
  // Collective: waits until no kernel of any rank can still reach the arrays (each rank's device
  // synchronized, then every rank), then frees every array and leaves the workspace fresh, also when a free
  // throws (the first error is raised after). A workspace whose arrays are not on this host's heap
  // (arrays_on) is refused after the wait, with nothing freed on that rank. A CUDA graph captured with the
  // workspace must not be replayed after it: its kernels hold the freed arrays (as with cudaFree under a graph).
  void release(WorkspaceHost& host);

  uint32_t* locks() const { return locks_; }
  uint64_t* flags() const { return flags_; }
  void* staging() const { return staging_; }
  uint64_t* block_state() const { return block_state_; }
  size_t lock_capacity() const { return lock_capacity_; }
  size_t flag_capacity() const { return flag_capacity_; }
  size_t staging_capacity() const { return staging_capacity_; }
  size_t block_state_capacity() const { return block_state_capacity_; }
  // What the arrays held now can serve, as needs (0 for an array not allocated).
  WorkspaceNeeds capacity() const { return {lock_capacity_, flag_capacity_, staging_capacity_, block_state_capacity_}; }
  // Number of calls launched with this workspace (host-side count, for logs and tests).
  uint64_t calls() const { return calls_; }
  void count_call() { ++calls_; }
  // Every call that launches kernels reaching this workspace's arrays: begin_call(s) before its first
  // launch on its stream s, end_call(s) after its last, which also counts it. Calls then run in the
  // order they were made, on any streams (iris::CallOrder, include/iris/core/call_order.hpp, says why and
  // what it costs): each op's reuse of its staging, flags and epochs between calls holds for calls that
  // run in turn.
  void begin_call(cudaStream_t stream) { order_.before(stream); }
  void end_call(cudaStream_t stream) {
    order_.after(stream);
    ++calls_;
  }
  // The host's device_timeouts() when this workspace was last prepared (the ops compare it).
  uint64_t device_timeouts_at_prepare() const { return timeouts_; }

 protected:
  // release() of several workspaces of this rank with one wait: each rank's device synchronized once, every
  // rank once, then every array of each freed. A rank whose device failed frees too, and raises the error
  // last. FusedWorkspace releases its own arrays and its collective's this way; users call release(), so
  // the list (non-null workspaces of this rank) is never an argument to validate.
  static void release_all(WorkspaceHost& host, std::initializer_list<Workspace*> workspaces);

 private:
  void allocate_missing(WorkspaceHost& host, const WorkspaceNeeds& needs);

  bool prepared_ = false;
  OpSignature signature_{};
  uint32_t* locks_ = nullptr;
  uint64_t* flags_ = nullptr;
  void* staging_ = nullptr;
  uint64_t* block_state_ = nullptr;
  size_t lock_capacity_ = 0;
  size_t flag_capacity_ = 0;
  size_t staging_capacity_ = 0;
  size_t block_state_capacity_ = 0;
  uint64_t heap_id_ = 0;
  uint64_t calls_ = 0;
  uint64_t timeouts_ = 0;
  CallOrder order_;
};

// WorkspaceHost over a Context's heap, stream and bootstrap. The context's device is the thread's current
// one while the host lives (iris::detail::DeviceGuard): its memsets and device waits go to that device.
class ContextWorkspaceHost final : public WorkspaceHost {
 public:
  explicit ContextWorkspaceHost(Context& ctx);
  int rank() const override;
  int world_size() const override;
  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void zero(void* ptr, size_t bytes) override;
  std::vector<std::string> allgather(std::string_view mine) override;
  uint64_t device_timeouts() const override;
  void synchronize_device() override;
  uint64_t allocation_count() const override;
  uint64_t allocation_hash() const override;
  bool holds(const void* ptr) const override;
  uint64_t heap_id() const override;
  int64_t heap_offset(const void* ptr) const override;
  bool capturing() const override;

 private:
  Context& ctx_;
  iris::detail::DeviceGuard device_;
};

}  // namespace iris::ccl
