// Fuzz target: the wire parsers that read tensors from gRPC's buffers
// without protobuf -- the same bytes as a pull response a worker receives
// (ParsePullResponse, its float data placed into memory of the placer's
// for every other slice, as workers place pulled shards into their
// variables) and as a push a server receives (ParseReceivedPush, as a
// PushRequest and as a PushPullRequest, gradient data left in gRPC's
// buffers). Whatever they accept, protobuf must parse to the same message,
// with each tensor's data where the parser says it lies.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/rpc/tensor_bytes.h"
#include "common/slices.h"
#include "fuzz/fuzz_input.h"
#include "proto/ps_service.pb.h"

namespace fulcrum::fuzz {
namespace {

// Bigger slices are left in the message: a placer's memory is the
// variable's, which the worker knows the size of.
constexpr size_t kMaxPlacedBytes = 1 << 20;

class Placer : public SlicePlacer {
 public:
  float* Place(const ShardSlice& slice, size_t bytes) override {
    Check(slice.tensor().dtype() == DT_FLOAT, "only float32 data is placed");
    if (bytes > kMaxPlacedBytes || ++asked % 2 == 0) return nullptr;
    placed.push_back(std::make_unique<float[]>(bytes / sizeof(float) + 1));
    return placed.back().get();
  }
  int asked = 0;
  std::vector<std::unique_ptr<float[]>> placed;
};

// The bytes as a pull response.
void AsPullResponse(const uint8_t* data, size_t size) {
  grpc::ByteBuffer buffer =
      AsReceived(absl::string_view(reinterpret_cast<const char*>(data), size));
  Placer placer;
  PullResponse response;
  if (!ParsePullResponse(&buffer, &placer, &response).ok()) return;
  // What it parsed, protobuf parses too, the same but for placed data.
  PullResponse parsed;
  Check(parsed.ParseFromArray(data, static_cast<int>(size)),
        "a response protobuf rejects was parsed");
  Check(parsed.slices_size() == response.slices_size(), "slices lost or made up");
  size_t emptied = 0;
  for (int i = 0; i < parsed.slices_size(); ++i) {
    const std::string& sent = parsed.slices(i).tensor().data();
    const std::string& got = response.slices(i).tensor().data();
    Check(got == sent || got.empty(), "a slice's data changed");
    emptied += got.size() != sent.size();
  }
  Check(emptied <= placer.placed.size(), "a slice lost data without being placed");
}

// `gradients` parsed from bytes whose protobuf parse is `parsed`, leaving
// `received`: the same, the data aside.
void CheckSame(const google::protobuf::RepeatedPtrField<ShardSlice>& gradients,
               const google::protobuf::RepeatedPtrField<ShardSlice>& parsed,
               const ReceivedBytes& received) {
  Check(gradients.size() == parsed.size(), "gradients lost or made up");
  Check(received.empty() || received.size() == static_cast<size_t>(gradients.size()),
        "received bytes for a different number of gradients");
  for (int i = 0; i < gradients.size(); ++i) {
    const std::string& sent = parsed.Get(i).tensor().data();
    if (received.empty() || received[i].owner == nullptr) {
      Check(gradients.Get(i).tensor().data() == sent, "a gradient's data changed");
      continue;
    }
    Check(gradients.Get(i).tensor().data().empty(), "received data also in the message");
    Check(received[i].bytes == static_cast<int64_t>(sent.size()), "received data's size");
    std::string joined;
    for (const FloatBytes& piece : received[i].pieces) {
      Check(piece.size() % sizeof(float) == 0, "a piece of part of a value");
      joined.append(piece.data(), piece.size());
    }
    Check(joined == sent.substr(0, sent.size() / sizeof(float) * sizeof(float)),
          "received data differs from what was sent");
  }
}

template <typename Message>
Message Parse(absl::string_view bytes, bool* ok, ReceivedBytes* received) {
  grpc::ByteBuffer buffer = AsReceived(bytes);
  Message message;
  *ok = ParseReceivedPush(&buffer, &message, received).ok();
  return message;
}

// The bytes as a push and as a push-pull.
void AsPush(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  bool ok = false;
  ReceivedBytes received;
  const auto push = Parse<PushRequest>(bytes, &ok, &received);
  if (ok) {
    PushRequest parsed;
    Check(parsed.ParseFromString(std::string(bytes)), "a push protobuf rejects was parsed");
    CheckSame(push.gradients(), parsed.gradients(), received);
  }
  received.clear();
  const auto push_pull = Parse<PushPullRequest>(bytes, &ok, &received);
  if (ok) {
    PushPullRequest parsed;
    Check(parsed.ParseFromString(std::string(bytes)), "a push-pull protobuf rejects was parsed");
    CheckSame(push_pull.push().gradients(), parsed.push().gradients(), received);
    Check(push_pull.pull().SerializeAsString() == parsed.pull().SerializeAsString(),
          "the pull of a push-pull changed");
  }
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fulcrum::fuzz::AsPullResponse(data, size);
  fulcrum::fuzz::AsPush(data, size);
  return 0;
}
