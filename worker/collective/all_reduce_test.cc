#include "worker/collective/all_reduce.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "worker/collective/in_process_links.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

using Algorithm = absl::Status (*)(PeerLinks&, absl::Span<float>, const AllReduceOptions&);

// Runs `fn` on `n` ranks, each on a thread with its own links and buffer;
// their statuses.
using RankFn = std::function<absl::Status(PeerLinks& links, int rank, absl::Span<float> buffer)>;
std::vector<absl::Status> RunRanks(int n, std::vector<std::vector<float>>& buffers,
                                   const RankFn& fn) {
  Mailbox mailbox(n);
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      InProcessLinks links(&mailbox, r);
      results[r] = fn(links, r, absl::MakeSpan(buffers[r]));
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

struct Case {
  const char* algorithm;
  int ranks;
  int64_t length;
  int64_t chunk;
};

Algorithm Find(const std::string& name) {
  if (name == "ring") return &RingAllReduce;
  if (name == "doubling") return &RecursiveDoublingAllReduce;
  return &AllReduce;
}

class AllReduceTest : public ::testing::TestWithParam<Case> {};

// Every rank ends with the reference sum, bit-identical across ranks, for
// rank counts that are not powers of two, lengths that do not divide evenly
// and chunks smaller than a segment.
TEST_P(AllReduceTest, EveryRankHoldsTheSum) {
  const auto [algorithm, n, length, chunk] = GetParam();
  std::mt19937 gen(static_cast<unsigned>(int64_t{n} * 1000 + length));
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<std::vector<float>> buffers(n, std::vector<float>(length));
  std::vector<double> reference(length, 0.0);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < length; ++i) {
      buffers[r][i] = value(gen);
      reference[i] += buffers[r][i];
    }
  }
  AllReduceOptions options;
  options.chunk_elements = chunk;
  // AllReduce: doubling up to 1024 floats (2 ranks: also up to 2 chunks),
  // the ring above.
  options.small_bytes = 4096;
  const Algorithm run = Find(algorithm);
  for (const absl::Status& s :
       RunRanks(n, buffers, [&](PeerLinks&links, int, absl::Span<float> buffer) {
         return run(links, buffer, options);
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (int64_t i = 0; i < length; ++i) {
    ASSERT_NEAR(buffers[0][i], reference[i], 1e-5) << "element " << i;
  }
  for (int r = 1; r < n; ++r) EXPECT_EQ(buffers[r], buffers[0]) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    RanksAndSizes, AllReduceTest,
    ::testing::Values(
        Case{"ring", 1, 10, 4}, Case{"ring", 2, 0, 4}, Case{"ring", 2, 1, 4}, Case{"ring", 2, 7, 4},
        Case{"ring", 3, 7, 2}, Case{"ring", 3, 1000, 64}, Case{"ring", 4, 3, 1},
        Case{"ring", 4, 4099, 100}, Case{"ring", 5, 12345, 1000}, Case{"ring", 5, 2, 8},
        Case{"ring", 5, 100003, 1 << 18}, Case{"doubling", 1, 5, 0}, Case{"doubling", 2, 1, 0},
        Case{"doubling", 3, 1000, 0}, Case{"doubling", 4, 17, 0}, Case{"doubling", 5, 1024, 0},
        Case{"doubling", 7, 333, 0}, Case{"auto", 5, 1000, 64}, Case{"auto", 5, 5000, 64},
        Case{"auto", 2, 2000, 1000}, Case{"auto", 2, 5000, 64}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.algorithm) + "_n" + std::to_string(info.param.ranks) + "_len" +
             std::to_string(info.param.length) + "_chunk" + std::to_string(info.param.chunk);
    });

// The ring's halves apart: after the reduce-scatter each rank holds the
// whole sum of its own part (the parts cover the buffer once); each then
// changes its part (as an optimizer would update it), and after the
// all-gather every rank holds every rank's changed part, bit-identical.
TEST(RingHalvesTest, EachRankSumsItsPartAndTheGatherSpreadsEveryPart) {
  for (const auto& [ranks, size, chunk] : std::vector<std::tuple<int, int64_t, int64_t>>{
           {1, 10, 4}, {2, 7, 4}, {3, 1000, 64}, {4, 3, 1}, {5, 12345, 1000}}) {
    const int n = ranks;
    const int64_t length = size;
    std::mt19937 gen(static_cast<unsigned>(int64_t{n} * 7 + length));
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<std::vector<float>> buffers(n, std::vector<float>(length));
    std::vector<double> reference(length, 0.0);
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < length; ++i) reference[i] += buffers[r][i] = value(gen);
    }
    std::vector<int> owner(length, -1);
    for (int r = 0; r < n; ++r) {
      const RingPart part = RingPartOf(length, n, r);
      for (int64_t i = part.begin; i < part.end; ++i) {
        ASSERT_EQ(owner[i], -1) << "element " << i << " in two parts";
        owner[i] = r;
      }
    }
    ASSERT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
    AllReduceOptions options;
    options.chunk_elements = chunk;
    const auto halves = [&](PeerLinks& links, int r, absl::Span<float> buffer) {
      if (absl::Status s = RingReduceScatter(links, buffer, options); !s.ok()) return s;
      const RingPart part = RingPartOf(length, n, r);
      for (int64_t i = part.begin; i < part.end; ++i) {
        EXPECT_NEAR(buffer[i], reference[i], 1e-5) << "rank " << r << " element " << i;
        buffer[i] = 2.0f * buffer[i] + static_cast<float>(r);  // this rank's update
      }
      return RingAllGather(links, buffer, options);
    };
    for (const absl::Status& s : RunRanks(n, buffers, halves)) ASSERT_TRUE(s.ok()) << s;
    for (int64_t i = 0; i < length; ++i) {
      ASSERT_NEAR(buffers[0][i], 2.0 * reference[i] + owner[i], 1e-4) << "n " << n << " " << i;
    }
    for (int r = 1; r < n; ++r) EXPECT_EQ(buffers[r], buffers[0]) << "n " << n << " rank " << r;
  }
}

