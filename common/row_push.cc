#include "common/row_push.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fulcrum {

namespace {

// `request` (a pull's or a push's: tables of TableRows) cut, in order, into
// parts of at most `max_ids` ids and about `max_bytes`, an id of table i
// costing id_bytes[i] (at least one id a part), every part naming all the
// tables with their other fields; none when it fits. Ids go with their
// values, where the tables carry them.
template <typename Request>
std::vector<Request> SplitRowCall(const Request& request, const std::vector<int64_t>& id_bytes,
                                  int64_t max_ids, int64_t max_bytes) {
  int64_t total_ids = 0, total_bytes = 0;
  for (int i = 0; i < request.tables_size(); ++i) {
    total_ids += request.tables(i).ids_size();
    total_bytes += request.tables(i).ids_size() * id_bytes[i];
  }
  if (total_ids <= max_ids && total_bytes <= max_bytes) return {};
  Request empty = request;
  for (TableRows& rows : *empty.mutable_tables()) {
    rows.clear_ids();
    rows.clear_values();
  }
  std::vector<Request> parts = {empty};
  int64_t ids = 0, bytes = 0;
  for (int i = 0; i < request.tables_size(); ++i) {
    const TableRows& rows = request.tables(i);
    if (rows.ids_size() == 0) continue;
    const int64_t width = rows.values_size() / rows.ids_size();  // 0: ids only
    for (int k = 0; k < rows.ids_size(); ++k) {
      if (ids > 0 && (ids + 1 > max_ids || bytes + id_bytes[i] > max_bytes)) {
        parts.push_back(empty);
        ids = bytes = 0;
      }
      TableRows& into = *parts.back().mutable_tables(i);
      into.add_ids(rows.ids(k));
      into.mutable_values()->Add(rows.values().begin() + k * width,
                                 rows.values().begin() + (k + 1) * width);
      ++ids;
      bytes += id_bytes[i];
    }
  }
  return parts;
}

}  // namespace

std::vector<PullRowsRequest> SplitRowPull(const PullRowsRequest& pull,
                                          const std::vector<int64_t>& widths, int64_t max_ids,
                                          int64_t max_bytes) {
  std::vector<int64_t> id_bytes;  // the rows each id's answer carries
  for (int64_t width : widths) id_bytes.push_back(width * static_cast<int64_t>(sizeof(float)));
  return SplitRowCall(pull, id_bytes, max_ids, max_bytes);
}

std::vector<PushRowsRequest> SplitRowPush(const PushRowsRequest& push, int64_t max_ids,
                                          int64_t max_bytes) {
  std::vector<int64_t> id_bytes;  // the id and its gradient
  for (const TableRows& rows : push.tables()) {
    const int64_t width = rows.ids_size() == 0 ? 0 : rows.values_size() / rows.ids_size();
    id_bytes.push_back(static_cast<int64_t>(sizeof(int64_t) + width * sizeof(float)));
  }
  return SplitRowCall(push, id_bytes, max_ids, max_bytes);
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
      if (part.tables(i).table() != into.table() ||
          part.tables(i).has_partition() != into.has_partition() ||
          part.tables(i).partition() != into.partition()) {
        return absl::InvalidArgumentError(
            absl::StrCat("part ", p, " of a push of rows names table '", part.tables(i).table(),
                         "' range ", part.tables(i).partition(), " where part 0 names '",
                         into.table(), "' range ", into.partition()));
      }
      into.mutable_ids()->Add(part.tables(i).ids().begin(), part.tables(i).ids().end());
      into.mutable_values()->Add(part.tables(i).values().begin(), part.tables(i).values().end());
    }
  }
  return merged;
}

}  // namespace fulcrum
