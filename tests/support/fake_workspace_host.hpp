// A ccl::WorkspaceHost backed by host memory, for host tests of workspaces and preambles (no GPU):
// allocations are poisoned (0xAB) so a preamble that forgets to zero shows; live allocations are
// counted; allgather runs over a thread bootstrap when one is given, else over this rank alone.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "iris/ccl/workspace.hpp"
#include "iris/runtime/bootstrap.hpp"

namespace iris::test {

class FakeWorkspaceHost final : public ccl::WorkspaceHost {
 public:
  explicit FakeWorkspaceHost(std::shared_ptr<Bootstrap> bs = nullptr) : bs_(std::move(bs)) {}
  int rank() const override { return bs_ ? bs_->rank() : 0; }
  int world_size() const override { return bs_ ? bs_->world_size() : 1; }
  void* alloc(size_t bytes) override {
    ++allocs;
    ++live;
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    std::memset(p, 0xAB, bytes);
    blocks_.insert(p);
    offsets_[p] = next_offset_;
    next_offset_ += static_cast<int64_t>((bytes + 255) / 256 * 256);
    return p;
  }
  void free(void* p) override {
    if (free_fails_at >= 0 && frees++ == free_fails_at) throw std::runtime_error("fake device: a free failed");
    if (blocks_.erase(p) == 0) throw std::invalid_argument("fake host: free of a pointer it did not allocate");
    offsets_.erase(p);
    --live;
    std::free(p);
  }
  // The start of a live allocation of this host (what a workspace passes).
  bool holds(const void* p) const override { return holds_everything || blocks_.count(const_cast<void*>(p)) > 0; }
  uint64_t heap_id() const override { return id_; }
  // With `offsets`, each allocation's offset in a heap laid out in allocation order (never reused), as a
  // Context's heap gives the same offset on every rank for the same collective allocation; else -1.
  int64_t heap_offset(const void* p) const override {
    const auto it = offsets_.find(const_cast<void*>(p));
    return offsets && it != offsets_.end() ? it->second : -1;
  }
  void zero(void* p, size_t bytes) override {
    if (zero_fails) throw std::runtime_error("fake device: a memset failed");
    std::memset(p, 0, bytes);
  }
  std::vector<std::string> allgather(std::string_view mine) override {
    if (bs_) return bs_->allgather(mine);
    return {std::string(mine)};
  }
  uint64_t device_timeouts() const override { return timeouts; }
  void synchronize_device() override {
    ++device_syncs;
    if (device_failed) throw std::runtime_error("fake device: a sticky CUDA error");
  }
  uint64_t allocation_count() const override { return heap_calls; }
  bool capturing() const override {
    if (capture_query_fails) throw std::runtime_error("fake device: cudaStreamIsCapturing failed");
    return capture;
  }
  uint64_t allocation_hash() const override { return heap_hash; }

  int allocs = 0;
  int live = 0;
  uint64_t timeouts = 0;  // as Context::device_timeouts(): set by a test to stand for a raised TimeoutError
  int device_syncs = 0;
  bool capture = false;        // capturing() says so, as a context's stream being captured into a CUDA graph
  bool device_failed = false;  // synchronize_device() throws, as after a sticky CUDA error
  bool zero_fails = false;     // zero() throws, as a memset after a sticky CUDA error
  bool capture_query_fails = false;  // capturing() throws, as cudaStreamIsCapturing after one
  // As Context::allocation_count() / allocation_hash(): set by a test to stand for a rank's heap calls.
  uint64_t heap_calls = 0;
  uint64_t heap_hash = 0;
  bool offsets = false;  // heap_offset() says where each allocation lies (see there)
  // holds() is true of any pointer, as a heap created at the addresses of a destroyed one, whose
  // allocations there contain the destroyed heap's arrays.
  bool holds_everything = false;
  int frees = 0;
  int free_fails_at = -1;  // the free() of that index (from 0) throws, as a guard check after a sticky CUDA error

 private:
  std::shared_ptr<Bootstrap> bs_;
  const uint64_t id_ = next_id();
  static uint64_t next_id() {
    static std::atomic<uint64_t> hosts{0};
    return ++hosts;
  }
  std::set<void*> blocks_;
  std::map<void*, int64_t> offsets_;
  int64_t next_offset_ = 0;
};

}  // namespace iris::test
