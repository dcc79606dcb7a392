#include "iris/ccl/workspace.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "ccl/ccl_host.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "runtime/agree.hpp"
#include "runtime/heap_allocator.hpp"

namespace iris::ccl {

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kNone: return "none";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kMatmulAllReduce: return "matmul_all_reduce";
    case OpKind::kMatmulReduceScatter: return "matmul_reduce_scatter";
    case OpKind::kAllGatherMatmul: return "all_gather_matmul";
    case OpKind::kMatmulAllGather: return "matmul_all_gather";
    case OpKind::kAllGatherMatmulKSharded:
      return "all_gather_matmul_k_sharded";
  }
  return "unknown";
}

namespace {
// The needs no GPU can hold: an array past 2^48 bytes (Tensor::kMaxSpanBytes, what a GPU addresses). Checked
// where needs come from the caller (reserve, heap_bytes, prepare), before any count is multiplied by its element
// size:
// a count near 2^61 flags wrapped to an 8-byte array whose recorded capacity then passed every later check.
void check_needs_fit(const char* who, const WorkspaceNeeds& needs) {
  const std::pair<const char*, std::pair<size_t, size_t>> arrays[] = {
      {"locks", {needs.locks, sizeof(uint32_t)}},
      {"flags", {needs.flags, sizeof(uint64_t)}},
      {"block state words", {needs.block_state, sizeof(uint64_t)}},
      {"staging bytes", {needs.staging_bytes, 1}}};
  for (const auto& [name, count_elem] : arrays) {
    const auto [count, elem] = count_elem;
    IRIS_CHECK_ARG(count <= Tensor::kMaxSpanBytes / elem, who, ": these needs hold ", count, " ", name,
                   ", more than a GPU can address (2^48 bytes); size them with the *_needs functions or the plans.");
  }
}
}  // namespace

size_t heap_bytes(const WorkspaceNeeds& needs, size_t guard_bytes) {
  check_needs_fit("heap_bytes", needs);
  // As prepare allocates them: one heap block per array that is needed, in whole 256-byte units.
  auto block = [guard_bytes](size_t bytes) {
    constexpr size_t unit = HeapAllocator::kMinAlignment;
    return bytes == 0 ? 0 : (bytes + unit - 1) / unit * unit + guard_bytes;
  };
  return block(needs.locks * sizeof(uint32_t)) + block(needs.flags * sizeof(uint64_t)) +
         block(needs.block_state * sizeof(uint64_t)) + block(needs.staging_bytes);
}

int64_t tile_count(int64_t rows, int64_t cols, int block_m, int block_n) {
  IRIS_CHECK_ARG(block_m > 0 && block_n > 0, "block sizes must be positive, got ", block_m, " x ", block_n);
  if (rows <= 0 || cols <= 0) return 0;
  // Rounded up without rows + block_m - 1, which overflows near INT64_MAX.
  return ((rows - 1) / block_m + 1) * ((cols - 1) / block_n + 1);
}

namespace {
[[noreturn]] void too_small(const char* what, size_t have, size_t need) {
  throw SyncArrayTooSmall(
      iris::detail::str_cat(what, " too small: have ", have, " but need ", need,
                            ". Pre-allocate workspace with the smallest block sizes you intend to use."));
}
}  // namespace

void check_lock_capacity(size_t have, size_t need) {
  if (have < need) too_small("Lock array", have, need);
}
void check_flag_capacity(size_t have, size_t need) {
  if (have < need) too_small("Flags array", have, need);
}
void check_staging_capacity(size_t have, size_t need) {
  if (have < need)
    throw WorkspaceTooSmall(
        iris::detail::str_cat("Staging buffer too small: have ", have, " bytes but need ", need,
                              ". Pre-allocate workspace with the largest tensor and block sizes you "
                              "intend to use, or reserve it for all of your calls first "
                              "(iris::ccl::reserve_workspace)."));
}
void check_block_state_capacity(size_t have, size_t need) {
  if (have < need)
    throw WorkspaceTooSmall(iris::detail::str_cat("Block state array too small: have ", have, " but need ", need,
                                                  ". It holds a word per rank: this workspace was prepared for fewer "
                                                  "ranks; prepare a new one with this context."));
}

