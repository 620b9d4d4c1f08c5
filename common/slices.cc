#include "common/slices.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::Status AppendShardSlices(const std::string& variable, int shard, int64_t version,
                               absl::Span<const int64_t> shard_shape,
                               absl::Span<const float> values, DataType encoding,
                               int64_t max_slice_bytes, SliceList* out) {
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
    if (absl::Status s = EncodeFloatTensor(
            slice_shape, values.subspan(row * row_elems, rows * row_elems), encoding,
            absl::StrCat("variable '", variable, "' shard ", shard, " rows from ", row),
            slice->mutable_tensor());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status JoinSlices(SliceList* slices) {
  std::map<std::pair<std::string, int>, std::vector<ShardSlice*>> parts;
  std::vector<std::pair<std::string, int>> order;
  for (ShardSlice& slice : *slices) {
    auto key = std::make_pair(slice.variable(), slice.shard());
    auto& list = parts[key];
    if (list.empty()) order.push_back(key);
    list.push_back(&slice);
  }
  if (order.size() == static_cast<size_t>(slices->size())) {
    // One slice per shard: only check that each starts at row 0.
    for (const ShardSlice& s : *slices) {
      if (s.row_offset() != 0) {
        return absl::InvalidArgumentError(absl::StrCat("variable '", s.variable(), "' shard ",
                                                       s.shard(), ": rows before ",
                                                       s.row_offset(), " are missing"));
      }
    }
    return absl::OkStatus();
  }
  SliceList joined;
  for (const auto& key : order) {
    std::vector<ShardSlice*>& list = parts[key];
    std::sort(list.begin(), list.end(), [](const ShardSlice* a, const ShardSlice* b) {
      return a->row_offset() < b->row_offset();
    });
    const std::string label = absl::StrCat("variable '", key.first, "' shard ", key.second);
    ShardSlice* out = joined.Add();
    *out = std::move(*list[0]);
    Shape shape(out->tensor().shape().begin(), out->tensor().shape().end());
    if (!IsFloatEncoding(out->tensor().dtype()) || shape.empty() || out->row_offset() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": slices must be float tensors that start at row 0"));
    }
    std::string* data = out->mutable_tensor()->mutable_data();
    size_t total = 0;
    for (const ShardSlice* part : list) total += part->tensor().data().size();
    data->reserve(total);
    for (size_t i = 1; i < list.size(); ++i) {
      const ShardSlice& part = *list[i];
      const Shape part_shape(part.tensor().shape().begin(), part.tensor().shape().end());
      if (part.row_offset() != shape[0] || part.version() != out->version() ||
          part_shape.size() != shape.size() ||
          !std::equal(shape.begin() + 1, shape.end(), part_shape.begin() + 1) ||
          part.tensor().dtype() != out->tensor().dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(
            label, ": slice at row ", part.row_offset(), " with shape ", ShapeString(part_shape),
            " does not continue rows [0, ", shape[0], ") of shape ", ShapeString(shape)));
      }
      shape[0] += part_shape[0];
      data->append(part.tensor().data());
    }
    out->mutable_tensor()->mutable_shape()->Assign(shape.begin(), shape.end());
  }
  *slices = std::move(joined);
  return absl::OkStatus();
}

std::vector<SliceList> BatchSlices(SliceList slices, int64_t max_batch_bytes) {
  std::vector<SliceList> batches;
  int64_t bytes = max_batch_bytes;  // forces a first batch
  for (ShardSlice& slice : slices) {
    const int64_t size = static_cast<int64_t>(slice.tensor().data().size());
    if (batches.empty() || bytes + size > max_batch_bytes) {
      batches.emplace_back();
      bytes = 0;
    }
    bytes += size;
    *batches.back().Add() = std::move(slice);
  }
  return batches;
}

}  // namespace fulcrum
