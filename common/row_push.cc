#include "common/row_push.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fulcrum {

std::vector<PushRowsRequest> SplitRowPush(const PushRowsRequest& push, int64_t max_ids,
                                          int64_t max_bytes) {
  int64_t total_ids = 0, total_bytes = 0;
  for (const TableRows& rows : push.tables()) {
    total_ids += rows.ids_size();
    total_bytes += rows.ids_size() * static_cast<int64_t>(sizeof(int64_t)) +
                   rows.values_size() * static_cast<int64_t>(sizeof(float));
  }
  if (total_ids <= max_ids && total_bytes <= max_bytes) return {};
  PushRowsRequest empty = push;
  for (TableRows& rows : *empty.mutable_tables()) {
    rows.clear_ids();
    rows.clear_values();
  }
  std::vector<PushRowsRequest> parts = {empty};
  int64_t ids = 0, bytes = 0;
  for (int i = 0; i < push.tables_size(); ++i) {
    const TableRows& rows = push.tables(i);
    if (rows.ids_size() == 0) continue;
    const int64_t width = rows.values_size() / rows.ids_size();
    const int64_t row_bytes = static_cast<int64_t>(sizeof(int64_t) + width * sizeof(float));
    for (int k = 0; k < rows.ids_size(); ++k) {
      if (ids > 0 && (ids + 1 > max_ids || bytes + row_bytes > max_bytes)) {
        parts.push_back(empty);
        ids = bytes = 0;
      }
      TableRows& into = *parts.back().mutable_tables(i);
      into.add_ids(rows.ids(k));
      into.mutable_values()->Add(rows.values().begin() + k * width,
                                 rows.values().begin() + (k + 1) * width);
      ++ids;
      bytes += row_bytes;
    }
  }
  return parts;
}

absl::StatusOr<PushRowsRequest> MergeRowPush(std::vector<PushRowsRequest> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("a push of rows in no parts");
  PushRowsRequest merged = std::move(parts[0]);
  for (size_t p = 1; p < parts.size(); ++p) {
    const PushRowsRequest& part = parts[p];
    if (part.worker_id() != merged.worker_id() || part.push_id() != merged.push_id() ||
        part.incarnation() != merged.incarnation() || part.tables_size() != merged.tables_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("part ", p,
                       " of a push of rows is not of the same push as part 0 (worker, push id, "
                       "incarnation and tables must agree)"));
    }
    for (int i = 0; i < part.tables_size(); ++i) {
      TableRows& into = *merged.mutable_tables(i);
      if (part.tables(i).table() != into.table()) {
        return absl::InvalidArgumentError(
            absl::StrCat("part ", p, " of a push of rows names table '", part.tables(i).table(),
                         "' where part 0 names '", into.table(), "'"));
      }
      into.mutable_ids()->Add(part.tables(i).ids().begin(), part.tables(i).ids().end());
      into.mutable_values()->Add(part.tables(i).values().begin(), part.tables(i).values().end());
    }
  }
  return merged;
}

}  // namespace fulcrum
