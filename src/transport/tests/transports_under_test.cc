#include "transport/tests/transports_under_test.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "alloc/testing/test_memory.h"
#include "bx/bemalloc.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "verbs/verbs.h"

namespace bx::transport::testing {

const std::vector<TransportUnderTest>& TransportsUnderTest() {
  static const std::vector<TransportUnderTest> transports = {
      {"tcp", &tcp::CreateTcpTransport},
      {"rdma", [](const TransportOptions& o) { return rdma::CreateRdmaTransport(o); }},
  };
  return transports;
}

std::vector<std::string> SchemesUnderTest() {
  std::vector<std::string> schemes;
  for (const TransportUnderTest& transport : TransportsUnderTest()) {
    schemes.push_back(transport.scheme);
  }
  return schemes;
}

const TransportUnderTest& FindTransport(const std::string& scheme) {
  for (const TransportUnderTest& transport : TransportsUnderTest()) {
    if (transport.scheme == scheme) return transport;
  }
  std::fprintf(stderr, "no transport under test named %s\n", scheme.c_str());
  std::abort();
}

namespace {

verbs::Device* g_device = nullptr;  // leaked: bemalloc needs it until exit

[[noreturn]] void Fail(const Status& status) {
  std::fprintf(stderr, "bx_transport_test: cannot initialise bemalloc: %s\n",
               status.ToString().c_str());
  std::exit(1);
}

}  // namespace

void InitTestMemoryPool() {
  g_device = &test_support::InitTestMemory();
}

verbs::Device* TestDevice() {
  return g_device;
}

namespace {

// xorshift64*: fast enough to fill 64 MB in a few milliseconds, and every byte depends on seed.
uint64_t NextWord(uint64_t& state) {
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1DULL;
}

void FillPattern(std::byte* data, size_t size, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + size + 1;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word = NextWord(state);
    std::memcpy(data + i, &word, 8);
  }
  uint64_t word = NextWord(state);
  std::memcpy(data + i, &word, size - i);
}

}  // namespace

Buffer PatternMessage(size_t size, uint64_t seed) {
  Result<Buffer> buffer = Buffer::Allocate(size);
  if (!buffer.ok()) Fail(buffer.status());
  FillPattern(buffer->data(), size, seed);
  return std::move(buffer).value();
}

bool HasPattern(const Buffer& message, size_t size, uint64_t seed) {
  if (message.size() != size) return false;
  std::vector<std::byte> expected(size + 8);
  FillPattern(expected.data(), size, seed);
  return std::memcmp(expected.data(), message.data(), size) == 0;
}

std::unique_ptr<Transport> MakeRdma(const RdmaOptions& rdma, int io_threads) {
  TransportOptions options;
  options.io_threads = io_threads;
  options.rdma = rdma;
  auto t = rdma::CreateRdmaTransport(options);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

rdma::RdmaTransportInfo InfoOf(Transport& transport) {
  auto info = rdma::GetRdmaTransportInfo(transport);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  return info.ok() ? std::move(info).value() : rdma::RdmaTransportInfo{};
}

}  // namespace bx::transport::testing