namespace {
// A fused op's operand types where they are not the one that crosses ranks: " (A and B bfloat16)".
std::string operand_types(int operand_dtypes, DType crossing) {
  if (operand_dtypes < 0) return "";
  const auto a = static_cast<DType>(operand_dtypes >> 8), c = static_cast<DType>(operand_dtypes & 0xff);
  std::string s;
  if (a != crossing) s += iris::detail::str_cat("A and B ", dtype_name(a));
  if (c != crossing) s += iris::detail::str_cat(s.empty() ? "" : ", ", "C ", dtype_name(c));
  return s.empty() ? s : " (" + s + ")";
}
}  // namespace

std::string OpSignature::describe() const {
  return iris::detail::str_cat(
      op_name(op), " ", rows, "x", cols, depth > 0 ? iris::detail::str_cat(" k ", depth) : std::string(), " ",
      dtype_name(dtype), operand_types(operand_dtypes, dtype), " world ", world_size,
      op == OpKind::kAllReduce || op == OpKind::kMatmulAllReduce ? std::string(" variant ") + variant_name(variant)
                                                                 : std::string(),
      protocol != OneShotProtocol::kAuto ? std::string(" protocol ") + protocol_name(protocol) : std::string(),
      " blocks ", block_size_m, "x", block_size_n, root >= 0 ? iris::detail::str_cat(" root ", root) : std::string(),
      op == OpKind::kAllReduce || op == OpKind::kReduceScatter ? std::string(" op ") + reduce_op_name(reduce_op)
                                                               : std::string(),
      bias ? " with bias" : "",
      symmetric_output ? iris::detail::str_cat(" C on the symmetric heap at offset ", output_offset) : std::string(),
      ll_max_bytes >= 0 ? iris::detail::str_cat(" LL up to ", ll_max_bytes, " bytes per block (IRIS_LL_MAX_BYTES)")
                        : std::string(),
      swizzle > 0 ? iris::detail::str_cat(" swizzle_size ", swizzle) : std::string(),
      distribution >= 0 ? iris::detail::str_cat(" all_reduce_distribution ", distribution) : std::string(),
      rings > 0 ? iris::detail::str_cat(" all_reduce_num_rings ", rings) : std::string(),
      slice_n > 0 ? iris::detail::str_cat(" ring slices of ", slice_n, " columns") : std::string(),
      grid > 0 ? iris::detail::str_cat(" grid ", grid, " blocks (comm_sms, or the device's SMs)") : std::string(),
      min_band_tiles > 0 ? iris::detail::str_cat(" min_band_tiles ", min_band_tiles) : std::string());
}

uint64_t OpSignature::key() const {
  // Every field of the struct, in order. The structured binding names each one: it does not compile once
  // OpSignature has a field more or less, so a field added there must be added here (a size check would
  // not see a small field that fills padding).
  const auto& [op_, rows_, cols_, dtype_, world_size_, variant_, protocol_, block_size_m_, block_size_n_, root_,
               reduce_op_, depth_, bias_, symmetric_output_, output_offset_, ll_max_bytes_, swizzle_, distribution_,
               rings_, slice_n_, grid_, min_band_tiles_, operand_dtypes_] = *this;
  uint64_t h = 0x9E3779B97F4A7C15ull;
  auto mix = [&h](auto field) {  // splitmix64's finalizer over the running hash plus the field
    uint64_t z = h + static_cast<uint64_t>(static_cast<int64_t>(field)) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    h = z ^ (z >> 31);
  };
  mix(op_), mix(rows_), mix(cols_), mix(dtype_), mix(world_size_), mix(variant_), mix(protocol_);
  mix(block_size_m_), mix(block_size_n_), mix(root_), mix(reduce_op_), mix(depth_), mix(bias_);
  mix(symmetric_output_), mix(output_offset_), mix(ll_max_bytes_), mix(swizzle_), mix(distribution_), mix(rings_);
  mix(slice_n_), mix(grid_), mix(min_band_tiles_), mix(operand_dtypes_);
  return h;
}

