#include "common/slices.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::Status AppendShardSlices(const std::string& variable, int shard, int64_t version,
                               absl::Span<const int64_t> shard_shape,
                               absl::Span<const float> values, DataType encoding,
                               int64_t max_slice_bytes, SliceList* out, LentBytes* lent) {
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
      lent->push_back(AsFloatBytes(part));
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

absl::Span<const char> SliceData(const SliceList& slices, const LentBytes& lent, int i) {
  if (!lent.empty() && !lent[i].empty()) return lent[i];
  const std::string& data = slices[i].tensor().data();
  return absl::MakeConstSpan(data.data(), data.size());
}

int64_t TensorBytes(const SliceList& slices, const LentBytes& lent) {
  int64_t bytes = 0;
  for (int i = 0; i < slices.size(); ++i) bytes += SliceData(slices, lent, i).size();
  return bytes;
}

int64_t TensorBytes(const SliceList& slices, const ReceivedBytes& received) {
  int64_t bytes = 0;
  for (int i = 0; i < slices.size(); ++i) {
    const bool elsewhere = !received.empty() && received[i].owner != nullptr;
    bytes += elsewhere ? received[i].bytes : static_cast<int64_t>(slices[i].tensor().data().size());
  }
  return bytes;
}

void MaterializeSlices(const LentBytes& lent, SliceList* slices) {
  for (size_t i = 0; i < lent.size(); ++i) {
    if (!lent[i].empty()) {
      slices->Mutable(i)->mutable_tensor()->set_data(lent[i].data(), lent[i].size());
    }
  }
}

std::vector<SliceRange> BatchSlices(const SliceList& slices, int64_t max_batch_bytes,
                                    const LentBytes& lent) {
  std::vector<SliceRange> batches = {{0, 0}};
  int64_t bytes = 0;
  for (int i = 0; i < slices.size(); ++i) {
    const int64_t size = static_cast<int64_t>(SliceData(slices, lent, i).size());
    if (batches.back().end > batches.back().begin && bytes + size > max_batch_bytes) {
      batches.push_back({i, i});
      bytes = 0;
    }
    bytes += size;
    batches.back().end = i + 1;
  }
  return batches;
}

PushRequest OutgoingPush::Materialize() const {
  PushRequest copy = request;
  MaterializeSlices(lent, copy.mutable_gradients());
  return copy;
}

PullResponse OutgoingPull::Materialize() && {
  MaterializeSlices(lent, response.mutable_slices());
  lent.clear();
  snapshots.clear();
  return std::move(response);
}

void AppendPullResponse(PullResponse& part, PullResponse* whole) {
  for (ShardSlice& slice : *part.mutable_slices()) *whole->add_slices() = std::move(slice);
  for (ShardPushResult& result : *part.mutable_push_results()) {
    *whole->add_push_results() = std::move(result);
  }
  whole->set_waited_us(std::max(whole->waited_us(), part.waited_us()));
}

void CopyPushHeader(const PushRequest& from, PushRequest* to) {
  if (from.has_worker_id()) to->set_worker_id(from.worker_id());
  if (from.has_clock()) to->set_clock(from.clock());
  to->set_incarnation(from.incarnation());
  to->set_push_id(from.push_id());
  to->set_placement_epoch(from.placement_epoch());
  to->set_trace(from.trace());
}

bool SamePushHeader(const PushRequest& a, const PushRequest& b) {
  return a.has_worker_id() == b.has_worker_id() && a.worker_id() == b.worker_id() &&
         a.has_clock() == b.has_clock() && a.clock() == b.clock() &&
         a.incarnation() == b.incarnation() && a.push_id() == b.push_id() &&
         a.placement_epoch() == b.placement_epoch() && a.trace() == b.trace();
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
