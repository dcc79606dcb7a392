// A run of this test binary that selects no test fails (exit status 1), where GoogleTest exits 0: a filter
// that matches nothing (a ctest instance discovered for a world size this run does not build, a group of
// the GPU scripts with a typo, a rank child whose sharding left it no test) must not read as a pass.
// Listing (--gtest_list_tests, which ctest's discovery runs) selects nothing and is not a run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace {

class NoTestIsAFailure : public ::testing::EmptyTestEventListener {
  void OnTestIterationEnd(const ::testing::UnitTest& unit, int /*iteration*/) override {
    if (unit.test_to_run_count() > 0) return;
    // RUN_ALL_TESTS still returns 0 after this: the exit status changes at exit, once GoogleTest's own
    // output is printed.
    std::atexit([] {
      std::fflush(nullptr);
      std::fprintf(stderr,
                   "iris_tests: no test ran (the filter selected none); a run that tests nothing fails. Check the "
                   "filter, or the world sizes this build's instances cover (IRIS_TEST_MAX_RANKS).\n");
      std::fflush(stderr);
      std::_Exit(1);
    });
  }
};

const bool registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new NoTestIsAFailure);
  return true;
}();

}  // namespace