WorkspaceNeeds& WorkspaceNeeds::include(const WorkspaceNeeds& other) {
  locks = std::max(locks, other.locks);
  flags = std::max(flags, other.flags);
  staging_bytes = std::max(staging_bytes, other.staging_bytes);
  block_state = std::max(block_state, other.block_state);
  return *this;
}

std::string WorkspaceNeeds::describe() const {
  return iris::detail::str_cat(locks, " locks, ", flags, " flags, ", staging_bytes, " staging bytes, ", block_state,
                               " block state words");
}

Workspace::Workspace(Workspace&& other) noexcept { *this = std::move(other); }

Workspace& Workspace::operator=(Workspace&& other) noexcept {
  if (this != &other) {
    prepared_ = std::exchange(other.prepared_, false);
    signature_ = std::exchange(other.signature_, OpSignature{});
    locks_ = std::exchange(other.locks_, nullptr);
    flags_ = std::exchange(other.flags_, nullptr);
    staging_ = std::exchange(other.staging_, nullptr);
    block_state_ = std::exchange(other.block_state_, nullptr);
    lock_capacity_ = std::exchange(other.lock_capacity_, 0);
    flag_capacity_ = std::exchange(other.flag_capacity_, 0);
    staging_capacity_ = std::exchange(other.staging_capacity_, 0);
    block_state_capacity_ = std::exchange(other.block_state_capacity_, 0);
    heap_id_ = std::exchange(other.heap_id_, 0);
    calls_ = std::exchange(other.calls_, 0);
    timeouts_ = std::exchange(other.timeouts_, 0);
    order_ = std::move(other.order_);
  }
  return *this;
}

void Workspace::check_capacity(const WorkspaceNeeds& needs) const {
  check_lock_capacity(lock_capacity_, needs.locks);
  check_flag_capacity(flag_capacity_, needs.flags);
  check_staging_capacity(staging_capacity_, needs.staging_bytes);
  check_block_state_capacity(block_state_capacity_, needs.block_state);
}

namespace {
// Appended to what prepare and reserve exchange: this rank's heap alloc/free calls so far and their hash.
constexpr char kHeapMark = '\x1f';
std::string heap_sequence(const WorkspaceHost& host) {
  return iris::detail::str_cat(kHeapMark, host.allocation_count(), " (hash ", host.allocation_hash(), ")");
}
// Splits a rank's exchanged word at kHeapMark: the part every rank compares as given, then the heap's.
std::pair<std::string_view, std::string_view> split_heap(std::string_view word) {
  const size_t at = word.rfind(kHeapMark);
  if (at == std::string_view::npos) return {word, {}};
  return {word.substr(0, at), word.substr(at + 1)};
}
// After the call's parameters agree: every rank must have made the same heap allocations so far.
void check_heap_sequences(const WorkspaceHost& host, const std::vector<std::string>& all) {
  const std::string_view mine = split_heap(all[host.rank()]).second;
  bool same = true;
  std::string ranks;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const std::string_view theirs = split_heap(all[r]).second;
    same = same && theirs == mine;
    ranks += iris::detail::str_cat(r == 0 ? "" : ", ", "rank ", r, " made ", theirs);
  }
  IRIS_CHECK_ARG(same, "Heap allocation sequence differs across ranks before this preamble: ", ranks,
                 " alloc/free calls. Every rank must allocate and free the same sizes in the same order, or the "
                 "workspace's arrays would lie at other offsets on other ranks.");
}
// What a rank's workspace holds, as prepare compares it across ranks: each array's capacity and heap offset,
// and the call it was last prepared for. Ranks that pass workspaces in different states (one rank another
// of its workspaces, or one reserved or released differently) would decide capacity and zeroing apart, and
// their peers would write at offsets that hold another workspace.
std::string describe_state(const WorkspaceHost& host, const Workspace& ws) {
  if (ws.any_array() == nullptr) return ws.prepared() ? "no arrays, prepared" : "no arrays";
  std::string out;
  const std::pair<const char*, std::pair<const void*, size_t>> arrays[] = {
      {"locks", {ws.locks(), ws.lock_capacity()}},
      {"flags", {ws.flags(), ws.flag_capacity()}},
      {"staging bytes", {ws.staging(), ws.staging_capacity()}},
      {"block state", {ws.block_state(), ws.block_state_capacity()}}};
  for (const auto& [name, array] : arrays) {
    if (array.second == 0) continue;
    out += iris::detail::str_cat(out.empty() ? "" : ", ", array.second, " ", name);
    if (const int64_t at = host.heap_offset(array.first); at >= 0) out += iris::detail::str_cat(" at heap offset ", at);
  }
  return out + (ws.prepared() ? ", last prepared for " + ws.signature().describe() : ", not prepared");
}

