// TransportOptions::io_cpus and BX_IO_CPUS: every I/O thread of either transport runs
// on the CPUs it names, and a list that cannot be kept fails the transport, saying why.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "transport/tests/transports_under_test.h"

namespace bx::transport::testing {
namespace {

// Each thread of this process whose name starts with `prefix`: its Cpus_allowed_list.
std::map<std::string, std::string> AffinityOfThreads(const std::string& prefix) {
  std::map<std::string, std::string> found;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return found;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + entry->d_name;
    std::string name;
    std::getline(std::ifstream(task + "/comm"), name);
    if (name.rfind(prefix, 0) != 0) continue;
    std::ifstream status(task + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) {
        found[name + "/" + entry->d_name] = line.substr(line.find_first_not_of(" \t", 18));
      }
    }
  }
  closedir(dir);
  return found;
}

int LastAllowedCpu() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof(allowed), &allowed);
  int last = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) last = cpu;
  }
  return last;
}

// The threads named `prefix` once `count` of them run on `cpu` only, or after five seconds: an
// rdma I/O thread names itself as its loop starts, which may be after its transport is returned.
std::map<std::string, std::string> WaitForPinnedThreads(const std::string& prefix, int cpu,
                                                        size_t count) {
  std::map<std::string, std::string> threads;
  for (int i = 0; i < 5000; ++i) {
    threads = AffinityOfThreads(prefix);
    size_t pinned = 0;
    for (const auto& [name, cpus] : threads) pinned += cpus == std::to_string(cpu);
    if (threads.size() == count && pinned == count) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return threads;
}

class IoCpusTest : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override { unsetenv("BX_IO_CPUS"); }
  std::string ThreadPrefix() const { return "bx-" + GetParam() + "-io"; }
};

TEST_P(IoCpusTest, EveryIoThreadRunsOnTheNamedCpu) {
  const int cpu = LastAllowedCpu();
  TransportOptions options;
  options.io_threads = 2;
  options.io_cpus = {cpu};
  auto transport = FindTransport(GetParam()).create(options);
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  const auto threads = WaitForPinnedThreads(ThreadPrefix(), cpu, 2);
  ASSERT_EQ(threads.size(), 2u);
  for (const auto& [name, cpus] : threads) EXPECT_EQ(cpus, std::to_string(cpu)) << name;
}

TEST_P(IoCpusTest, BxIoCpusOverridesTheOptions) {
  const int cpu = LastAllowedCpu();
  setenv("BX_IO_CPUS", std::to_string(cpu).c_str(), 1);
  auto transport = FindTransport(GetParam()).create({});
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  const auto threads = WaitForPinnedThreads(ThreadPrefix(), cpu, 1);
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads.begin()->second, std::to_string(cpu));
}

TEST_P(IoCpusTest, AListThatCannotBeKeptFailsTheTransport) {
  for (const char* bad : {"4095", "1-0", "x"}) {
    setenv("BX_IO_CPUS", bad, 1);
    auto transport = FindTransport(GetParam()).create({});
    EXPECT_EQ(transport.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(transport.status().ToString().find(GetParam() + " transport"), std::string::npos)
        << transport.status().ToString();
  }
  unsetenv("BX_IO_CPUS");
  TransportOptions options;
  options.io_cpus = {4095};
  EXPECT_EQ(FindTransport(GetParam()).create(options).status().code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, IoCpusTest, ::testing::ValuesIn(SchemesUnderTest()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bx::transport::testing
