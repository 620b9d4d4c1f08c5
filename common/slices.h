// Shards on the wire as slices of rows: splitting a shard into slices that
// fit a message, grouping slices into messages and joining them again, and
// pushes of some slices.
// Shared by the server and the client. Pure functions; thread-safe.
#ifndef FULCRUM_COMMON_SLICES_H_
#define FULCRUM_COMMON_SLICES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// Tensor bytes per streamed message: a shard larger than this travels as
// several slices, so no message nears gRPC's limits.
constexpr int64_t kChunkBytes = 4 << 20;

using SliceList = google::protobuf::RepeatedPtrField<ShardSlice>;

// Where the float32 values of pulled slices go: a transport that receives
// a slice of DT_FLOAT data asks, and writes the bytes straight there.
// Implementations are thread-safe: the parts of one pull may be read on
// several threads at once.
class SlicePlacer {
 public:
  virtual ~SlicePlacer() = default;
  // Called for each slice whose data holds `bytes` bytes of DT_FLOAT values,
  // with the slice's other fields (its tensor's dtype and shape too) known.
  // Returns where the bytes go -- room for `bytes` bytes -- or null to leave
  // them in the slice. A placed slice arrives with empty data.
  virtual float* Place(const ShardSlice& slice, size_t bytes) = 0;
};

// Tensor bytes of a SliceList's slices that lie outside them: empty, or one
// entry per slice; a non-empty entry is that slice's DT_FLOAT data, which
// the slice's tensor (its dtype and shape only) does not hold. Whoever
// fills it says what keeps that memory alive and unchanged.
using LentBytes = std::vector<absl::Span<const char>>;

// A received slice's DT_FLOAT data that stays in the buffers it arrived in
// (gRPC's), which `owner` keeps alive and unchanged: `bytes` bytes, as
// pieces of whole float32 values at any address, in order. A value split
// between two buffers is copied into a piece of its own; a last part of a
// value (when `bytes` is not a whole number of them) is in no piece.
struct ReceivedSlice {
  std::vector<FloatBytes> pieces;
  int64_t bytes = 0;
  std::shared_ptr<const void> owner;  // null: the slice holds its data
};

// Tensor bytes of a received message's slices that lie outside them:
// empty, or one entry per slice (see ReceivedSlice).
using ReceivedBytes = std::vector<ReceivedSlice>;

// Checks a shard spec: a valid variable spec, and a shard index and row
// range within it. INVALID_ARGUMENT naming the variable.
absl::Status ValidateShardSpec(const ShardSpec& spec);

// Appends `values` (a shard of `shard_shape`) to `out` in float `encoding`
// (common/tensor.h) as slices of at most max_slice_bytes each, one row at
// the least. Fails only for values that float16 cannot encode. With `lent`,
// an entry per slice is appended to it: with DT_FLOAT, the slices hold no
// data and their bytes are lent where they lie in `values`.
absl::Status AppendShardSlices(const std::string& variable, int shard, int64_t version,
                               absl::Span<const int64_t> shard_shape,
                               absl::Span<const float> values, DataType encoding,
                               int64_t max_slice_bytes, SliceList* out, LentBytes* lent = nullptr);

// Rows in `slice`: its tensor's first dimension, 0 when it has none.
int64_t SliceRows(const ShardSlice& slice);

// The tensor bytes of slice i, held or lent.
absl::Span<const char> SliceData(const SliceList& slices, const LentBytes& lent, int i);

// Tensor bytes the slices carry, held or lent.
int64_t TensorBytes(const SliceList& slices, const LentBytes& lent = {});
// The same for received slices, held or left where they arrived.
int64_t TensorBytes(const SliceList& slices, const ReceivedBytes& received);

// Copies each lent slice's bytes into the slice.
void MaterializeSlices(const LentBytes& lent, SliceList* slices);

// Slices [begin, end) of a SliceList.
struct SliceRange {
  int begin;
  int end;
};

// Groups `slices`, in order, into runs of about max_batch_bytes of tensor
// data, held or lent (a larger slice travels alone), one per stream
// message. At least one run, empty when there are no slices: a message
// carries more than slices.
std::vector<SliceRange> BatchSlices(const SliceList& slices, int64_t max_batch_bytes,
                                    const LentBytes& lent = {});

// Moves `part`'s slices and push results to the end of `whole`'s: one
// response from the parts it came in (stream messages, parallel calls).
void AppendPullResponse(PullResponse& part, PullResponse* whole);

// Copies a push's header (worker, clock, incarnation, push id, trace; with their
// presence) from `from` to `to`.
void CopyPushHeader(const PushRequest& from, PushRequest* to);

// True when two pushes' headers are equal, presence included.
bool SamePushHeader(const PushRequest& a, const PushRequest& b);

// A push on its way out: the request, whose gradient slices hold their
// bytes or lend them (`lent`, of request.gradients()): the caller's own
// gradient, sent from where it lies. That memory must stay unchanged until
// every call that took the push has returned and the push is destroyed.
struct OutgoingPush {
  PushRequest request;
  LentBytes lent;

  // The tensor bytes of gradient slice i, held or lent.
  absl::Span<const char> SliceData(int i) const {
    return fulcrum::SliceData(request.gradients(), lent, i);
  }
  // The tensor bytes of all its slices.
  int64_t TensorBytes() const { return fulcrum::TensorBytes(request.gradients(), lent); }
  // The request with every lent slice's bytes copied in (what a transport
  // that hands the push to a server in this process gives it).
  PushRequest Materialize() const;
};

// A push of some of `whole`'s gradient slices (by index, in the order
// given), with its header and their lent bytes. It borrows the slices
// instead of copying their bytes (protobuf's unsafe-arena idiom) and keeps
// `whole` alive while it lives; neither may change meanwhile.
std::shared_ptr<const OutgoingPush> PushPart(std::shared_ptr<const OutgoingPush> whole,
                                             absl::Span<const int> slices);

// A pull's answer on its way out of a server: the response, whose DT_FLOAT
// slices may lend their bytes (`lent`, of response.slices()) from
// snapshots of the shards, which `snapshots` keeps alive and unchanged.
struct OutgoingPull {
  PullResponse response;
  LentBytes lent;
  std::vector<std::shared_ptr<const void>> snapshots;

  // The response with every lent slice's bytes copied in; the snapshots go.
  PullResponse Materialize() &&;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_SLICES_H_
