// Uses the installed headers and library: parses a heap size and reports the visible GPUs.
#include <cstdio>

#include "iris/context.hpp"

int main() {
  size_t bytes = iris::parse_byte_size("512M");
  if (bytes != (size_t{512} << 20)) return 1;
  std::printf("iris consumer: find_package(iris) works; %d GPU(s) visible\n", iris::local_device_count());
  return 0;
}
