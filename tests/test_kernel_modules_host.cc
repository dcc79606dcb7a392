// Host tests of loading iris's kernels ahead of their first launch (core/kernel_modules.hpp): every file
// that defines kernels registers them, and without a driver the loading reports why instead of throwing.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/kernel_modules.hpp"

namespace iris {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<fs::path> sources_under(const fs::path& dir, const std::string& extension) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == extension) found.push_back(entry.path());
  return found;
}

// A file with a kernel but no IRIS_KERNEL_MODULE would load its kernels at their first launch, which waits
// for every kernel running on the device: that is what ContextOptions::load_kernels is there to avoid.
TEST(KernelModules, EveryFileThatDefinesKernelsRegistersThem) {
  const fs::path src = fs::path(IRIS_SOURCE_DIR) / "src";
  ASSERT_TRUE(fs::is_directory(src)) << src;
  int with_kernels = 0, gemm_instances = 0;
  for (const fs::path& file : sources_under(src, ".cu")) {
    const std::string text = read_text(file);
    if (text.find("__global__") != std::string::npos) {
      ++with_kernels;
      EXPECT_NE(text.find("\nIRIS_KERNEL_MODULE("), std::string::npos)
          << file << " defines kernels but registers none (IRIS_KERNEL_MODULE, core/kernel_modules.hpp)";
    }
    if (text.find("template struct Sm90Gemm<") != std::string::npos) {
      ++gemm_instances;
      EXPECT_NE(text.find("#include \"ops/gemm_sm90_impl.hpp\""), std::string::npos)
          << file << " instantiates the GEMM core without gemm_sm90_impl.hpp, which registers its kernels";
    }
  }
  EXPECT_GE(with_kernels, 10) << "the scan found too few files with kernels: is " << src << " iris's src?";
  EXPECT_GE(gemm_instances, 1);
  EXPECT_NE(read_text(src / "ops" / "gemm_sm90_impl.hpp").find("::kernel_registered ="), std::string::npos)
      << "gemm_sm90_impl.hpp no longer registers each GEMM instantiation's kernel";
  // This binary links every file with kernels (each registers at least one) and the GEMM instantiations.
  EXPECT_GE(detail::registered_kernel_modules(), static_cast<size_t>(with_kernels));
}

TEST(KernelModules, LoadingWithoutADeviceReportsWhyInsteadOfThrowing) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) GTEST_SKIP() << "a CUDA device is present";
  cudaGetLastError();
  const detail::KernelLoadReport report = detail::load_kernel_modules();
  EXPECT_FALSE(report.failure.empty());
  EXPECT_EQ(report.kernels, 0);
}

}  // namespace
}  // namespace iris
