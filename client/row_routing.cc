#include "client/row_routing.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "common/embedding.h"

namespace fulcrum {

RoutedIds RouteIds(absl::Span<const int64_t> ids, int partitions) {
  RoutedIds routed;
  routed.position.reserve(ids.size());
  absl::flat_hash_map<int64_t, int32_t> index;
  index.reserve(ids.size());
  for (int64_t id : ids) {
    auto [it, added] = index.try_emplace(id, static_cast<int32_t>(routed.unique.size()));
    if (added) routed.unique.push_back(id);
    routed.position.push_back(it->second);
  }
  routed.by_range.resize(partitions);
  for (size_t i = 0; i < routed.unique.size(); ++i) {
    routed.by_range[EmbeddingOwner(routed.unique[i], partitions)].push_back(
        static_cast<int32_t>(i));
  }
  return routed;
}

void ScatterRows(const RoutedIds& routed, absl::Span<const float> unique_rows, int64_t width,
                 absl::Span<float> out) {
  for (size_t k = 0; k < routed.position.size(); ++k) {
    const float* row = unique_rows.data() + routed.position[k] * width;
    std::copy(row, row + width, out.begin() + static_cast<int64_t>(k) * width);
  }
}

std::vector<float> SumRowsPerId(const RoutedIds& routed, absl::Span<const float> grads,
                                int64_t width) {
  std::vector<float> sums(routed.unique.size() * width, 0.0f);
  for (size_t k = 0; k < routed.position.size(); ++k) {
    float* sum = sums.data() + routed.position[k] * width;
    const float* g = grads.data() + static_cast<int64_t>(k) * width;
    for (int64_t j = 0; j < width; ++j) sum[j] += g[j];
  }
  return sums;
}

}  // namespace fulcrum
