#include "worker/collective/message.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace fulcrum {
namespace {

// 37 floats as bytes behind a 3-byte prefix (so no float is aligned), cut
// into pieces of 1 to 9 bytes: most floats are split between pieces.
struct Borrowed {
  std::vector<float> floats;
  std::shared_ptr<std::string> bytes;
  std::vector<Message::Piece> pieces;
};
Borrowed MakeBorrowed() {
  Borrowed b;
  for (int i = 0; i < 37; ++i) b.floats.push_back(0.25f * static_cast<float>(i) - 3.0f);
  b.bytes = std::make_shared<std::string>(3, 'x');
  b.bytes->append(reinterpret_cast<const char*>(b.floats.data()), b.floats.size() * sizeof(float));
  size_t at = 3;
  for (size_t cut = 1; at < b.bytes->size(); cut = cut % 9 + 1) {
    const size_t take = std::min(cut, b.bytes->size() - at);
    b.pieces.emplace_back(b.bytes->data() + at, take);
    at += take;
  }
  return b;
}

TEST(MessageTest, BorrowedPiecesReadAsTheirFloatsWhereverTheyAreCut) {
  Borrowed b = MakeBorrowed();
  Message message(b.pieces, b.bytes);
  ASSERT_EQ(message.size(), b.floats.size());
  std::vector<float> copied(b.floats.size(), -1.0f);
  message.CopyTo(copied.data());
  EXPECT_EQ(copied, b.floats);

  std::vector<float> addend(b.floats.size()), summed(b.floats.size()), added(b.floats.size());
  for (size_t i = 0; i < addend.size(); ++i) added[i] = addend[i] = 1.0f / (1.0f + i);
  message.SumTo(addend.data(), summed.data());
  message.AddTo(added.data());
  for (size_t i = 0; i < b.floats.size(); ++i) {
    EXPECT_EQ(summed[i], b.floats[i] + addend[i]) << "float " << i;
    EXPECT_EQ(added[i], addend[i] + b.floats[i]) << "float " << i;
  }
  EXPECT_EQ(message.owner(), b.bytes);
  const MessageFloats taken = std::move(message).Take();
  EXPECT_EQ(std::vector<float>(taken.begin(), taken.end()), b.floats);
}

TEST(MessageTest, OwnedFloatsAreTakenBackWithoutACopy) {
  MessageFloats floats = {1.0f, 2.0f, 3.0f};
  const float* data = floats.data();
  Message message(std::move(floats));
  EXPECT_EQ(message.size(), 3u);
  EXPECT_EQ(message.owner(), nullptr);
  float sum[3];
  const float addend[] = {0.5f, 0.5f, 0.5f};
  message.SumTo(addend, sum);
  EXPECT_EQ(sum[2], 3.5f);
  const MessageFloats taken = std::move(message).Take();
  EXPECT_EQ(taken.data(), data);
  EXPECT_TRUE(message.empty());  // NOLINT(bugprone-use-after-move): Take leaves it empty
  EXPECT_TRUE(Message().empty());
}

}  // namespace
}  // namespace fulcrum
