// The all-reduce over real gRPC streams between ranks on 127.0.0.1.
#include "worker/collective/grpc_peer_links.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/collective/all_reduce.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// `n` ranks listening on ports they pick, each connected to the others.
std::vector<std::unique_ptr<GrpcPeerLinks>> StartGroup(int n) {
  std::vector<std::unique_ptr<GrpcPeerLinks>> links;
  std::vector<std::string> addresses;
  for (int r = 0; r < n; ++r) {
    auto started = GrpcPeerLinks::Start(r, n, "127.0.0.1:0");
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return {};
    addresses.push_back(absl::StrCat("127.0.0.1:", (*started)->port()));
    links.push_back(*std::move(started));
  }
  for (auto& l : links) l->Connect(addresses);
  return links;
}

TEST(GrpcPeerLinksTest, AllReduceOverStreamsEqualsTheSum) {
  constexpr int n = 3;
  auto links = StartGroup(n);
  ASSERT_EQ(links.size(), size_t{n});
  for (int64_t length : {int64_t{10}, int64_t{100003}}) {  // doubling, then the ring
    std::vector<std::vector<float>> buffers(n);
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < length; ++i) buffers[r].push_back(static_cast<float>(i % 97 + r));
    }
    AllReduceOptions options;
    options.chunk_elements = 4096;
    std::vector<absl::Status> results(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back(
          [&, r] { results[r] = AllReduce(*links[r], absl::MakeSpan(buffers[r]), options); });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r];
      for (int64_t i = 0; i < length; ++i) {
        ASSERT_EQ(buffers[r][i], static_cast<float>(3 * (i % 97) + 3)) << r << " [" << i << "]";
      }
    }
  }
}

// A rank that is gone fails the others' all-reduce within the timeout,
// naming it.
TEST(GrpcPeerLinksTest, AGoneRankFailsTheOthersNamingIt) {
  constexpr int n = 3;
  auto links = StartGroup(n);
  ASSERT_EQ(links.size(), size_t{n});
  links[2].reset();
  AllReduceOptions options;
  options.timeout = absl::Seconds(1);
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> buffer(20000, 1.0f);
      results[r] = AllReduce(*links[r], absl::MakeSpan(buffer), options);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(results[0].ok());
  EXPECT_THAT(results[0].message(), HasSubstr("rank 2"));
  EXPECT_FALSE(results[1].ok());
}

}  // namespace
}  // namespace fulcrum
