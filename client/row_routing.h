// How a batch's ids of one embedding table travel: each distinct id once,
// to the range of the table's ids that holds it (EmbeddingOwner among the
// table's partitions), and its row back to every position that named it.
// Thread-compatible.
#ifndef FULCRUM_CLIENT_ROW_ROUTING_H_
#define FULCRUM_CLIENT_ROW_ROUTING_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace fulcrum {

struct RoutedIds {
  std::vector<int64_t> unique;    // the distinct ids, in order of first use
  std::vector<int32_t> position;  // per id of the batch: its index in unique
  // Per range: the indices into unique of the ids it holds, ascending.
  std::vector<std::vector<int32_t>> by_range;
};

// Routes `ids` over `partitions` (>= 1) ranges.
RoutedIds RouteIds(absl::Span<const int64_t> ids, int partitions);

// The rows of unique ids (width floats each) at every batch position:
// out[k] = unique_rows[position[k]]; out holds position.size() rows.
void ScatterRows(const RoutedIds& routed, absl::Span<const float> unique_rows, int64_t width,
                 absl::Span<float> out);

// The batch's row gradients (position.size() rows of width) summed per
// distinct id, into unique.size() rows.
std::vector<float> SumRowsPerId(const RoutedIds& routed, absl::Span<const float> grads,
                                int64_t width);

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_ROW_ROUTING_H_