// Every rank ends with the root's buffer, whichever rank is the root, in
// chunks that do not divide the buffer.
TEST(BroadcastTest, EveryRankHoldsTheRootsBuffer) {
  for (int n : {1, 2, 3, 5}) {
    for (int root = 0; root < n; ++root) {
      Mailbox mailbox(n);
      std::vector<std::vector<float>> buffers(n, std::vector<float>(1001));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < buffers[r].size(); ++i) buffers[r][i] = r * 10000.0f + i;
      }
      const std::vector<float> expected = buffers[root];
      AllReduceOptions options;
      options.chunk_elements = 64;
      std::vector<absl::Status> results(n);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          InProcessLinks links(&mailbox, r);
          results[r] = Broadcast(links, root, absl::MakeSpan(buffers[r]), options);
        });
      }
      for (std::thread& t : threads) t.join();
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(results[r].ok()) << results[r];
        EXPECT_EQ(buffers[r], expected) << "n " << n << " root " << root << " rank " << r;
      }
    }
  }
}

// Rounds: what a failed round left is dropped, a notice (empty) is never
// received, and a rank waiting on a peer that moved on learns it at once.
TEST(PeerLinksTest, RoundsDropTheOldAndShowAPeerThatMovedOn) {
  Mailbox mailbox(2);
  InProcessLinks zero(&mailbox, 0), one(&mailbox, 1);
  ASSERT_TRUE(zero.Send(1, std::vector<float>{1.0f}).ok());  // round 0, never taken
  zero.SetTag(1);
  ASSERT_TRUE(zero.Send(1, {}).ok());  // the notice of round 1
  ASSERT_TRUE(zero.Send(1, std::vector<float>{2.0f}).ok());
  const absl::Time soon = absl::Now() + absl::Seconds(5);
  // Still in round 0, rank 1 takes the old message, then sees rank 0 moved on.
  EXPECT_EQ((*one.Recv(0, soon)).Take(), MessageFloats{1.0f});
  const auto moved = one.Recv(0, soon);
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(moved.status().message(), HasSubstr("rank 0 moved on to round 1"));
  EXPECT_EQ(one.NewestTag(), 1u);
  one.SetTag(1);
  EXPECT_EQ((*one.Recv(0, soon)).Take(), MessageFloats{2.0f});  // past the notice
  // In round 2, rank 1 drops whatever round 1 still held.
  ASSERT_TRUE(zero.Send(1, std::vector<float>{3.0f}).ok());
  one.SetTag(2);
  EXPECT_EQ(one.Recv(0, absl::Now() + absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// A sender that replaced its stream: what the old one still delivers
// after the new one opened is dropped, and the old one's end does not
// break the link.
TEST(PeerLinksTest, WhatAReplacedStreamStillCarriesIsDropped) {
  Mailbox mailbox(2);
  const uint64_t old_stream = mailbox.Open(0, 1);
  const uint64_t new_stream = mailbox.Open(0, 1);
  mailbox.Put(0, 1, old_stream, 0, Message(MessageFloats{1.0f}));
  mailbox.Break(0, 1, old_stream, absl::UnavailableError("the old stream ended"));
  mailbox.Put(0, 1, new_stream, 0, Message(MessageFloats{2.0f}));
  auto taken = mailbox.Take(0, 1, 0, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(std::move(*taken).Take(), MessageFloats{2.0f});
}

// A rank that never takes part fails the others within the timeout, naming
// the silent peer, instead of hanging.
TEST(AllReduceFailureTest, ASilentRankFailsTheOthersNamingIt) {
  for (const char* algorithm : {"ring", "doubling"}) {
    constexpr int n = 3;
    Mailbox mailbox(n);
    AllReduceOptions options;
    options.timeout = absl::Milliseconds(200);
    std::vector<absl::Status> results(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {  // rank 2 never comes
      threads.emplace_back([&, r] {
        InProcessLinks links(&mailbox, r);
        std::vector<float> buffer(30, 1.0f);
        results[r] = Find(algorithm)(links, absl::MakeSpan(buffer), options);
      });
    }
    for (std::thread& t : threads) t.join();
    // Rank 0 waits on the silent rank 2 (its ring neighbour, its doubling
    // partner); rank 1 waits on rank 0, which gives up.
    EXPECT_EQ(results[0].code(), absl::StatusCode::kDeadlineExceeded) << algorithm;
    EXPECT_THAT(results[0].message(), HasSubstr("nothing from rank 2")) << algorithm;
    EXPECT_EQ(results[1].code(), absl::StatusCode::kDeadlineExceeded) << algorithm;
  }
}

}  // namespace
}  // namespace fulcrum
