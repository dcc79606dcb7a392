// SymmetricHeap: the virtual-memory window holding every rank's heap in this process.
//
// Each rank creates `heap_size` bytes of physical memory on its device with cuMemCreate. The window
// is one reserved range of world_size * heap_size bytes; rank r's memory is mapped at slot r
// (base + r * heap_size), and every slot is made accessible to this rank's device.
//   * Threads of one process: the ranks share one window. Rank 0 reserves it, each rank maps its own
//     memory into its slot, then each rank grants its device access to every slot.
//   * One process per rank: each process reserves its own window, exports its memory as a POSIX file
//     descriptor, receives every peer's descriptor over a Unix socket (Bootstrap::exchange_fds),
//     imports and maps it into the peer's slot.
// Construction and destruction are collective over the bootstrap. Every step of the construction that
// can fail on one rank (creating, reserving, mapping, importing, granting access) is agreed across the
// ranks: all raise together, and a constructor that raises has released what it held.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "iris/runtime/bootstrap.hpp"

namespace iris {

class SymmetricHeap {
 public:
  // Collective. `granularity` is the coarsest allocation_granularity of the ranks' devices, the same on every
  // rank, and `heap_size` a multiple of it, equal on every rank (the caller checks). The window is reserved
  // aligned to `granularity`, so every rank's slot starts where each rank's device can map memory.
  SymmetricHeap(Bootstrap& bootstrap, int device, size_t heap_size, size_t granularity);
  // Collective: waits for every rank before unmapping so no peer still reads (see teardown when it cannot).
  ~SymmetricHeap();
  SymmetricHeap(const SymmetricHeap&) = delete;
  SymmetricHeap& operator=(const SymmetricHeap&) = delete;

  char* base() const { return base_; }
  size_t size() const { return size_; }
  char* slot(int r) const { return base_ + static_cast<size_t>(r) * size_; }
  bool shared_window() const { return shared_window_; }  // threads of one process
  // Slots whose heap this process registers with tools (its own slot in threads mode, all slots
  // in process mode, so that tools see every mapped heap exactly once per process).
  std::vector<int> registered_slots() const;

  // Recommended VMM granularity for `device` (heap sizes are rounded up to it).
  static size_t allocation_granularity(int device);

 private:
  // The constructor's steps. `together` is set once a failure is one every rank learned at once.
  void build(bool& together);
  // Unmaps and releases what this object holds. `peers_done`: every rank passed the teardown barrier, so no
  // peer's kernel still reaches this rank's heap. Threads sharing a window: a slot stays mapped until the last
  // rank out unless `peers_done`, and the last rank out frees the window.
  void teardown(bool peers_done) noexcept;
  // Threads sharing a window: counts this rank out of it, leaving its slot mapped if teardown did, and, for
  // the last rank of the window, unmaps every slot left mapped and frees the window. A rank that never learned
  // the window's base (the bootstrap failed while it was handed out) is not counted: the window then stays.
  void leave_shared_window() noexcept;

  Bootstrap& bootstrap_;
  int rank_;
  int world_;
  int device_;
  size_t size_;
  size_t granularity_;  // the window's alignment
  bool shared_window_ = false;
  char* base_ = nullptr;
  CUmemGenericAllocationHandle own_ = 0;
  std::vector<bool> mapped_;                       // per slot, mapped by this object
  std::vector<CUmemGenericAllocationHandle> imported_;  // per slot (process mode)
};

}  // namespace iris
