// GPU tests of iris::CallOrder (include/iris/core/call_order.hpp) with plain kernels on one device, no ranks:
// calls made eagerly on two streams run in the order made, also when calls captured into a CUDA graph come
// between them.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "iris/core/call_order.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/device.cuh"
#include "support/ranks.hpp"
#include "test_device_util.cuh"

namespace iris {
namespace {

// Spins `ns` nanoseconds by the device's global timer, then sets *word.
__global__ void hold_then_set(unsigned* word, uint64_t ns) {
  const uint64_t start = device::global_timer_ns();
  while (device::global_timer_ns() - start < ns) {
  }
  *static_cast<volatile unsigned*>(word) = 1u;
}
// What *word holds when it runs, into *seen.
__global__ void look(const unsigned* word, unsigned* seen) { *seen = *static_cast<const volatile unsigned*>(word); }
__global__ void nothing() {}

class Stream {
 public:
  Stream() { IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// A first eager call on stream A holds A for 100 ms and then sets a word; calls captured into a graph (never
// launched) come next, on A or on a third stream, or none; the second eager call, on stream B, reads the word.
// It must find it set: it waits for the first. Before 2026-12-06 CallOrder skipped that wait after a captured
// call (it saw the last call in a capture and B in none, "across a capture's edge"), so the two eager calls ran
// at once, as two collectives on one workspace would, and B's read 0.
TEST(CallOrderGpu, EagerCallsKeepTheirOrderWhenCallsCapturedBetweenThemCameFirst) {
  IRIS_TEST_REQUIRE_GPUS(1);
  // Loaded ahead: a kernel's first launch waits for the kernels running (test::load_kernels), so the first look
  // would wait for the hold whatever CallOrder did (before 2026-12-06 the first case could not fail).
  IRIS_CUDA_CHECK(cudaFree(nullptr));  // the device's primary context, which loading a kernel needs current
  test::load_kernels(hold_then_set, look, nothing);
  Stream a, b, c;
  unsigned* words = nullptr;  // [0]: set by the first call; [1]: what the second saw
  IRIS_CUDA_CHECK(cudaMalloc(&words, 2 * sizeof(unsigned)));
  for (const char* between : {"nothing", "a capture on A", "a capture on a third stream"}) {
    SCOPED_TRACE(std::string("between the eager calls: ") + between);
    IRIS_CUDA_CHECK(cudaMemset(words, 0, 2 * sizeof(unsigned)));
    IRIS_CUDA_CHECK(cudaDeviceSynchronize());
    CallOrder order;
    order.before(a.get());
    hold_then_set<<<1, 1, 0, a.get()>>>(words, 100'000'000ull);
    IRIS_CUDA_CHECK_LAUNCH();
    order.after(a.get());
    if (std::string(between) != "nothing") {
      const cudaStream_t s = std::string(between) == "a capture on A" ? a.get() : c.get();
      IRIS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int k = 0; k < 2; ++k) {
        order.before(s);
        nothing<<<1, 1, 0, s>>>();
        IRIS_CUDA_CHECK_LAUNCH();
        order.after(s);
      }
      cudaGraph_t graph = nullptr;
      IRIS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      IRIS_CUDA_CHECK(cudaGraphDestroy(graph));
    }
    order.before(b.get());
    look<<<1, 1, 0, b.get()>>>(words, words + 1);
    IRIS_CUDA_CHECK_LAUNCH();
    order.after(b.get());
    IRIS_CUDA_CHECK(cudaDeviceSynchronize());
    unsigned seen = 0;
    IRIS_CUDA_CHECK(cudaMemcpy(&seen, words + 1, sizeof(seen), cudaMemcpyDeviceToHost));
    EXPECT_EQ(seen, 1u) << "the second eager call ran before the first had finished";
  }
  IRIS_CUDA_CHECK(cudaFree(words));
}

// A first eager call on a stream holds it for 100 ms and sets a word; the stream is destroyed at once (its
// work goes on) and another created, which the driver may give the same handle; the second call, on the new
// stream, reads the word and must find it set. Before 2026-12-06 CallOrder compared handles: a reused one
// looked like the first call's own stream, ordered by itself, and the second call skipped its wait. Streams
// are created and destroyed until a handle is reused (the skip says so when none is in 64 tries); the calls
// on streams whose handles differ are checked as well.
TEST(CallOrderGpu, AStreamThatReusesADestroyedStreamsHandleStillWaits) {
  IRIS_TEST_REQUIRE_GPUS(1);
  IRIS_CUDA_CHECK(cudaFree(nullptr));
  test::load_kernels(hold_then_set, look);  // as above: the first try's look must not wait for the hold itself
  unsigned* words = nullptr;  // [0]: set by the first call; [1]: what the second saw
  IRIS_CUDA_CHECK(cudaMalloc(&words, 2 * sizeof(unsigned)));
  int reused = 0, tries = 0;
  for (; tries < 64 && reused < 2; ++tries) {
    IRIS_CUDA_CHECK(cudaMemset(words, 0, 2 * sizeof(unsigned)));
    IRIS_CUDA_CHECK(cudaDeviceSynchronize());
    CallOrder order;
    cudaStream_t first = nullptr, second = nullptr;
    IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking));
    order.before(first);
    hold_then_set<<<1, 1, 0, first>>>(words, 100'000'000ull);
    IRIS_CUDA_CHECK_LAUNCH();
    order.after(first);
    IRIS_CUDA_CHECK(cudaStreamDestroy(first));
    IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking));
    const bool same_handle = second == first;
    order.before(second);
    look<<<1, 1, 0, second>>>(words, words + 1);
    IRIS_CUDA_CHECK_LAUNCH();
    order.after(second);
    IRIS_CUDA_CHECK(cudaDeviceSynchronize());
    IRIS_CUDA_CHECK(cudaStreamDestroy(second));
    unsigned seen = 0;
    IRIS_CUDA_CHECK(cudaMemcpy(&seen, words + 1, sizeof(seen), cudaMemcpyDeviceToHost));
    EXPECT_EQ(seen, 1u) << "the second call ran before the first had finished ("
                        << (same_handle ? "its stream reused the first's handle" : "another handle") << ")";
    reused += same_handle ? 1 : 0;
  }
  IRIS_CUDA_CHECK(cudaFree(words));
  if (reused == 0) GTEST_SKIP() << "the driver reused no stream handle in " << tries << " tries: the case is not shown";
}

}  // namespace
}  // namespace iris
