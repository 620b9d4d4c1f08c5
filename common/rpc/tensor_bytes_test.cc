#include "common/rpc/tensor_bytes.h"

#include <gmock/gmock.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/slices.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {
namespace {

// A pull with one slice of `bytes` tensor bytes, held.
std::shared_ptr<OutgoingPull> Response(size_t bytes) {
  auto pull = std::make_shared<OutgoingPull>();
  PullResponse* response = &pull->response;
  ShardSlice* slice = response->add_slices();
  slice->set_variable("w");
  slice->set_version(3);
  TensorProto* tensor = slice->mutable_tensor();
  tensor->set_dtype(DT_FLOAT);
  tensor->add_shape(static_cast<int64_t>(bytes / 4));
  for (size_t i = 0; i < bytes; ++i) tensor->mutable_data()->push_back(static_cast<char>(i * 7));
  response->add_push_results()->set_variable("w");
  return pull;
}

// gRPC's serialisation of `message`, and the bytes it holds.
grpc::ByteBuffer Serialize(const PullResponse& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  EXPECT_TRUE(grpc::SerializationTraits<PullResponse>::Serialize(message, &buffer, &own).ok());
  EXPECT_TRUE(own);
  return buffer;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

TEST(LendTensorBytesTest, LentBytesAreTheMessageAndHoldItsOwner) {
  std::shared_ptr<OutgoingPull> message = Response(1 << 20);
  const std::string expected = message->response.SerializeAsString();
  grpc::ByteBuffer buffer;
  {
    LendTensorBytes lend(message);
    buffer = Serialize(message->response);
  }
  // The buffer refers to the message's bytes (no copy), so it holds the
  // message, which outlives the writer's own reference.
  EXPECT_GT(message.use_count(), 1);
  const std::weak_ptr<OutgoingPull> weak = message;
  const char* data = message->response.slices(0).tensor().data().data();
  message.reset();
  ASSERT_FALSE(weak.expired());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  bool aliased = false;
  for (const grpc::Slice& slice : slices) {
    aliased = aliased || reinterpret_cast<const char*>(slice.begin()) == data;
  }
  EXPECT_TRUE(aliased) << "no slice points at the tensor bytes";
  EXPECT_EQ(Bytes(buffer), expected);
  PullResponse parsed;
  ASSERT_TRUE(grpc::SerializationTraits<PullResponse>::Deserialize(&buffer, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), expected);
  slices.clear();
  EXPECT_TRUE(weak.expired()) << "gRPC's last reference did not release the message";
}

TEST(LendTensorBytesTest, OutsideAScopeAndForSmallFieldsBytesAreCopied) {
  for (size_t bytes : {size_t{16}, kMinLentBytes - 4, size_t{1} << 20}) {
    std::shared_ptr<OutgoingPull> message = Response(bytes);
    grpc::ByteBuffer buffer;
    if (bytes < kMinLentBytes) {
      LendTensorBytes lend(message);
      buffer = Serialize(message->response);
    } else {
      buffer = Serialize(message->response);  // no scope
    }
    EXPECT_EQ(message.use_count(), 1) << bytes << " bytes";
    EXPECT_EQ(Bytes(buffer), message->response.SerializeAsString()) << bytes << " bytes";
  }
}

// The lent bytes may be the last thing in the message.
TEST(LendTensorBytesTest, AMessageEndingInLentBytesRoundTrips) {
  std::shared_ptr<OutgoingPull> message = Response(1 << 20);
  message->response.clear_push_results();
  grpc::ByteBuffer buffer;
  {
    LendTensorBytes lend(message);
    buffer = Serialize(message->response);
  }
  EXPECT_GT(message.use_count(), 1);
  EXPECT_TRUE(Bytes(buffer) == message->response.SerializeAsString());
}

// A pull whose float32 slices lend their bytes from a snapshot: its wire
// bytes are the materialised response's, sent from the snapshot itself,
// which gRPC holds until it lets the buffer go.
TEST(LendTensorBytesTest, SnapshotBytesGoFromWhereTheyLie) {
  auto values = std::make_shared<std::vector<float>>(12 << 10);
  for (size_t i = 0; i < values->size(); ++i) (*values)[i] = 0.5f * static_cast<float>(i);
  auto pull = std::make_shared<OutgoingPull>();
  pull->snapshots.push_back(values);
  ASSERT_TRUE(AppendShardSlices("w", 1, 9, {3 << 10, 4}, *values, DT_FLOAT, 16 << 10,
                                pull->response.mutable_slices(), &pull->lent)
                  .ok());
  pull->response.add_push_results()->set_variable("w");
  pull->response.set_waited_us(1234);
  const std::string expected = OutgoingPull(*pull).Materialize().SerializeAsString();
  grpc::ByteBuffer buffer;
  {
    LendTensorBytes lend(pull);
    buffer = Serialize(pull->response);
  }
  EXPECT_EQ(Bytes(buffer), expected);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  int aliased = 0;
  for (const grpc::Slice& slice : slices) {
    const char* begin = reinterpret_cast<const char*>(slice.begin());
    aliased += begin >= reinterpret_cast<const char*>(values->data()) &&
               begin < reinterpret_cast<const char*>(values->data() + values->size());
  }
  EXPECT_EQ(aliased, 3) << "each 16 KiB slice of the snapshot lent once";
  const std::weak_ptr<std::vector<float>> weak = values;
  values.reset();
  pull.reset();
  EXPECT_FALSE(weak.expired()) << "the buffer no longer holds the snapshot";
  buffer.Clear();
  slices.clear();
  EXPECT_TRUE(weak.expired());
}

// Any message lends as a pull response does, however many slices it holds.
TEST(LendTensorBytesTest, PushPullRequestsWithManySlicesRoundTrip) {
  auto request = std::make_shared<PushPullRequest>();
  request->mutable_push()->set_worker_id(2);
  for (int i = 0; i < 5; ++i) {
    *request->mutable_push()->add_gradients() = Response(10000 + 1000 * i)->response.slices(0);
  }
  request->mutable_pull()->add_shards()->set_variable("w");
  grpc::ByteBuffer buffer = SerializeLending(*request, request);
  EXPECT_EQ(request.use_count(), 1 + 5);  // one reference per lent field
  EXPECT_EQ(Bytes(buffer), request->SerializeAsString());
}

// A push of float32 gradients that lends them from where they lie (and,
// with `held`, one bfloat16 slice that holds its bytes), and its pull.
std::shared_ptr<OutgoingPush> LentPush(const std::vector<float>& values, bool held) {
  auto push = std::make_shared<OutgoingPush>();
  push->request.set_worker_id(1);
  push->request.set_clock(9);
  push->request.set_push_id(77);
  EXPECT_TRUE(AppendShardSlices("w", 0, 5, {static_cast<int64_t>(values.size()) / 8, 8}, values,
                                DT_FLOAT, 16 << 10, push->request.mutable_gradients(), &push->lent)
                  .ok());
  if (held) {
    EXPECT_TRUE(AppendShardSlices("b", 0, 5, {8}, absl::MakeConstSpan(values).subspan(0, 8),
                                  DT_BFLOAT16, 16 << 10, push->request.mutable_gradients(),
                                  &push->lent)
                    .ok());
  }
  return push;
}

// The wire bytes of a lent push are those of the push with its bytes in
// place, and gRPC's slices point at the caller's floats: no copy.
TEST(SerializePushTest, LentBytesGoFromWhereTheyLie) {
  std::vector<float> values(size_t{3} * 4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
  for (bool held : {false, true}) {
    SCOPED_TRACE(held ? "with a held slice" : "all lent");
    std::shared_ptr<OutgoingPush> push = LentPush(values, held);
    ASSERT_GT(push->request.gradients_size(), 1);
    EXPECT_TRUE(push->request.gradients(0).tensor().data().empty());
    const PushRequest whole = push->Materialize();

    grpc::ByteBuffer buffer = SerializePush(*push, false, nullptr, push);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    int aliased = 0;
    for (const grpc::Slice& slice : slices) {
      const char* begin = reinterpret_cast<const char*>(slice.begin());
      aliased += begin >= reinterpret_cast<const char*>(values.data()) &&
                 begin < reinterpret_cast<const char*>(values.data() + values.size());
    }
    EXPECT_EQ(aliased, 3) << "each 16 KiB slice of the gradient lent once";
    PushRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(Bytes(buffer)));
    EXPECT_EQ(parsed.SerializeAsString(), whole.SerializeAsString());
    EXPECT_GT(push.use_count(), 1);  // gRPC's slices hold the owner
    slices.clear();
    buffer.Clear();
    EXPECT_EQ(push.use_count(), 1);

    PullRequest pull;
    pull.add_shards()->set_variable("w");
    PushPullRequest expected;
    *expected.mutable_push() = whole;
    *expected.mutable_pull() = pull;
    PushPullRequest both;
    ASSERT_TRUE(both.ParseFromString(Bytes(SerializePush(*push, true, &pull, push))));
    EXPECT_EQ(both.SerializeAsString(), expected.SerializeAsString());
    expected.clear_pull();
    ASSERT_TRUE(both.ParseFromString(Bytes(SerializePush(*push, true, nullptr, push))));
    EXPECT_EQ(both.SerializeAsString(), expected.SerializeAsString());
  }
}

// Places DT_FLOAT data of variable "w" into `values`; everything else is left
// in the message. Records what it was asked.
class TestPlacer final : public SlicePlacer {
 public:
  explicit TestPlacer(size_t floats) : values(floats, -1.0f) {}
  float* Place(const ShardSlice& slice, size_t bytes) override {
    asked.push_back(slice.variable() + "@" + std::to_string(slice.row_offset()));
    if (slice.variable() != "w" || bytes > values.size() * sizeof(float)) return nullptr;
    return values.data();
  }
  std::vector<float> values;
  std::vector<std::string> asked;
};

// `bytes` as gRPC would hand them over: in several slices of uneven size.
grpc::ByteBuffer Buffer(const std::string& bytes) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0, size = 1; at < bytes.size(); at += size, size = size * 3 + 5) {
    slices.emplace_back(bytes.data() + at, std::min(size, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status Parse(const std::string& bytes, SlicePlacer* placer, PullResponse* response) {
  grpc::ByteBuffer buffer = Buffer(bytes);
  return ParsePullResponse(&buffer, placer, response);
}

// A float32 slice of `floats` values 0.5, 1.5, ..., of variable `name`.
ShardSlice FloatSlice(const std::string& name, int64_t row_offset, int floats) {
  ShardSlice slice;
  slice.set_variable(name);
  slice.set_shard(1);
  slice.set_row_offset(row_offset);
  slice.set_version(9);
  slice.mutable_tensor()->set_dtype(DT_FLOAT);
  slice.mutable_tensor()->add_shape(floats);
  std::vector<float> values(floats);
  for (int i = 0; i < floats; ++i) values[i] = i + 0.5f;
  slice.mutable_tensor()->set_data(values.data(), floats * sizeof(float));
  return slice;
}

PullResponse Mixed() {
  PullResponse response;
  *response.add_slices() = FloatSlice("w", 3, 3000);
  *response.add_slices() = FloatSlice("b", 0, 10);
  ShardSlice* half = response.add_slices();
  *half = FloatSlice("w", 0, 8);
  half->mutable_tensor()->set_dtype(DT_BFLOAT16);  // not float32: never placed
  half->mutable_tensor()->mutable_data()->resize(16);
  response.add_push_results()->set_variable("w");
  response.mutable_push_results(0)->set_version(4);
  response.set_waited_us(31'000);
  return response;
}

TEST(ParsePullResponseTest, PlacedFloatDataSkipsTheMessage) {
  const PullResponse sent = Mixed();
  TestPlacer placer(3000);
  PullResponse received;
  ASSERT_TRUE(Parse(sent.SerializeAsString(), &placer, &received).ok());
  // Asked only for float32 data: w and b, not the bfloat16 slice.
  EXPECT_EQ(placer.asked, (std::vector<std::string>{"w@3", "b@0"}));
  // The bytes as they were sent (compared as bytes: they are the wire's).
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(placer.values.data()), 3000 * sizeof(float)),
            sent.slices(0).tensor().data());
  // The placed slice came without data, the rest as protobuf parses it.
  PullResponse expected = sent;
  expected.mutable_slices(0)->mutable_tensor()->clear_data();
  EXPECT_TRUE(received.SerializeAsString() == expected.SerializeAsString());
}

TEST(ParsePullResponseTest, WithoutPlacingItParsesAsProtobufDoes) {
  const PullResponse sent = Mixed();
  std::string bytes = sent.SerializeAsString();
  bytes += std::string("\x98\x06\x07", 3);  // an unknown varint field 99, skipped
  TestPlacer refuses(0);                    // places nothing
  PullResponse received;
  ASSERT_TRUE(Parse(bytes, &refuses, &received).ok());
  PullResponse by_protobuf;
  ASSERT_TRUE(by_protobuf.ParseFromString(bytes));
  by_protobuf.DiscardUnknownFields();  // which the placing parser skips
  EXPECT_TRUE(received.SerializeAsString() == by_protobuf.SerializeAsString());
  EXPECT_TRUE(received.SerializeAsString() == sent.SerializeAsString());
}

// Protobuf writes a slice's data last; a field after placed data could
// change where the data belonged, so such a message is refused.
TEST(ParsePullResponseTest, AFieldAfterPlacedDataFailsTheParse) {
  ShardSlice slice = FloatSlice("w", 0, 100);
  slice.clear_row_offset();
  std::string slice_bytes = slice.SerializeAsString() + std::string("\x18\x05", 2);  // row 5
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
        1, google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint32(static_cast<uint32_t>(slice_bytes.size()));
    out.WriteString(slice_bytes);
  }
  TestPlacer placer(100);
  PullResponse received;
  const absl::Status refused = Parse(bytes, &placer, &received);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("malformed pull response"));
  // Unplaced, the same bytes are a valid message: row 5 wins.
  TestPlacer refuses(0);
  ASSERT_TRUE(Parse(bytes, &refuses, &received).ok());
  EXPECT_EQ(received.slices(0).row_offset(), 5);
}

// A newer server's fields, which protobuf writes after the data, do not
// stop placement.
TEST(ParsePullResponseTest, UnknownFieldsAfterPlacedDataAreSkipped) {
  PullResponse sent;
  *sent.add_slices() = FloatSlice("w", 0, 100);
  TensorProto* tensor = sent.mutable_slices(0)->mutable_tensor();
  tensor->GetReflection()->MutableUnknownFields(tensor)->AddVarint(7, 1);
  ShardSlice* slice = sent.mutable_slices(0);
  slice->GetReflection()->MutableUnknownFields(slice)->AddVarint(6, 1);
  TestPlacer placer(100);
  PullResponse received;
  ASSERT_TRUE(Parse(sent.SerializeAsString(), &placer, &received).ok());
  EXPECT_TRUE(received.slices(0).tensor().data().empty());  // placed
  EXPECT_EQ(placer.values[99], 99.5f);
  EXPECT_FALSE(Parse("\x0a\x05\x0a", &placer, &received).ok());  // truncated
}

TEST(ParsePullResponseTest, TruncatedMessagesFailWithoutReadingPastTheEnd) {
  const std::string bytes = Mixed().SerializeAsString();
  TestPlacer placer(3000);
  for (size_t cut : {size_t{1}, size_t{5}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    PullResponse received;
    EXPECT_FALSE(Parse(bytes.substr(0, cut), &placer, &received).ok()) << "cut at " << cut;
  }
}

// `bytes` with `flips` bytes changed at random.
std::string Corrupted(std::string bytes, int flips, std::mt19937& random) {
  for (; flips > 0; --flips) bytes[random() % bytes.size()] = static_cast<char>(random());
  return bytes;
}

// Corrupted bytes from a broken or hostile server fail or parse, but never
// read or write out of bounds (run under ASan to see that).
TEST(ParsePullResponseTest, CorruptedMessagesNeverOverrun) {
  const std::string bytes = Mixed().SerializeAsString();
  std::mt19937 random(7);
  int parsed = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    TestPlacer placer(3000);
    PullResponse received;
    parsed += Parse(Corrupted(bytes, 1 + trial % 4, random), &placer, &received).ok();
  }
  EXPECT_GT(parsed, 0);  // flips inside tensor data still parse
}

// A push-pull as a worker sends it: a header, two float32 gradient slices,
// a bfloat16 one, and a pull.
PushPullRequest MixedPushPull() {
  PushPullRequest message;
  PushRequest* push = message.mutable_push();
  push->set_worker_id(2);
  push->set_clock(5);
  push->set_incarnation(7);
  push->set_push_id(11);
  *push->add_gradients() = FloatSlice("w", 3, 3000);
  *push->add_gradients() = FloatSlice("b", 0, 10);
  ShardSlice* half = push->add_gradients();
  *half = FloatSlice("h", 0, 8);
  half->mutable_tensor()->set_dtype(DT_BFLOAT16);  // not float32: held
  half->mutable_tensor()->mutable_data()->resize(16);
  message.mutable_pull()->set_worker_id(2);
  message.mutable_pull()->add_shards()->set_variable("w");
  return message;
}

// `bytes` cut at random into slices of `min_size` to min_size + 36 bytes.
std::vector<grpc::Slice> RandomCuts(const std::string& bytes, size_t min_size, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<grpc::Slice> slices;
  for (size_t at = 0, size = 0; at < bytes.size(); at += size) {
    size = std::min<size_t>(min_size + random() % 37, bytes.size() - at);
    slices.emplace_back(bytes.data() + at, size);
  }
  return slices;
}

// The bytes of received data, joined.
std::string Joined(const ReceivedSlice& received) {
  std::string bytes;
  for (const FloatBytes piece : received.pieces) bytes.append(piece.data(), piece.size());
  return bytes;
}

TEST(ParseReceivedPushTest, FloatDataStaysInTheBuffersInPiecesOfWholeValues) {
  const PushPullRequest sent = MixedPushPull();
  for (unsigned seed = 1; seed <= 20; ++seed) {
    // Slices of a few bytes split values over three or four of them; from
    // 24 bytes on, gRPC's slices are references to memory, not inlined
    // copies, so the test can see where pieces point.
    const size_t min_size = seed <= 10 ? 1 : 24;
    std::vector<grpc::Slice> slices = RandomCuts(sent.SerializeAsString(), min_size, seed);
    grpc::ByteBuffer buffer(slices.data(), slices.size());
    PushPullRequest parsed;
    ReceivedBytes received;
    ASSERT_TRUE(ParseReceivedPush(&buffer, &parsed, &received).ok());
    // The message as protobuf parses it, less the float32 data.
    PushPullRequest expected = sent;
    expected.mutable_push()->mutable_gradients(0)->mutable_tensor()->clear_data();
    expected.mutable_push()->mutable_gradients(1)->mutable_tensor()->clear_data();
    EXPECT_TRUE(parsed.SerializeAsString() == expected.SerializeAsString()) << seed;
    EXPECT_TRUE(parsed.push().has_worker_id() && parsed.push().has_clock());
    ASSERT_EQ(received.size(), 3u);
    EXPECT_EQ(received[2].owner, nullptr) << "the bfloat16 slice holds its data";
    for (int i = 0; i < 2; ++i) {
      const std::string& data = sent.push().gradients(i).tensor().data();
      ASSERT_NE(received[i].owner, nullptr);
      EXPECT_EQ(received[i].bytes, static_cast<int64_t>(data.size()));
      EXPECT_TRUE(Joined(received[i]) == data) << seed;
      for (const FloatBytes piece : received[i].pieces) {
        EXPECT_EQ(piece.size() % sizeof(float), 0u);
        // A piece of one value may be one split between slices.
        if (min_size < 24 || piece.size() == sizeof(float)) continue;
        // Longer pieces are read where they lie: inside one of the slices.
        EXPECT_TRUE(std::any_of(slices.begin(), slices.end(),
                                [&](const grpc::Slice& slice) {
                                  const char* begin = reinterpret_cast<const char*>(slice.begin());
                                  return piece.data() >= begin &&
                                         piece.data() + piece.size() <= begin + slice.size();
                                }))
            << "a piece of " << piece.size() << " bytes was copied";
      }
    }
    // The owner alone keeps the bytes (ASan would see a read of freed ones).
    slices.clear();
    buffer.Clear();
    EXPECT_TRUE(Joined(received[0]) == sent.push().gradients(0).tensor().data());
  }
}

TEST(ParseReceivedPushTest, PushRequestsParseToo) {
  const PushRequest sent = MixedPushPull().push();
  grpc::ByteBuffer buffer = Buffer(sent.SerializeAsString());
  PushRequest parsed;
  ReceivedBytes received;
  ASSERT_TRUE(ParseReceivedPush(&buffer, &parsed, &received).ok());
  EXPECT_EQ(parsed.push_id(), 11u);
  EXPECT_EQ(parsed.gradients_size(), 3);
  EXPECT_TRUE(parsed.gradients(0).tensor().data().empty());
  EXPECT_TRUE(Joined(received[0]) == sent.gradients(0).tensor().data());
  // Without float32 data nothing stays in the buffer.
  PushRequest header;
  header.set_worker_id(1);
  buffer = Buffer(header.SerializeAsString());
  ASSERT_TRUE(ParseReceivedPush(&buffer, &parsed, &received).ok());
  EXPECT_TRUE(received.empty());
  EXPECT_EQ(parsed.worker_id(), 1);
}

// Truncated or corrupted pushes from a broken or hostile worker fail or
// parse, but never read out of bounds (run under ASan to see that), and
// what they leave in the buffers is never more than they say.
TEST(ParseReceivedPushTest, CorruptedPushesFailOrParseWithinTheirBytes) {
  const std::string bytes = MixedPushPull().SerializeAsString();
  for (size_t cut : {size_t{1}, size_t{9}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    grpc::ByteBuffer buffer = Buffer(bytes.substr(0, cut));
    PushPullRequest parsed;
    ReceivedBytes received;
    const absl::Status status = ParseReceivedPush(&buffer, &parsed, &received);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << "cut at " << cut;
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("malformed push"));
    EXPECT_TRUE(received.empty());
  }
  std::mt19937 random(7);
  int parsed_count = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    grpc::ByteBuffer buffer = Buffer(Corrupted(bytes, 1 + trial % 4, random));
    PushPullRequest parsed;
    ReceivedBytes received;
    if (!ParseReceivedPush(&buffer, &parsed, &received).ok()) continue;
    ++parsed_count;
    for (const ReceivedSlice& slice : received) {
      EXPECT_LE(static_cast<int64_t>(Joined(slice).size()), slice.bytes);
      EXPECT_GT(static_cast<int64_t>(Joined(slice).size()), slice.bytes - 4);
    }
  }
  EXPECT_GT(parsed_count, 0);  // flips inside tensor data still parse
}

