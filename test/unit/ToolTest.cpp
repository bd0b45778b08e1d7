//===- ToolTest.cpp - How the command-line tools end on failures ---------===//

#include "strata/Tool/Tool.h"

#include "llvm/Support/ErrorHandling.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <exception>
#include <system_error>

namespace {

/// Throws `e` where no one catches it (past a noexcept function, as from a
/// thread's body): std::terminate.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wterminate"
template <typename E> void uncaught(const E &e) {
  [&]() noexcept { throw e; }();
}
#pragma GCC diagnostic pop

// A failed allocation is the machine's limit, not a crash: a located
// message and exit status 1 (LLVM's default aborts with a stack dump that
// asks for a bug report).
TEST(ToolFailures, OutOfMemoryIsAnError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        strata::handleToolFailures("strata-tool");
        llvm::report_bad_alloc_error("Allocation failed");
      },
      testing::ExitedWithCode(1),
      "^strata-tool: error: out of memory \\(Allocation failed\\): give the "
      "process more memory");
}

TEST(ToolFailures, RankIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        strata::handleToolFailures("strata-tool");
        strata::setToolRank(3);
        llvm::report_bad_alloc_error("Allocation failed");
      },
      testing::ExitedWithCode(1), "^strata-tool: error: rank 3: out of memory");
}

// LLVM's thread pool reports a thread it cannot start as a fatal error;
// any other fatal error is an internal one: LLVM's message and an abort
// (the crash report).
TEST(ToolFailures, FatalErrors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        strata::handleToolFailures("strata-tool");
        llvm::report_fatal_error(
            "pthread_create failed: Resource temporarily unavailable");
      },
      testing::ExitedWithCode(1),
      "^strata-tool: error: cannot start a thread \\(pthread_create "
      "failed: Resource temporarily unavailable\\): the process is out of "
      "memory");
  EXPECT_EXIT(
      {
        strata::handleToolFailures("strata-tool");
        llvm::report_fatal_error("an internal error");
      },
      testing::KilledBySignal(SIGABRT), "LLVM ERROR: an internal error");
}

// An exception no one caught: std::bad_alloc and a thread that cannot
// start are the machine's limits; any other is an internal error and aborts.
TEST(ToolFailures, UncaughtExceptions) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        strata::handleToolFailures("strata-tool");
        uncaught(std::bad_alloc());
      },
      testing::ExitedWithCode(1), "^strata-tool: error: out of memory");
  EXPECT_EXIT(
      {
        strata::handleToolFailures("strata-tool");
        uncaught(std::system_error(EAGAIN, std::generic_category()));
      },
      testing::ExitedWithCode(1),
      "^strata-tool: error: cannot start a thread \\(.*\\): the process is "
      "out of memory or at a limit on threads");
  // (The tools' crash report follows, from LLVM's signal handlers.)
  EXPECT_EXIT(
      {
        strata::handleToolFailures("strata-tool");
        uncaught(std::system_error(EINVAL, std::generic_category()));
      },
      testing::KilledBySignal(SIGABRT),
      "terminate called after throwing an instance of 'std::system_error'");
}

} // namespace
