#include "bx/buffer.h"

#include <gtest/gtest.h>

#include <utility>

namespace bx {
namespace {

TEST(BufferTest, AllocateGivesRegisteredMemoryOfTheRequestedSize) {
  Result<Buffer> buffer = Buffer::Allocate(1000);
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  EXPECT_EQ(buffer->size(), 1000u);
  EXPECT_GE(buffer->capacity(), 1000u);
  EXPECT_NE(bemalloc::GetMR(buffer->data()), nullptr);
  EXPECT_EQ(buffer->lkey(), bemalloc::Lkey(buffer->data()));
  EXPECT_EQ(buffer->rkey(), bemalloc::Rkey(buffer->data()));
}

TEST(BufferTest, MoveTransfersOwnership) {
  Buffer a = std::move(Buffer::Allocate(64).value());
  std::byte* data = a.data();
  Buffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), data);
  Buffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_TRUE(c);
}

TEST(BufferTest, ReleaseAndAdoptRoundTrip) {
  Buffer a = std::move(Buffer::Allocate(300).value());
  size_t capacity = a.capacity();
  std::byte* raw = a.Release();
  EXPECT_FALSE(a);
  Buffer b = Buffer::Adopt(raw, 100, capacity);
  EXPECT_EQ(b.data(), raw);
  EXPECT_EQ(b.size(), 100u);
  b.Resize(capacity);
  EXPECT_EQ(b.size(), capacity);
  b.Reset();
  EXPECT_FALSE(b);
}

}  // namespace
}  // namespace bx
