#include <gtest/gtest.h>

#include "bx/transport.h"

namespace bx {
namespace {

TEST(UrlTest, ParsesSchemeHostAndPort) {
  Result<Url> url = ParseUrl("rdma://10.0.0.1:7000");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->scheme, "rdma");
  EXPECT_EQ(url->host, "10.0.0.1");
  EXPECT_EQ(url->port, 7000);
  EXPECT_EQ(url->ToString(), "rdma://10.0.0.1:7000");
}

TEST(UrlTest, PortZeroAndNames) {
  Result<Url> url = ParseUrl("tcp://localhost:0");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "localhost");
  EXPECT_EQ(url->port, 0);
}

TEST(UrlTest, Ipv6NeedsBracketsAndKeepsThem) {
  Result<Url> url = ParseUrl("tcp://[::1]:9");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->ToString(), "tcp://[::1]:9");
  EXPECT_FALSE(ParseUrl("tcp://::1:9").ok());
}

TEST(UrlTest, RejectsMalformed) {
  for (const char* bad : {"", "tcp", "tcp://", "://h:1", "tcp://h", "tcp://h:", "tcp://:1",
                          "tcp://h:65536", "tcp://h:-1", "tcp://h:1x", "TCP://h:1", "tcp://[::1"}) {
    Result<Url> url = ParseUrl(bad);
    EXPECT_FALSE(url.ok()) << bad;
    if (!url.ok()) {
      EXPECT_EQ(url.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

}  // namespace
}  // namespace bx
