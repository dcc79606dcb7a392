// Host tests of the CUDA error texts (src/core/error.cc): the errors of a CUDA graph capture say what to do
// about them, the others carry the runtime's text alone. No GPU: the codes are passed, not produced.
#include <gtest/gtest.h>

#include <string>

#include "iris/core/cuda_check.hpp"

namespace iris {
namespace {

const std::string kSetup =
    "iris's setup calls (a Context's creation and destruction, allocations, reserve_workspace, the preambles and "
    "release(): they allocate, zero and synchronize) cannot be made while a capture is open, whichever stream it "
    "captures; make them before the capture begins or after it ends, and capture the calls only)";

template <typename E, typename Call>
std::string what_of(Call call, int want_code) {
  try {
    call();
  } catch (const E& e) {
    EXPECT_EQ(e.code(), want_code);
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return "";
}

// A preamble made while the caller captures a stream of its own in global mode fails at its first forbidden
// call (cudaMalloc, a synchronization) with this code; iris's own refusal sees only the context's stream.
TEST(CudaErrors, ACaptureThatForbidsTheCallSaysToMakeSetupCallsBeforeIt) {
  const std::string hint =
      "\n  (a CUDA graph is being captured, on a stream of this device or by a thread in cudaStreamCaptureModeGlobal, "
      "and the capture forbids this call; " +
      kSetup;
  for (cudaError_t code : {cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureImplicit}) {
    const std::string what = what_of<CudaError>([&] { IRIS_CUDA_CHECK(code); }, code);
    EXPECT_TRUE(what.starts_with("CUDA error cudaErrorStreamCapture")) << what;
    EXPECT_TRUE(what.ends_with(hint)) << what;
  }
  // The driver's codes are the same numbers (its error name needs libcuda, absent without a GPU: not compared).
  const std::string what = what_of<CuError>([] { IRIS_CU_CHECK(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); },
                                            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_TRUE(what.starts_with("CUDA driver error ")) << what;
  EXPECT_TRUE(what.ends_with(hint)) << what;
}

TEST(CudaErrors, AnInvalidatedCaptureSaysToCaptureAgain) {
  const std::string what =
      what_of<CudaError>([] { IRIS_CUDA_CHECK(cudaErrorStreamCaptureInvalidated); }, cudaErrorStreamCaptureInvalidated);
  EXPECT_TRUE(
      what.ends_with("\n  (the CUDA graph capture was invalidated by an earlier error or forbidden call; "
                     "end it, discard the graph and capture again; " +
                     kSetup))
      << what;
}

TEST(CudaErrors, OtherErrorsCarryTheRuntimesTextAlone) {
  const std::string what =
      what_of<CudaError>([] { IRIS_CUDA_CHECK(cudaErrorMemoryAllocation); }, cudaErrorMemoryAllocation);
  EXPECT_TRUE(what.starts_with("CUDA error cudaErrorMemoryAllocation (2): ")) << what;
  EXPECT_EQ(what.find("(a CUDA graph"), std::string::npos) << what;
  EXPECT_NE(what.find("\n  in cudaErrorMemoryAllocation\n  at "), std::string::npos) << what;
}

}  // namespace
}  // namespace iris
