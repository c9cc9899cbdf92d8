#include "fairseq_cpp/core/errors.h"

#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include "fairseq_cpp/core/main.h"

namespace fairseq_cpp {
namespace {

// Runs guarded_main with `body` and returns (exit code, stderr).
std::pair<int, std::string> guarded(const std::function<int()>& body) {
  ::testing::internal::CaptureStderr();
  int code = core::guarded_main("prog", body);
  return {code, ::testing::internal::GetCapturedStderr()};
}

TEST(Errors, ExitCodesByKind) {
  EXPECT_EQ(UserError("x").exit_code(), 2);
  EXPECT_EQ(DataError("x").exit_code(), 2);
  EXPECT_EQ(ConfigError({"a"}).exit_code(), 2);
  EXPECT_EQ(OperationalError("x").exit_code(), 1);
  EXPECT_EQ(NotImplementedError("x").exit_code(), 1);
}

TEST(Errors, RaiseFormats) {
  try {
    raise<DataError>("{}:{}: expected a count, found \"{}\"", "dict.txt", 3, "abc");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "dict.txt:3: expected a count, found \"abc\"");
  }
}

TEST(Errors, GuardedMainMapsExceptionsToExitCodes) {
  EXPECT_EQ(guarded([] { return 0; }), std::make_pair(0, std::string()));
  EXPECT_EQ(guarded([]() -> int { throw UserError("bad flag"); }),
            std::make_pair(2, std::string("prog: error: bad flag\n")));
  EXPECT_EQ(guarded([]() -> int { throw OperationalError("disk full"); }),
            std::make_pair(1, std::string("prog: error: disk full\n")));
  EXPECT_EQ(guarded([]() -> int {
              throw ConfigError({"one", "two"});
            }),
            std::make_pair(2, std::string("prog: error: one\nprog: error: two\n")));
  EXPECT_EQ(guarded([]() -> int { throw std::runtime_error("boom"); }),
            std::make_pair(1, std::string("prog: error: boom\n")));
  auto [code, err] = guarded([]() -> int { TORCH_CHECK(false, "shape mismatch"); });
  EXPECT_EQ(code, 1);
  EXPECT_EQ(err, "prog: error: LibTorch: shape mismatch\n");
}

TEST(Errors, BacktraceOnlyInDebug) {
  EXPECT_TRUE(UserError("x").backtrace().empty());
  core::set_debug(true);
  UserError e("x");
  core::set_debug(false);
  EXPECT_NE(e.backtrace().find("#0"), std::string::npos);
}

TEST(Errors, TorchMessagesAreOneLineWithoutInternalAssertions) {
  EXPECT_EQ(core::torch_message("shape mismatch: [2] vs [3]\nException raised from f at x.cpp:1"),
            "shape mismatch: [2] vs [3]");
  const std::string internal =
      core::torch_message("isInt() INTERNAL ASSERT FAILED at \"ivalue.h\":1, please report a bug to PyTorch.\nmore");
  EXPECT_EQ(internal.find("INTERNAL ASSERT"), std::string::npos) << internal;
  EXPECT_EQ(internal.find('\n'), std::string::npos) << internal;
  EXPECT_NE(internal.find("--debug"), std::string::npos) << internal;
}

}  // namespace
}  // namespace fairseq_cpp
