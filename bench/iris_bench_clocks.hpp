// iris-bench and gemm_bench: the SM clock while each path is timed. A GPU at its power limit lowers its
// clock, and a path that adds NVLink or copy-engine traffic to a GEMM may lower it further: on 2 x H200
// the same GEMM timed 694 us in one run and 818 us in another (bench/results/2026-11-29-h200x2-fused-*),
// and the fused ops' ratios moved with it. The clock beside each time says whether a ratio is the code's
// or the power budget's.
//
// A host thread samples NVML (libnvidia-ml.so.1, opened at run time: nothing links against it; without
// it, or without a GPU, no clock is reported) every millisecond while the turns run; each sample is
// given to the turn whose interval on the GPU holds it. The intervals are placed on the host's clock from
// the moment the host sees the last event complete (polled every 20 us), so each boundary is known to
// about that much; turns shorter than a few samples report no clock.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace iris_bench {

class ClockSampler {
 public:
  struct Sample {
    double t_s = 0;             // host steady clock, seconds
    unsigned sm_mhz = 0;        // NVML_CLOCK_SM
    bool power_capped = false;  // the software power cap was among the clock's limiters
  };

  // For CUDA device `device`. Never throws: when NVML is missing or refuses, available() is false and
  // why() says what happened.
  explicit ClockSampler(int device);
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why() const { return why_; }

  // Starts sampling (nothing when unavailable); stop() ends it and returns the samples in time order.
  void start();
  std::vector<Sample> stop();

  static double now_s();

 private:
  void* device_ = nullptr;  // nvmlDevice_t
  std::string why_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::vector<Sample> samples_;
};

// Median SM MHz and the fraction of power-capped samples over the samples inside any of `intervals`
// ([begin, end) pairs of host seconds); NaN for both when fewer than kMinClockSamples fall inside.
inline constexpr int kMinClockSamples = 3;
struct ClockStats {
  double sm_mhz;
  double power_capped;
};
ClockStats clock_stats(const std::vector<ClockSampler::Sample>& samples,
                       const std::vector<std::pair<double, double>>& intervals);

}  // namespace iris_bench
