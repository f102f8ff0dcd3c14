// The device-independent libibverbs functions the simnic now exports (rate conversions, the
// sysfs helpers) give what the installed rdma-core's give, side by side: the system library is
// opened with dlopen and asked the same questions.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <string>

extern "C" {
const char* ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
}

namespace {

class SystemVerbs : public ::testing::Test {
 protected:
  void SetUp() override {
    system_ = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(system_, nullptr) << "the system libibverbs is installed with the project: "
                                << dlerror();
  }
  void TearDown() override {
    if (system_ != nullptr) dlclose(system_);
  }
  template <typename F>
  F* System(const char* name) {
    void* f = dlsym(system_, name);
    EXPECT_NE(f, nullptr) << name;
    return reinterpret_cast<F*>(f);
  }
  void* system_ = nullptr;
};

TEST_F(SystemVerbs, RateConversionsAgreeWithRdmaCore) {
  auto* rate_to_mult = System<int(ibv_rate)>("ibv_rate_to_mult");
  auto* rate_to_mbps = System<int(ibv_rate)>("ibv_rate_to_mbps");
  auto* from_mult = System<ibv_rate(int)>("mult_to_ibv_rate");
  auto* from_mbps = System<ibv_rate(int)>("mbps_to_ibv_rate");
  ASSERT_TRUE(rate_to_mult && rate_to_mbps && from_mult && from_mbps);
  for (int r = 0; r <= 30; ++r) {
    ibv_rate rate = ibv_rate(r);
    EXPECT_EQ(ibv_rate_to_mult(rate), rate_to_mult(rate)) << "rate " << r;
    EXPECT_EQ(ibv_rate_to_mbps(rate), rate_to_mbps(rate)) << "rate " << r;
    // Every value the system maps to a rate maps back the same way here.
    if (int mult = rate_to_mult(rate); mult > 0) {
      EXPECT_EQ(mult_to_ibv_rate(mult), from_mult(mult));
    }
    if (int mbps = rate_to_mbps(rate); mbps > 0) {
      EXPECT_EQ(mbps_to_ibv_rate(mbps), from_mbps(mbps));
    }
  }
  for (int v : {-1, 0, 3, 7, 1000, 12345}) {
    EXPECT_EQ(mult_to_ibv_rate(v), from_mult(v)) << v;
    EXPECT_EQ(mbps_to_ibv_rate(v), from_mbps(v)) << v;
  }
}

TEST_F(SystemVerbs, SysfsHelpersAgreeWithRdmaCore) {
  auto* sysfs_path = System<const char*()>("ibv_get_sysfs_path");
  auto* read_file = System<int(const char*, const char*, char*, size_t)>("ibv_read_sysfs_file");
  ASSERT_TRUE(sysfs_path && read_file);
  EXPECT_STREQ(ibv_get_sysfs_path(), sysfs_path());
  char mine[64], theirs[64];
  int n = ibv_read_sysfs_file("/proc/self", "comm", mine, sizeof(mine));
  int m = read_file("/proc/self", "comm", theirs, sizeof(theirs));
  ASSERT_GT(n, 0);
  EXPECT_EQ(n, m);
  EXPECT_STREQ(mine, theirs);
  EXPECT_EQ(ibv_read_sysfs_file("/proc/self", "no-such-file", mine, sizeof(mine)),
            read_file("/proc/self", "no-such-file", theirs, sizeof(theirs)));
}

}  // namespace