// Waits until this rank's device has ended its kernels, then for every rank to have done the same: after
// it, no kernel of any rank still reaches this rank's arrays. A rank whose device failed (a sticky CUDA
// error) still takes part, so that its peers do not wait for it; its error is returned, for the caller to
// raise once it has done what must not be skipped. With peer_failure, also says which other rank's device
// failed ("rank 1's device failed: ...", "" when none did).
// Every rank's word says what the exchange is, so that a rank in another collective call (the ranks' calls
// out of step) is told apart from a rank whose device failed: it starts with '!', which the runtime's agreed
// steps (barrier() among them) read as a failure of that rank, so such a peer raises with the text too.
constexpr std::string_view kDeviceWait =
    "!waiting for every device before a workspace's arrays are released or reset (a collective call)";
constexpr std::string_view kDeviceFailed = ": its device failed: ";

std::exception_ptr wait_for_every_device(WorkspaceHost& host, std::string* peer_failure = nullptr) {
  std::exception_ptr failed;
  std::string what;
  try {
    host.synchronize_device();
  } catch (const std::exception& e) {
    failed = std::current_exception();
    what = e.what()[0] != '\0' ? e.what() : "an error without a message";
  } catch (...) {
    failed = std::current_exception();
    what = "a non-standard exception";
  }
  const std::vector<std::string> words =
      host.allgather(std::string(kDeviceWait) + (failed ? std::string(kDeviceFailed) + what : std::string()));
  // Another collective's word: nothing may be freed or reset, since that rank's kernels may still reach the
  // arrays. Before 2026-12-05 the word went unread, and release() freed them.
  for (int r = 0; r < static_cast<int>(words.size()); ++r)
    IRIS_CHECK_ARG(words[r].starts_with(kDeviceWait), "Collective calls out of step across ranks: rank ", host.rank(),
                   " waited for every device before releasing or resetting a workspace, but rank ", r,
                   " made another collective call at this point (a barrier, a preamble, an allocation...), so no "
                   "array was freed or reset. Every rank must make the same collective calls in the same order.");
  for (int r = 0; peer_failure != nullptr && r < static_cast<int>(words.size()); ++r) {
    const std::string_view rest = std::string_view(words[r]).substr(kDeviceWait.size());
    if (r != host.rank() && !rest.empty() && peer_failure->empty())
      *peer_failure = iris::detail::str_cat("rank ", r, "'s device failed: ", rest.substr(kDeviceFailed.size()));
  }
  return failed;
}

// Runs this rank's part of a step (allocating and zeroing arrays, which can fail on one rank: a heap
// without room, a sticky CUDA error) as an agreed step (detail::agree): a rank whose part threw raises its
// own error after the exchange and its peers a RemoteError naming it, so none is left waiting in the
// exchange for a rank that left (it used to wait out the bootstrap timeout, 300 s by default, or, where
// nothing followed, go on with arrays its peer did not have). The peers' error also says what to do.
template <typename Part>
void finish_together(WorkspaceHost& host, const char* step, Part&& part) {
  try {
    iris::detail::agree(host, step, part);
  } catch (const RemoteError& e) {
    throw RemoteError(std::string(e.what()) +
                      ". This workspace holds arrays that rank's may not; release() it on every rank.");
  }
}
}  // namespace