// What fuzz/ found (fuzz/regressions/): bytes protobuf rejects were
// accepted -- a field longer than the message around it, a tag varint of
// more than 5 bytes, a variable name that is not UTF-8 -- and a push
// protobuf accepts was refused, for an unknown field after the data that
// reused the tensor's field number; and later, a response whose unknown
// field had a 9-byte length. Both parsers now agree on each.
TEST(ParseReceivedPushTest, AgreesWithProtobufOnWhatTheFuzzerFound) {
  const std::string slice = FloatSlice("w", 0, 2).SerializeAsString();
  const std::map<std::string, std::string> slices = {
      {"a field past its message", "\x0a\x01w\x2a\x04"},  // a tensor of 4 bytes, none there
      {"a 9-byte tag", slice + "\xe0\xfd\xd5\xef\xf7\xfc\xed\xfc\x02\x02"},
      {"a name not UTF-8", "\x0a\x01\x9a" + slice.substr(3)},
      {"an unknown field after the data", slice + "\x28\x01"},
      // Unknown fields' lengths and groups, as protobuf skips them (not as
      // WireFormatLite::SkipField, which cut a 9-byte length to 32 bits).
      {"a 9-byte length of an unknown field", slice + "\x7a\x80\x80\x80\x80\x80\x80\x80\x80\x10"},
      {"an unknown group", slice + "\x7b\x08\x01\x7c"},
      {"a 9-byte length in an unknown group",
       slice + "\x7b\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x10\x7c"},
      {"the end of a group never begun", slice + "\x7c"},
  };
  const std::set<std::string> accepted = {"an unknown field after the data", "an unknown group"};
  // `bytes` as field `number` of a message.
  const auto field = [](int number, const std::string& bytes) {
    return std::string(1, static_cast<char>(number << 3 | 2)) + static_cast<char>(bytes.size()) +
           bytes;
  };
  for (const auto& [what, bytes] : slices) {
    const std::string push = field(PushRequest::kGradientsFieldNumber, bytes);
    grpc::ByteBuffer buffer = Buffer(push);
    PushRequest parsed;
    ReceivedBytes received;
    EXPECT_EQ(ParseReceivedPush(&buffer, &parsed, &received).ok(),
              PushRequest().ParseFromString(push))
        << what;
    EXPECT_EQ(PushRequest().ParseFromString(push), accepted.count(what) > 0) << what;
    const std::string pull = field(PullResponse::kSlicesFieldNumber, bytes);
    PullResponse response;
    TestPlacer placer(2);
    EXPECT_EQ(Parse(pull, &placer, &response).ok(), PullResponse().ParseFromString(pull)) << what;
  }
}

