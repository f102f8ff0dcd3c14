#include "base/cpu_list.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>

namespace bx {
namespace {

std::vector<int> Ok(Result<std::vector<int>> cpus) {
  EXPECT_TRUE(cpus.ok()) << cpus.status().ToString();
  return cpus.ok() ? std::move(cpus).value() : std::vector<int>{};
}

TEST(CpuListTest, ParsesWhatLinuxPrints) {
  EXPECT_EQ(Ok(ParseCpuList("3")), (std::vector<int>{3}));
  EXPECT_EQ(Ok(ParseCpuList("0-3,8,10-11")), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(Ok(ParseCpuList("2,1,2,1-2")), (std::vector<int>{2, 1}));  // order kept, each once
}

TEST(CpuListTest, RefusesAnythingElseSayingWhat) {
  for (const char* bad : {"", ",", "1,", ",1", "a", "1-", "-1", "3-1", "1 2", "4096", "1.5"}) {
    auto cpus = ParseCpuList(bad);
    EXPECT_EQ(cpus.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_NE(ParseCpuList("3-1").status().message().find("backwards"), std::string::npos);
}

TEST(CpuListTest, TheEnvironmentOverridesAndEveryCpuMustBeOneWeMayRunOn) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  unsetenv("BX_IO_CPUS");
  EXPECT_EQ(Ok(IoCpusFromEnvironment({first})), (std::vector<int>{first}));
  EXPECT_TRUE(Ok(IoCpusFromEnvironment({})).empty());
  setenv("BX_IO_CPUS", std::to_string(first).c_str(), 1);
  EXPECT_EQ(Ok(IoCpusFromEnvironment({})), (std::vector<int>{first}));
  setenv("BX_IO_CPUS", "4095", 1);  // no VM here has it
  auto refused = IoCpusFromEnvironment({});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("4095"), std::string::npos);
  setenv("BX_IO_CPUS", "two", 1);
  refused = IoCpusFromEnvironment({first});
  EXPECT_NE(refused.status().ToString().find("BX_IO_CPUS"), std::string::npos);
  unsetenv("BX_IO_CPUS");
}

}  // namespace
}  // namespace bx