void Workspace::prepare(WorkspaceHost& host, const OpSignature& sig, const WorkspaceNeeds& needs) {
  // 1. Every rank must be preparing the same call, from the same heap allocations; compare before
  //    touching the heap so that a disagreement raises on every rank and no rank's allocation sequence
  //    diverges. Each rank also says whether it raised a device error (a timeout or a misuse) since this
  //    workspace was last prepared.
  static constexpr std::string_view kStale = "\x1e timed out since";
  // A workspace whose arrays another heap holds (another Context's, or a destroyed one's) says so in its
  // description, so that its peers raise with it rather than wait.
  const bool foreign = !arrays_on(host);
  const std::string mine = sig.describe() + (foreign ? " on a workspace of another context's heap" : "");
  const bool stale = prepared_ && host.device_timeouts() != timeouts_;
  static constexpr char kStateMark = '\x1d';
  const std::string state = describe_state(host, *this);
  auto all =
      host.allgather(mine + kStateMark + state + heap_sequence(host) + (stale ? std::string(kStale) : std::string()));
  IRIS_CHECK_ARG(!foreign, op_name(sig.op),
                 ": the workspace's arrays are not on this context's heap (it was prepared with another Context, "
                 "or with one since destroyed); give this context a workspace of its own (on every rank).");
  bool any_stale = false;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[r].ends_with(kStale)) {
      all[r].resize(all[r].size() - kStale.size());
      any_stale = true;
    }
    const std::string_view word = split_heap(all[r]).first;
    const std::string_view theirs = word.substr(0, word.rfind(kStateMark));
    IRIS_CHECK_ARG(theirs == mine, "Collective parameters differ across ranks: rank ", host.rank(), " has ", mine,
                   " but rank ", r, " has ", theirs, ". Every rank must call with the same shapes and config.");
  }
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const std::string_view word = split_heap(all[r]).first;
    const std::string_view theirs = word.substr(word.rfind(kStateMark) + 1);
    IRIS_CHECK_ARG(theirs == state, op_name(sig.op), ": the ranks pass workspaces in different states: rank ",
                   host.rank(), "'s holds ", state, " but rank ", r, "'s holds ", theirs,
                   ". Every rank must pass its own copy of the same workspace, prepared, reserved and released "
                   "alike.");
  }
  check_heap_sequences(host, all);
  // 2. Capacity: from the arguments and the workspaces' states, which every rank has now seen to be the same,
  //    so every rank decides the same way.
  check_needs_fit("prepare", needs);
  if (lock_capacity_ > 0) check_lock_capacity(lock_capacity_, needs.locks);
  if (flag_capacity_ > 0) check_flag_capacity(flag_capacity_, needs.flags);
  if (staging_capacity_ > 0) check_staging_capacity(staging_capacity_, needs.staging_bytes);
  if (block_state_capacity_ > 0) check_block_state_capacity(block_state_capacity_, needs.block_state);
  // 3a. After a device error on any rank, the kernels that gave up left flags, epochs and staging out
  //     of step between ranks (include/iris/device/timeout.cuh). Every rank waits until its device's
  //     kernels have ended (the peers' that write into this heap included: they all pass the exchange
  //     below only after that), then zeroes every array, the epoch too (in step 5's part): the calls start
  //     over in step.
  //     Zeroed staging holds no LL line (the tag of a zero word is that of epoch 0, never a call's).
  if (any_stale) {
    // A rank whose device failed here cannot reset its arrays: every rank raises, none resets.
    std::string peer_failure;
    if (std::exception_ptr failed = wait_for_every_device(host, &peer_failure)) std::rethrow_exception(failed);
    if (!peer_failure.empty())
      throw RemoteError(iris::detail::str_cat(
          op_name(sig.op), ": ", peer_failure,
          " while every rank waited for its kernels to reset this workspace after a device error, so no rank reset "
          "it. A sticky CUDA error ends that rank's context: restart the job."));
  }
  // 3b. A workspace that served another op: its block state holds that op's words (all_reduce's layout key
  //    and fence words), which start from zero but the epoch, which keeps running: every flag holds the
  //    epoch of the call that wrote it, so what the old op left stays below every new call's epoch, and
  //    the LL lines it left carry tags of other epochs than the new calls' (ll_tag). The flags start from
  //    zero too, so that no wait can pass on a word the old op wrote. The caller has let every call of
  //    the old op end (prepare_everywhere); peers write only after step 5.
  //    Not after 3a, which zeroed all of it.
  // 4. Allocate and zero what is missing (collective, same order on every rank).
  // 5. Peers may write into our arrays as soon as they launch: they must all be zeroed first. The zeroing of
  //    3a and 3b happens here too, so that a rank whose zeroing or allocation fails says so in this exchange.
  const bool moved = !any_stale && prepared_ && signature_.op != sig.op;
  finish_together(host, "to zero and allocate its workspace arrays", [&] {
    if (any_stale) {
      if (lock_capacity_ > 0) host.zero(locks_, lock_capacity_ * sizeof(uint32_t));
      if (flag_capacity_ > 0) host.zero(flags_, flag_capacity_ * sizeof(uint64_t));
      if (staging_capacity_ > 0) host.zero(staging_, staging_capacity_);
      if (block_state_capacity_ > 0) host.zero(block_state_, block_state_capacity_ * sizeof(uint64_t));
    } else if (moved) {
      if (flag_capacity_ > 0) host.zero(flags_, flag_capacity_ * sizeof(uint64_t));
      if (block_state_capacity_ > 1) host.zero(block_state_ + 1, (block_state_capacity_ - 1) * sizeof(uint64_t));
    }
    allocate_missing(host, needs);
  });
  signature_ = sig;
  prepared_ = true;
  timeouts_ = host.device_timeouts();
}

