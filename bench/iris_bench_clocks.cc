#include "iris_bench_clocks.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <utility>

#include "iris_bench_util.hpp"  // median

namespace iris_bench {
namespace {

// The few NVML entry points used here, declared by hand (the toolkit ships no nvml.h on every machine;
// the driver ships the library). Return value 0 is NVML_SUCCESS; clock type 1 is NVML_CLOCK_SM; bit 0x4 of
// the clock limiters is the software power cap.
using NvmlInit = int (*)();
using NvmlHandleByPci = int (*)(const char*, void**);
using NvmlClockInfo = int (*)(void*, int, unsigned*);
using NvmlReasons = int (*)(void*, unsigned long long*);
using NvmlErrorString = const char* (*)(int);
constexpr int kNvmlClockSm = 1;
constexpr unsigned long long kSwPowerCap = 0x4ull;
constexpr auto kPeriod = std::chrono::milliseconds(1);

struct Nvml {
  NvmlHandleByPci handle_by_pci = nullptr;
  NvmlClockInfo clock_info = nullptr;
  NvmlReasons reasons = nullptr;  // may stay null: clocks without limiters
  NvmlErrorString error_string = nullptr;
  std::string why;  // "" when loaded and initialised
};

// Loaded and initialised once per process, never unloaded (the ranks' threads share it).
const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      n.why = "libnvidia-ml.so.1 not found";
      return;
    }
    auto init = reinterpret_cast<NvmlInit>(dlsym(lib, "nvmlInit_v2"));
    n.handle_by_pci = reinterpret_cast<NvmlHandleByPci>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.clock_info = reinterpret_cast<NvmlClockInfo>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    n.reasons = reinterpret_cast<NvmlReasons>(dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (n.reasons == nullptr)
      n.reasons = reinterpret_cast<NvmlReasons>(dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    n.error_string = reinterpret_cast<NvmlErrorString>(dlsym(lib, "nvmlErrorString"));
    if (init == nullptr || n.handle_by_pci == nullptr || n.clock_info == nullptr) {
      n.why = "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetClockInfo";
      return;
    }
    if (const int rc = init(); rc != 0)
      n.why = std::string("nvmlInit_v2 failed: ") + (n.error_string ? n.error_string(rc) : std::to_string(rc));
  });
  return n;
}

}  // namespace

double ClockSampler::now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ClockSampler::ClockSampler(int device) {
  const Nvml& n = nvml();
  if (!n.why.empty()) {
    why_ = n.why;
    return;
  }
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    cudaGetLastError();
    why_ = "cudaDeviceGetPCIBusId failed for device " + std::to_string(device);
    return;
  }
  void* handle = nullptr;
  if (const int rc = n.handle_by_pci(bus, &handle); rc != 0) {
    why_ = std::string("nvmlDeviceGetHandleByPciBusId_v2(") + bus +
           ") failed: " + (n.error_string ? n.error_string(rc) : std::to_string(rc));
    return;
  }
  unsigned mhz = 0;
  if (const int rc = n.clock_info(handle, kNvmlClockSm, &mhz); rc != 0) {
    why_ = std::string("nvmlDeviceGetClockInfo failed: ") + (n.error_string ? n.error_string(rc) : std::to_string(rc));
    return;
  }
  device_ = handle;
}

ClockSampler::~ClockSampler() { stop(); }

void ClockSampler::start() {
  stop();
  samples_.clear();
  if (!available()) return;
  running_ = true;
  thread_ = std::thread([this] {
    const Nvml& n = nvml();
    auto next = std::chrono::steady_clock::now();
    while (running_.load(std::memory_order_relaxed)) {
      Sample s;
      s.t_s = now_s();
      if (n.clock_info(device_, kNvmlClockSm, &s.sm_mhz) == 0) {
        unsigned long long reasons = 0;
        s.power_capped = n.reasons != nullptr && n.reasons(device_, &reasons) == 0 && (reasons & kSwPowerCap) != 0;
        samples_.push_back(s);
      }
      next += kPeriod;
      std::this_thread::sleep_until(next);
    }
  });
}

std::vector<ClockSampler::Sample> ClockSampler::stop() {
  if (!thread_.joinable()) return samples_;
  running_ = false;
  thread_.join();
  return samples_;
}

ClockStats clock_stats(const std::vector<ClockSampler::Sample>& samples,
                       const std::vector<std::pair<double, double>>& intervals) {
  std::vector<double> mhz;
  int capped = 0;
  for (const auto& s : samples)
    for (const auto& [begin, end] : intervals)
      if (s.t_s >= begin && s.t_s < end) {
        mhz.push_back(s.sm_mhz);
        capped += s.power_capped ? 1 : 0;
        break;
      }
  if (static_cast<int>(mhz.size()) < kMinClockSamples) return {std::nan(""), std::nan("")};
  const double share = static_cast<double>(capped) / static_cast<double>(mhz.size());
  return {median(std::move(mhz)), share};
}

}  // namespace iris_bench
