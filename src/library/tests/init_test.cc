// bx::Init as a program meets it. ctest runs every test in a process of its own (gtest_discover_
// tests), so each starts from a process nobody has initialised.
#include "bx/init.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "bx/buffer.h"
#include "bx/transport.h"
#include "transport/rdma/rdma_transport.h"

namespace bx {
namespace {

using std::chrono::seconds;

InitOptions TcpOnly() {
  InitOptions options;
  options.rdma = false;
  return options;
}

// One message to a listener that echoes it, and back.
void ExpectEcho(Transport& transport, const std::string& url) {
  auto listener = transport.Listen(url, [](const std::shared_ptr<Socket>&) {
    SocketHandlers handlers;
    handlers.on_message = [](Socket& socket, Buffer message) { socket.Send(std::move(message)); };
    return handlers;
  });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto socket = transport.Connect((*listener)->url(), {}, seconds(10));
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  Result<Buffer> message = Buffer::Allocate(4096);
  ASSERT_TRUE(message.ok()) << message.status().ToString();
  std::memset(message->data(), 0x5a, message->size());
  (*socket)->Send(std::move(message).value());
  Result<Buffer> reply = (*socket)->Receive(seconds(10));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_EQ(reply->size(), 4096u);
  EXPECT_EQ(reply->data()[4095], std::byte{0x5a});
}

TEST(InitTest, BeforeInitBuffersAndTransportsSayWhatIsMissing) {
  EXPECT_FALSE(IsInitialized());
  Result<Buffer> buffer = Buffer::Allocate(64);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(buffer.status().message().find("bx::Init"), std::string::npos);

  auto transport = CreateTransport("tcp");
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), StatusCode::kNotFound);
  EXPECT_NE(transport.status().message().find("bx::Init"), std::string::npos);
}

TEST(InitTest, TcpOnlyProgramNeedsNoRdmaDevice) {
  ASSERT_TRUE(Init(TcpOnly()).ok());
  EXPECT_TRUE(IsInitialized());
  auto tcp = CreateTransport("tcp");
  ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
  ExpectEcho(**tcp, "tcp://127.0.0.1:0");

  // Its memory is not registered with any NIC: rdma:// is refused, and says why.
  auto rdma = CreateTransport("rdma");
  ASSERT_FALSE(rdma.ok());
  EXPECT_EQ(rdma.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(rdma.status().message().find("without a verbs device"), std::string::npos)
      << rdma.status().ToString();
}

TEST(InitTest, RdmaProgramRunsBothTransports) {
  ASSERT_TRUE(Init().ok());  // the simnic here (BX_VERBS=sim)
  for (const char* url : {"rdma://127.0.0.1:0", "tcp://127.0.0.1:0"}) {
    auto transport = CreateTransport(ParseUrl(url)->scheme);
    ASSERT_TRUE(transport.ok()) << transport.status().ToString();
    ExpectEcho(**transport, url);
  }
}

TEST(InitTest, AgainWithTheSameOptionsIsOkWithOthersRefused) {
  ASSERT_TRUE(Init(TcpOnly()).ok());
  EXPECT_TRUE(Init(TcpOnly()).ok());
  Status rdma = Init();
  EXPECT_EQ(rdma.code(), StatusCode::kFailedPrecondition) << rdma.ToString();
  EXPECT_NE(rdma.message().find("without RDMA"), std::string::npos) << rdma.ToString();
}

TEST(InitTest, AnotherDeviceThanTheOneInUseIsRefused) {
  ASSERT_TRUE(Init().ok());
  EXPECT_TRUE(Init().ok());
  InitOptions other;
  other.device = "some_other_nic0";
  Status status = Init(other);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
}

TEST(InitTest, MissingDeviceFailsAndLeavesTheProcessForATcpOnlyRetry) {
  InitOptions missing;
  missing.device = "no_such_device0";
  Status status = Init(missing);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("no_such_device0"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("rdma = false"), std::string::npos) << status.ToString();
  EXPECT_FALSE(IsInitialized());
  ASSERT_TRUE(Init(TcpOnly()).ok());
  EXPECT_TRUE(CreateTransport("tcp").ok());
}

TEST(InitTest, AdoptsThePoolAnRdmaTransportSetUpBeforeInit) {
  // A program that created an rdma:// transport itself before calling Init (as the tools did)
  // has bemalloc registered on that transport's device: Init accepts it rather than failing.
  auto early = rdma::CreateRdmaTransport(TransportOptions{});
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  ASSERT_TRUE(bemalloc::IsInitialized());
  EXPECT_TRUE(Init().ok());
  EXPECT_TRUE(IsInitialized());
  EXPECT_EQ(Init(TcpOnly()).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Version().empty());
}

}  // namespace
}  // namespace bx