void Workspace::allocate_missing(WorkspaceHost& host, const WorkspaceNeeds& needs) {
  auto grow = [&](auto*& ptr, size_t& capacity, size_t need, size_t elem) {
    if (capacity > 0 || need == 0) return;
    void* p = host.alloc(need * elem);
    // Recorded before the zeroing, which can fail: the array is then released with the workspace, not lost.
    ptr = static_cast<std::remove_reference_t<decltype(ptr)>>(p);
    capacity = need;
    heap_id_ = host.heap_id();
    host.zero(p, need * elem);
  };
  grow(locks_, lock_capacity_, needs.locks, sizeof(uint32_t));
  grow(flags_, flag_capacity_, needs.flags, sizeof(uint64_t));
  grow(block_state_, block_state_capacity_, needs.block_state, sizeof(uint64_t));
  grow(staging_, staging_capacity_, needs.staging_bytes, 1);
}

void Workspace::check_call(WorkspaceHost& host, const OpSignature* sig, std::string_view refusal) const {
  // Every word of a check starts with one of these, so that a peer's word from another collective of the
  // context (a barrier, a preamble, an allocation: a call this rank did not make) is told apart.
  static constexpr std::string_view kCall = "checked call: ";
  static constexpr std::string_view kRefused = "checked call refused: ";
  std::string mine;
  if (sig == nullptr) {
    mine = iris::detail::str_cat(kRefused, refusal);
  } else {
    const void* arrays = any_array();
    const int64_t offset = arrays != nullptr ? host.heap_offset(arrays) : -1;
    mine = iris::detail::str_cat(kCall, sig->describe(), " (call ", calls_ + 1, " on the workspace",
                                 offset >= 0 ? iris::detail::str_cat(" at heap offset ", offset) : std::string(), ")");
  }
  const auto all = host.allgather(mine);
  if (sig == nullptr) return;
  const std::string_view call = std::string_view(mine).substr(kCall.size());
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const std::string_view theirs = all[r];
    if (theirs == mine) continue;
    if (theirs.starts_with(kRefused))
      throw InvalidArgument(iris::detail::str_cat(
          op_name(sig->op), ": rank ", r,
          " refused this call, so no rank launches it (IRIS_CHECK_CALLS): ", theirs.substr(kRefused.size())));
    const std::string what =
        theirs.starts_with(kCall)
            ? iris::detail::str_cat("calls ", theirs.substr(kCall.size()))
            : std::string(
                  "made another collective call of the context at this point (a barrier, a preamble, an "
                  "allocation...), not this call");
    throw InvalidArgument(iris::detail::str_cat(
        "Calls differ across ranks (IRIS_CHECK_CALLS): rank ", host.rank(), " calls ", call, " but rank ", r, " ", what,
        ". Every rank must make the same calls on a workspace, in the same order, "
        "with the same shapes and config."));
  }
}

