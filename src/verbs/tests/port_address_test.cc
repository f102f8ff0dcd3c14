// ChooseRoceGid on GID tables shaped like those of RoCE NICs (mlx5 on a host with IPv4 and
// IPv6): which GID a connection uses is decided here, before any QP exists.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>

#include "verbs/port_address.h"

namespace bx::verbs {
namespace {

ibv_gid Gid(const char* ipv6) {
  ibv_gid gid{};
  EXPECT_EQ(inet_pton(AF_INET6, ipv6, gid.raw), 1) << ipv6;
  return gid;
}

// fe80 link-local, then two IPv4 addresses and a global IPv6 address, each as v1 and v2.
std::vector<GidTableEntry> HostTable() {
  const char* addresses[] = {"fe80::1", "::ffff:10.0.0.7", "::ffff:192.168.1.5", "2001:db8::7"};
  std::vector<GidTableEntry> table;
  uint32_t index = 0;
  for (const char* a : addresses) {
    table.push_back({index++, Gid(a), IBV_GID_TYPE_ROCE_V1});
    table.push_back({index++, Gid(a), IBV_GID_TYPE_ROCE_V2});
  }
  return table;
}

sockaddr_in Ipv4(const char* text) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, text, &a.sin_addr);
  return a;
}

sockaddr_in6 Ipv6(const char* text) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  inet_pton(AF_INET6, text, &a.sin6_addr);
  return a;
}

const sockaddr* Sa(const void* a) {
  return static_cast<const sockaddr*>(a);
}

TEST(PortAddressTest, PicksTheRoceV2GidOfTheBootstrapAddressAmongSeveral) {
  std::string reason;
  sockaddr_in second = Ipv4("192.168.1.5");
  auto chosen = ChooseRoceGid(HostTable(), Sa(&second), -1, &reason);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_EQ(chosen->index, 5u) << "the v2 entry of 192.168.1.5, not its v1 entry (4)";
  EXPECT_NE(reason.find("bootstrap address ::ffff:192.168.1.5"), std::string::npos) << reason;

  sockaddr_in first = Ipv4("10.0.0.7");
  EXPECT_EQ(ChooseRoceGid(HostTable(), Sa(&first), -1, &reason)->index, 3u);
  sockaddr_in6 global = Ipv6("2001:db8::7");
  EXPECT_EQ(ChooseRoceGid(HostTable(), Sa(&global), -1, &reason)->index, 7u);
}

TEST(PortAddressTest, WithoutAMatchTakesTheFirstRoutableRoceV2Gid) {
  std::string reason;
  sockaddr_in loopback = Ipv4("127.0.0.1");
  auto chosen = ChooseRoceGid(HostTable(), Sa(&loopback), -1, &reason);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->index, 3u) << "not the link-local v2 GID (1): it does not cross a router";
  EXPECT_NE(reason.find("first routable RoCE v2"), std::string::npos) << reason;
  EXPECT_EQ(ChooseRoceGid(HostTable(), nullptr, -1, &reason)->index, 3u);

  // Only link-local v2: better than none.
  std::vector<GidTableEntry> link_local{HostTable()[0], HostTable()[1]};
  chosen = ChooseRoceGid(link_local, Sa(&loopback), -1, &reason);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->index, 1u);
  EXPECT_NE(reason.find("link-local"), std::string::npos) << reason;
}

TEST(PortAddressTest, AnOverrideIsHonouredEvenForRoceV1AndMustNameAnEntry) {
  std::string reason;
  sockaddr_in first = Ipv4("10.0.0.7");
  auto chosen = ChooseRoceGid(HostTable(), Sa(&first), 2, &reason);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->index, 2u);
  EXPECT_EQ(chosen->type, IBV_GID_TYPE_ROCE_V1);
  EXPECT_NE(reason.find("configured"), std::string::npos) << reason;

  auto missing = ChooseRoceGid(HostTable(), Sa(&first), 40, &reason);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("GID index 40"), std::string::npos);
}

TEST(PortAddressTest, NoRoceV2GidIsAClearErrorNotASilentV1Choice) {
  std::vector<GidTableEntry> v1_only;
  for (const GidTableEntry& e : HostTable())
    if (e.type == IBV_GID_TYPE_ROCE_V1) v1_only.push_back(e);
  std::string reason;
  sockaddr_in first = Ipv4("10.0.0.7");
  auto chosen = ChooseRoceGid(v1_only, Sa(&first), -1, &reason);
  ASSERT_FALSE(chosen.ok()) << "index " << chosen->index << " (" << reason << ")";
  EXPECT_EQ(chosen.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(chosen.status().message().find("no RoCE v2 GID"), std::string::npos);
  EXPECT_NE(chosen.status().message().find("BX_GID_INDEX"), std::string::npos);
}

TEST(PortAddressTest, GidIndexFromTheEnvironmentIsCheckedAndOverrides) {
  setenv("BX_GID_INDEX", "3", 1);
  EXPECT_EQ(GidIndexFromEnvironment(-1).value(), 3);
  setenv("BX_GID_INDEX", "x3", 1);
  EXPECT_FALSE(GidIndexFromEnvironment(-1).ok());
  setenv("BX_GID_INDEX", "256", 1);
  EXPECT_FALSE(GidIndexFromEnvironment(-1).ok());
  unsetenv("BX_GID_INDEX");
  EXPECT_EQ(GidIndexFromEnvironment(-1).value(), -1);
}

}  // namespace
}  // namespace bx::verbs