// Inside a ReceiveTensorBytes scope, gRPC's parser leaves pushes' data in
// place and says why a message failed; outside, it is protobuf's.
TEST(ReceiveTensorBytesTest, ReadsInTheScopeLeaveDataInPlace) {
  const PushPullRequest sent = MixedPushPull();
  grpc::ByteBuffer buffer = Buffer(sent.SerializeAsString());
  PushPullRequest parsed;
  ASSERT_TRUE(grpc::SerializationTraits<PushPullRequest>::Deserialize(&buffer, &parsed).ok());
  EXPECT_TRUE(parsed.SerializeAsString() == sent.SerializeAsString());
  ReceiveTensorBytes scope;
  buffer = Buffer(sent.SerializeAsString());
  ASSERT_TRUE(grpc::SerializationTraits<PushPullRequest>::Deserialize(&buffer, &parsed).ok());
  EXPECT_TRUE(parsed.push().gradients(0).tensor().data().empty());
  const ReceivedBytes received = scope.Take();
  ASSERT_EQ(received.size(), 3u);
  EXPECT_TRUE(Joined(received[0]) == sent.push().gradients(0).tensor().data());
  EXPECT_TRUE(scope.Take().empty()) << "taken once";
  EXPECT_TRUE(scope.error().ok());
  buffer = Buffer("\x0a\x05\x12");  // truncated
  PushRequest push;
  EXPECT_FALSE(grpc::SerializationTraits<PushRequest>::Deserialize(&buffer, &push).ok());
  EXPECT_EQ(scope.error().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace fulcrum