bool Workspace::arrays_on(const WorkspaceHost& host) const {
  const void* array = any_array();
  return array == nullptr || (heap_id_ == host.heap_id() && host.holds(array));
}

const void* Workspace::any_array() const {
  if (block_state_ != nullptr) return block_state_;
  if (locks_ != nullptr) return locks_;
  if (flags_ != nullptr) return flags_;
  return staging_;
}

void Workspace::reserve(WorkspaceHost& host, const WorkspaceNeeds& needs) {
  // Deterministic from each rank's own state, but the states could differ: exchange first, so that a rank
  // refusing its workspace and the ranks that see its different word all raise.
  const bool holds_arrays =
      prepared_ || lock_capacity_ > 0 || flag_capacity_ > 0 || staging_capacity_ > 0 || block_state_capacity_ > 0;
  // The capture query can fail on one rank (a sticky CUDA error): that rank says so in the exchange, whose
  // words then differ, instead of leaving before it.
  bool capturing = false;
  std::string unknown;
  try {
    capturing = host.capturing();
  } catch (const std::exception& e) {
    unknown = e.what();
  }
  const std::string mine = "reserve " + needs.describe() + (holds_arrays ? " on a workspace that holds arrays" : "") +
                           (capturing ? " while its stream is being captured into a CUDA graph" : "") +
                           (unknown.empty() ? "" : " (its stream's capture state unknown: " + unknown + ")");
  const auto all = host.allgather(mine + heap_sequence(host));
  if (!unknown.empty()) throw Error("reserve_workspace: " + unknown);
  IRIS_CHECK_ARG(!holds_arrays,
                 "reserve_workspace: this workspace already holds arrays (it was prepared or "
                 "reserved); reserve a fresh workspace, or release() this one first.");
  IRIS_CHECK_ARG(!capturing,
                 "reserve_workspace: the context's stream is being captured into a CUDA graph; reserve the workspace "
                 "(collective: it allocates, zeroes and synchronizes) before the capture begins, and capture the "
                 "calls only.");
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const std::string_view theirs = split_heap(all[r]).first;
    IRIS_CHECK_ARG(theirs == mine, "Collective parameters differ across ranks: rank ", host.rank(), " has ", mine,
                   " but rank ", r, " has ", theirs, ". Every rank must reserve the same workspace.");
  }
  check_heap_sequences(host, all);
  check_needs_fit("reserve_workspace", needs);  // the same needs on every rank: all raise together
  // Needs sized for fewer ranks would be refused by the first preamble, as a workspace "prepared for fewer
  // ranks": say here what is wrong with them.
  const size_t words = ccl::detail::block_state_words(host.world_size());
  IRIS_CHECK_ARG(needs.block_state == 0 || needs.block_state >= words, "reserve_workspace: these needs hold ",
                 needs.block_state, " block state words, fewer than the ", words, " every op needs on ",
                 host.world_size(), " ranks; size them with this context's world size (", host.world_size(),
                 ") as the *_needs functions' and plans' world_size.");
  finish_together(host, "to allocate its reserved workspace arrays", [&] { allocate_missing(host, needs); });
}

void Workspace::release(WorkspaceHost& host) { release_all(host, {this}); }

