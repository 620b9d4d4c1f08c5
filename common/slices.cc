#include "common/slices.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::Status AppendShardSlices(const std::string& variable, int shard, int64_t version,
                               absl::Span<const int64_t> shard_shape,
                               absl::Span<const float> values, DataType encoding,
                               int64_t max_slice_bytes, SliceList* out,
                               std::vector<absl::Span<const char>>* lent) {
  const int64_t rows_total = shard_shape.empty() ? 1 : shard_shape[0];
  const int64_t row_elems = RowElements(shard_shape);
  const int64_t rows_per_slice =
      std::max<int64_t>(1, max_slice_bytes / (row_elems * EncodedFloatBytes(encoding)));
  for (int64_t row = 0; row < rows_total; row += rows_per_slice) {
    const int64_t rows = std::min(rows_per_slice, rows_total - row);
    ShardSlice* slice = out->Add();
    slice->set_variable(variable);
    slice->set_shard(shard);
    slice->set_row_offset(row);
    slice->set_version(version);
    Shape slice_shape(shard_shape.begin(), shard_shape.end());
    slice_shape[0] = rows;
    const absl::Span<const float> part = values.subspan(row * row_elems, rows * row_elems);
    if (lent != nullptr && encoding == DT_FLOAT) {
      slice->mutable_tensor()->set_dtype(DT_FLOAT);
      slice->mutable_tensor()->mutable_shape()->Assign(slice_shape.begin(), slice_shape.end());
      lent->emplace_back(reinterpret_cast<const char*>(part.data()), part.size() * sizeof(float));
      continue;
    }
    if (lent != nullptr) lent->emplace_back();
    if (absl::Status s = EncodeFloatTensor(
            slice_shape, part, encoding,
            absl::StrCat("variable '", variable, "' shard ", shard, " rows from ", row),
            slice->mutable_tensor());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateShardSpec(const ShardSpec& spec) {
  if (absl::Status s = ValidateVariableSpec(spec.variable()); !s.ok()) return s;
  const int64_t rows = spec.variable().shape(0);
  // Written so that nothing overflows: row_offset <= rows is checked first.
  if (spec.num_shards() < 1 || spec.num_shards() > rows || spec.shard() < 0 ||
      spec.shard() >= spec.num_shards() || spec.rows() < 1 || spec.row_offset() < 0 ||
      spec.row_offset() > rows || spec.rows() > rows - spec.row_offset()) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.variable().name(), "': shard ", spec.shard(), " of ",
                     spec.num_shards(), " with ", spec.rows(), " rows from row ", spec.row_offset(),
                     " does not fit shape ", ShapeString(spec.variable().shape())));
  }
  return absl::OkStatus();
}

int64_t SliceRows(const ShardSlice& slice) {
  return slice.tensor().shape_size() > 0 ? slice.tensor().shape(0) : 0;
}

int64_t TensorBytes(const SliceList& slices) {
  int64_t bytes = 0;
  for (const ShardSlice& slice : slices)
    bytes += static_cast<int64_t>(slice.tensor().data().size());
  return bytes;
}

namespace {

// BatchSlices over `n` slices of size(i) bytes each.
template <typename Size>
std::vector<SliceRange> Batch(int n, Size size_of, int64_t max_batch_bytes) {
  std::vector<SliceRange> batches = {{0, 0}};
  int64_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t size = size_of(i);
    if (batches.back().end > batches.back().begin && bytes + size > max_batch_bytes) {
      batches.push_back({i, i});
      bytes = 0;
    }
    bytes += size;
    batches.back().end = i + 1;
  }
  return batches;
}

}  // namespace

std::vector<SliceRange> BatchSlices(const SliceList& slices, int64_t max_batch_bytes) {
  return Batch(
      slices.size(), [&](int i) { return static_cast<int64_t>(slices[i].tensor().data().size()); },
      max_batch_bytes);
}

std::vector<SliceRange> BatchSlices(const OutgoingPush& push, int64_t max_batch_bytes) {
  return Batch(
      push.request.gradients_size(),
      [&](int i) { return static_cast<int64_t>(push.SliceData(i).size()); }, max_batch_bytes);
}

absl::Span<const char> OutgoingPush::SliceData(int i) const {
  if (!lent.empty() && !lent[i].empty()) return lent[i];
  const std::string& data = request.gradients(i).tensor().data();
  return absl::MakeConstSpan(data.data(), data.size());
}

int64_t OutgoingPush::TensorBytes() const {
  int64_t bytes = 0;
  for (int i = 0; i < request.gradients_size(); ++i) bytes += SliceData(i).size();
  return bytes;
}

PushRequest OutgoingPush::Materialize() const {
  PushRequest copy = request;
  for (int i = 0; i < copy.gradients_size(); ++i) {
    if (!lent.empty() && !lent[i].empty()) {
      copy.mutable_gradients(i)->mutable_tensor()->set_data(lent[i].data(), lent[i].size());
    }
  }
  return copy;
}

void AppendPullResponse(PullResponse& part, PullResponse* whole) {
  for (ShardSlice& slice : *part.mutable_slices()) *whole->add_slices() = std::move(slice);
  for (ShardPushResult& result : *part.mutable_push_results()) {
    *whole->add_push_results() = std::move(result);
  }
}

void CopyPushHeader(const PushRequest& from, PushRequest* to) {
  if (from.has_worker_id()) to->set_worker_id(from.worker_id());
  if (from.has_clock()) to->set_clock(from.clock());
  to->set_incarnation(from.incarnation());
  to->set_push_id(from.push_id());
}

bool SamePushHeader(const PushRequest& a, const PushRequest& b) {
  return a.has_worker_id() == b.has_worker_id() && a.worker_id() == b.worker_id() &&
         a.has_clock() == b.has_clock() && a.clock() == b.clock() &&
         a.incarnation() == b.incarnation() && a.push_id() == b.push_id();
}

std::shared_ptr<const OutgoingPush> PushPart(std::shared_ptr<const OutgoingPush> whole,
                                             absl::Span<const int> slices) {
  auto* part = new OutgoingPush;
  CopyPushHeader(whole->request, &part->request);
  for (int i : slices) {
    part->request.mutable_gradients()->UnsafeArenaAddAllocated(
        const_cast<ShardSlice*>(&whole->request.gradients(i)));
    if (!whole->lent.empty()) part->lent.push_back(whole->lent[i]);
  }
  // Gives the borrowed slices back before the part goes, then lets `whole` go.
  return std::shared_ptr<const OutgoingPush>(
      part, [whole = std::move(whole)](const OutgoingPush* done) {
        auto* borrower = const_cast<OutgoingPush*>(done);
        borrower->request.mutable_gradients()->UnsafeArenaExtractSubrange(
            0, borrower->request.gradients_size(), nullptr);
        delete borrower;
      });
}

}  // namespace fulcrum
