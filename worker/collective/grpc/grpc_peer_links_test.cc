// The all-reduce over real gRPC streams between ranks on 127.0.0.1.
#include "worker/collective/grpc/grpc_peer_links.h"

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/collective/all_reduce.h"
#include "worker/collective/grpc/collective_frame.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// `n` ranks listening on ports they pick, each connected to the others;
// rank r with cluster token tokens[r] (none when not given).
std::vector<std::unique_ptr<GrpcPeerLinks>> StartGroup(
    int n, const std::vector<std::string>& tokens = {}) {
  std::vector<std::unique_ptr<GrpcPeerLinks>> links;
  std::vector<std::string> addresses;
  for (int r = 0; r < n; ++r) {
    auto started = GrpcPeerLinks::Start(r, n, "127.0.0.1:0", TlsFiles(),
                                        r < static_cast<int>(tokens.size()) ? tokens[r] : "");
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

// What a rank sent arrives though it closes its links at once (as a worker
// that finished its last step exits while its peer still reads).
TEST(GrpcPeerLinksTest, WhatWasSentArrivesThoughTheSenderCloses) {
  auto links = StartGroup(2);
  ASSERT_EQ(links.size(), size_t{2});
  std::vector<float> big(8 << 20, 0.5f);  // 32 MiB, more than the transport buffers
  big.back() = 2.0f;
  ASSERT_TRUE(links[1]->Send(0, big).ok());
  const float last[] = {7.0f};
  ASSERT_TRUE(links[1]->Send(0, last).ok());
  links[1].reset();
  auto received = links[0]->Recv(1, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(received.ok()) << received.status();
  const MessageFloats floats = std::move(*received).Take();
  EXPECT_EQ(floats.size(), big.size());
  EXPECT_EQ(floats.back(), 2.0f);
  received = links[0]->Recv(1, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(std::move(*received).Take(), MessageFloats{7.0f});
}

// With a cluster token, a rank's streams carry it and a peer takes only
// streams that do: a sender with another token cannot deliver, and its
// link breaks saying which token was wanted.
TEST(GrpcPeerLinksTest, WithATokenOnlyPeersHoldingItDeliver) {
  const std::string token = "a-cluster-token-0123456789";
  auto links = StartGroup(3, {token, token, "not-the-cluster-token-987"});
  ASSERT_EQ(links.size(), size_t{3});
  const float data[] = {1.0f, 2.0f};
  ASSERT_TRUE(links[1]->Send(0, data).ok());
  auto received = links[0]->Recv(1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(std::move(*received).Take(), MessageFloats(data, data + 2));

  // Rank 2's stream (opened by Connect) is refused: what it sends is never
  // read, and once the refusal is back its sends fail. The refusal may be
  // back before the first send, so no send is expected to succeed.
  absl::Status sent = links[2]->Send(0, data);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (sent.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling for the refusal to come back
    sent = links[2]->Send(0, data);
  }
  EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable) << sent;
  EXPECT_THAT(sent.message(), HasSubstr("needs the cluster token"));
  EXPECT_FALSE(links[0]->Recv(2, absl::Now() + absl::Milliseconds(200)).ok());
}

// A rank that restarts on its port: its new streams are reconnections to
// the others, who learn of them (TakeReconnected), reconnect to it, and
// talk to the new process in a later round.
TEST(GrpcPeerLinksTest, ARestartedRankReconnects) {
  auto links = StartGroup(2);
  ASSERT_EQ(links.size(), size_t{2});
  const std::vector<std::string> addresses = {absl::StrCat("127.0.0.1:", links[0]->port()),
                                              absl::StrCat("127.0.0.1:", links[1]->port())};
  const float hello[] = {1.0f, 2.0f};
  ASSERT_TRUE(links[1]->Send(0, hello).ok());
  ASSERT_TRUE(links[0]->Recv(1, absl::Now() + absl::Seconds(10)).ok());
  EXPECT_TRUE(links[0]->TakeReconnected().empty());

  links[1].reset();
  auto restarted = GrpcPeerLinks::Start(1, 2, addresses[1]);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  links[1] = *std::move(restarted);
  links[1]->Connect(addresses);
  links[1]->SetTag(5);
  const float again[] = {3.0f};
  ASSERT_TRUE(links[1]->Send(0, again).ok());

  // Rank 0 sees the new process's message of round 5, and a reconnection.
  auto round = links[0]->AwaitRound(-1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(*round, (std::pair<int, uint64_t>{1, 5}));
  EXPECT_EQ(links[0]->TakeReconnected(), std::vector<int>{1});
  links[0]->SetTag(5);
  auto received = links[0]->Recv(1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(std::move(*received).Take(), MessageFloats{3.0f});

  // Its old stream to rank 1 is gone; a new one reaches the new process.
  ASSERT_TRUE(links[0]->Reconnect(1).ok());
  const float welcome[] = {4.0f, 5.0f, 6.0f};
  ASSERT_TRUE(links[0]->Send(1, welcome).ok());
  received = links[1]->Recv(0, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(std::move(*received).Take(), (MessageFloats{4.0f, 5.0f, 6.0f}));
}

// A rank that reconnects to a live peer (a leader admitting a rank it
// took for a joiner) replaces its stream without the peer ever seeing its
// link broken, and what it sends on the new stream arrives.
TEST(GrpcPeerLinksTest, AReconnectionToALivePeerNeverBreaksItsLink) {
  auto links = StartGroup(2);
  ASSERT_EQ(links.size(), size_t{2});
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(links[0]->Reconnect(1).ok());
    const float message[] = {static_cast<float>(i)};
    ASSERT_TRUE(links[0]->Send(1, message).ok());
    auto received = links[1]->Recv(0, absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(received.ok()) << "reconnection " << i << ": " << received.status();
    EXPECT_EQ(std::move(*received).Take(), MessageFloats{static_cast<float>(i)});
  }
}

// A collective stream opened by hand, as a peer (or an impostor) would.
class RawStream {
 public:
  explicit RawStream(int port, const StreamOrder& order = {})
      : stub_(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials())) {
    if (order.sender != 0) context_.AddMetadata(kStreamOrderMetadataKey, FormatStreamOrder(order));
    call_ = stub_.PrepareCall(&context_, CollectiveStreamMethod(), &cq_);
    call_->StartCall(nullptr);
    EXPECT_TRUE(Await());
  }
  ~RawStream() {
    if (!closed_) Close();
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // Whether the message went out.
  bool Write(const grpc::ByteBuffer& message) {
    call_->Write(message, nullptr);
    return Await();
  }

  // Closes the sending side; how the peer ended the stream.
  grpc::Status Close() {
    closed_ = true;
    call_->WritesDone(nullptr);
    Await();
    grpc::Status status;
    call_->Finish(&status, nullptr);
    EXPECT_TRUE(Await());
    return status;
  }

 private:
  bool Await() {
    void* tag = nullptr;
    bool ok = false;
    return cq_.Next(&tag, &ok) && ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool closed_ = false;
};

// A stream its sender replaced can reach a peer after the replacement (it
// waited for a connection to a restarted peer): it is ended unread, and
// its end does not break the link that replaced it.
TEST(GrpcPeerLinksTest, AReplacedStreamThatComesLateIsEndedUnread) {
  auto started = GrpcPeerLinks::Start(0, 2, "127.0.0.1:0");
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<GrpcPeerLinks> rank0 = *std::move(started);
  constexpr uint64_t kSender = 77;

  RawStream newer(rank0->port(), {kSender, 2});
  ASSERT_TRUE(newer.Write(EncodeFrame(1, 0, {})));
  // Rank 0 holds a stream from every other rank: the newer one is open.
  ASSERT_TRUE(rank0->AwaitRound(0, absl::Now() + absl::Seconds(10)).ok());
  {
    RawStream stale(rank0->port(), {kSender, 1});
    stale.Write(EncodeFrame(1, 0, {9.0f}));
    grpc::Status status = stale.Close();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("a newer stream from rank 1"));
  }
  ASSERT_TRUE(newer.Write(EncodeFrame(1, 0, {3.0f, 4.0f})));
  auto received = rank0->Recv(1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(std::move(*received).Take(), (MessageFloats{3.0f, 4.0f}));
  EXPECT_TRUE(rank0->TakeReconnected().empty());
}

// Messages that are not the collective's (too short, a rank out of range,
// another rank than the stream's) end that stream with INVALID_ARGUMENT;
// the rank serves its peers as before.
TEST(GrpcPeerLinksTest, MalformedMessagesAreRefusedAndTheRankGoesOn) {
  auto links = StartGroup(2);
  ASSERT_EQ(links.size(), size_t{2});
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", links[0]->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto header = [](int32_t rank) {
    std::string bytes(16, '\0');
    std::memcpy(bytes.data(), &rank, 4);
    return bytes;
  };
  const std::vector<std::vector<std::string>> hostile = {
      {"abc"},                                // shorter than a header
      {header(7)},                            // not a rank of 2
      {header(1) + "xy"},                     // not whole floats
      {header(1), header(0)},                 // a second rank on one stream
      {header(-1) + std::string(4096, 'z')},  // a negative rank
  };
  for (const auto& messages : hostile) {
    RawStream stream(links[0]->port());
    for (const std::string& bytes : messages) {
      grpc::Slice slice(bytes);
      stream.Write(grpc::ByteBuffer(&slice, 1));
    }
    grpc::Status status = stream.Close();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  }
  const float data[] = {1.0f, 2.0f};
  ASSERT_TRUE(links[1]->Send(0, data).ok());
  auto received = links[0]->Recv(1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(std::move(*received).Take(), (MessageFloats{1.0f, 2.0f}));
}

}  // namespace
}  // namespace fulcrum