void Workspace::release_all(WorkspaceHost& host, std::initializer_list<Workspace*> workspaces) {
  // A kernel of this rank or another may still reach these arrays: one that had not yet given up when a
  // peer's timed out, or calls on a stream nobody has synchronized. A freed array may become the next
  // allocation (a reservation's or a preamble's, zeroed for its first call), which a late write would
  // corrupt: nothing is freed before every device has ended its kernels. A rank whose device failed
  // frees too, and raises the error last.
  const std::exception_ptr failed = wait_for_every_device(host);
  // A workspace whose arrays this heap does not hold (prepared with another Context, or one since destroyed,
  // whose heap this one may have replaced at the same addresses) is not this host's to free: freeing them
  // could release a live allocation of this heap. Nothing of the call is freed on this rank; its peers have
  // freed theirs.
  for (const Workspace* ws : workspaces)
    IRIS_CHECK_ARG(ws->arrays_on(host),
                   "release: the workspace's arrays are not on this context's heap (it was prepared with another "
                   "Context, or with one since destroyed); nothing was freed. Release it with the context that "
                   "prepared it, or, when that context is destroyed (its heap went with it), assign it a fresh "
                   "Workspace.");
  // Every array is freed and every workspace emptied even when a free throws (a guard check after a sticky
  // CUDA error): a workspace left holding arrays already freed would free them again, or reach whatever the
  // heap places there next. The first error is raised, after the device's.
  std::exception_ptr free_failed;
  for (Workspace* ws : workspaces) {
    for (void* p : {static_cast<void*>(ws->locks_), static_cast<void*>(ws->flags_), ws->staging_,
                    static_cast<void*>(ws->block_state_)}) {
      if (p == nullptr) continue;
      try {
        host.free(p);
      } catch (...) {
        if (!free_failed) free_failed = std::current_exception();
      }
    }
    *ws = Workspace();
  }
  if (failed) std::rethrow_exception(failed);
  if (free_failed) std::rethrow_exception(free_failed);
}

void reserve_workspace(Context& ctx, Workspace& ws, const WorkspaceNeeds& needs) {
  ContextWorkspaceHost host(ctx);
  ws.reserve(host, needs);
}

ContextWorkspaceHost::ContextWorkspaceHost(Context& ctx) : ctx_(ctx), device_(ctx.device()) {}
int ContextWorkspaceHost::rank() const { return ctx_.rank(); }
uint64_t ContextWorkspaceHost::allocation_count() const { return ctx_.allocation_count(); }
uint64_t ContextWorkspaceHost::allocation_hash() const { return ctx_.allocation_hash(); }
int ContextWorkspaceHost::world_size() const { return ctx_.world_size(); }
void* ContextWorkspaceHost::alloc(size_t bytes) { return ctx_.alloc(bytes); }
void ContextWorkspaceHost::free(void* ptr) { ctx_.free(ptr); }
void ContextWorkspaceHost::zero(void* ptr, size_t bytes) {
  IRIS_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, ctx_.stream()));
  IRIS_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
}
std::vector<std::string> ContextWorkspaceHost::allgather(std::string_view mine) {
  return ctx_.bootstrap().allgather(mine);
}
uint64_t ContextWorkspaceHost::device_timeouts() const { return ctx_.device_timeouts(); }
bool ContextWorkspaceHost::holds(const void* ptr) const { return ctx_.is_symmetric(ptr); }
uint64_t ContextWorkspaceHost::heap_id() const { return ctx_.heap_id(); }
int64_t ContextWorkspaceHost::heap_offset(const void* ptr) const {
  return ctx_.is_symmetric(ptr) ? static_cast<int64_t>(ctx_.offset_of(ptr)) : -1;
}
void ContextWorkspaceHost::synchronize_device() { IRIS_CUDA_CHECK(cudaDeviceSynchronize()); }
bool ContextWorkspaceHost::capturing() const { return iris::detail::capturing(ctx_.stream()); }

}  // namespace iris::ccl
