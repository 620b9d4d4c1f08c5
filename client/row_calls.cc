#include "client/row_calls.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/row_push.h"

namespace fulcrum {
namespace {

// The most bytes of rows one pull asks a server for, and one message of a
// push carries: well under the servers' message limit (--max_message_mb,
// 256 MiB by default).
constexpr int64_t kRowCallBytes = int64_t{32} << 20;

// Adds `part`'s rows, table by table, to `whole` (empty, or as many tables),
// which keeps the lowest version of any part.
void AppendRows(PullRowsResponse part, PullRowsResponse* whole) {
  if (whole->tables_size() == 0) {
    *whole = std::move(part);
    return;
  }
  for (int i = 0; i < part.tables_size(); ++i) {
    TableRows& into = *whole->mutable_tables(i);
    into.mutable_values()->Add(part.tables(i).values().begin(), part.tables(i).values().end());
    into.set_version(std::min(into.version(), part.tables(i).version()));
  }
}

}  // namespace

absl::Status RowCalls::CreateTables(const std::vector<EmbeddingTableSpec>& specs) {
  CreateShardsRequest request;
  for (const EmbeddingTableSpec& spec : specs) *request.add_tables() = spec;
  std::vector<uint64_t> incarnations(servers_.size(), 0);
  absl::Status status = servers_.ForEveryServer("create tables", [&](int ps, absl::Time deadline) {
    auto created = servers_.server(ps).CreateShards(request, deadline);
    if (created.ok()) incarnations[ps] = created->incarnation();
    return created.status();
  });
  if (!status.ok()) return status;
  std::vector<EmbeddingTableSpec> added;
  for (const EmbeddingTableSpec& spec : specs) {
    if (tables_.emplace(spec.name(), spec).second) added.push_back(spec);
  }
  servers_.RememberTables(added, incarnations);
  return absl::OkStatus();
}

std::vector<EmbeddingTableSpec> RowCalls::TableSpecs() const {
  std::vector<EmbeddingTableSpec> specs;
  for (const auto& [name, spec] : tables_) specs.push_back(spec);
  return specs;
}

absl::StatusOr<int64_t> RowCalls::TableWidth(const std::string& table) const {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::NotFoundError(
        absl::StrCat("embedding table '", table, "' was not created by this client"));
  }
  return it->second.width();
}

absl::StatusOr<std::vector<RoutedIds>> RowCalls::RouteLookups(const std::vector<TableIds>& lookups,
                                                              const std::vector<size_t>& row_floats,
                                                              const std::string& what) const {
  if (row_floats.size() != lookups.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rows of embedding tables: ", lookups.size(),
                                                   " lookups with ", row_floats.size(), " ", what,
                                                   " buffers"));
  }
  std::vector<RoutedIds> routed;
  for (size_t i = 0; i < lookups.size(); ++i) {
    absl::StatusOr<int64_t> width = TableWidth(lookups[i].table);
    if (!width.ok()) return width.status();
    if (row_floats[i] != lookups[i].ids.size() * *width) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding table '", lookups[i].table, "': ", row_floats[i], " ", what,
                       " floats for ", lookups[i].ids.size(), " ids of width ", *width));
    }
    routed.push_back(RouteIds(lookups[i].ids, servers_.size()));
  }
  return routed;
}

absl::Status RowCalls::PullRows(const std::vector<TableIds>& lookups,
                                std::vector<std::vector<float>>* rows) {
  rows->resize(lookups.size());
  std::vector<absl::Span<float>> out;
  for (size_t i = 0; i < lookups.size(); ++i) {
    absl::StatusOr<int64_t> width = TableWidth(lookups[i].table);
    if (!width.ok()) return width.status();
    (*rows)[i].resize(lookups[i].ids.size() * *width);
    out.emplace_back((*rows)[i]);
  }
  return PullRowsInto(lookups, out);
}

absl::Status RowCalls::PullRowsInto(const std::vector<TableIds>& lookups,
                                    const std::vector<absl::Span<float>>& out) {
  std::vector<size_t> row_floats;
  for (absl::Span<float> rows : out) row_floats.push_back(rows.size());
  auto routed = RouteLookups(lookups, row_floats, "output");
  if (!routed.ok()) return routed.status();
  const PsClientOptions& options = servers_.options();
  std::vector<PullRowsRequest> requests(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (int ps = 0; ps < servers_.size(); ++ps) {
    PullRowsRequest& request = requests[ps];
    if (options.worker_id >= 0) request.set_worker_id(options.worker_id);
    if (servers_.policy().CarriesClock() && options.worker_id >= 0) {
      request.set_clock(servers_.clock());
    }
    request.set_incarnation(servers_.incarnation(ps));
    for (size_t i = 0; i < lookups.size(); ++i) {
      TableRows* part = request.add_tables();
      part->set_table(lookups[i].table);
      for (int32_t u : (*routed)[i].by_server[ps]) part->add_ids((*routed)[i].unique[u]);
      auto it = table_state_.find({lookups[i].table, ps});
      if (it != table_state_.end()) part->set_version(it->second.min_version);
      involved[ps] = involved[ps] || part->ids_size() > 0;
    }
  }
  std::vector<int64_t> widths;
  for (const TableIds& lookup : lookups) widths.push_back(*TableWidth(lookup.table));
  std::vector<PullRowsResponse> responses(servers_.size());
  // The answer of `ps` to `request`, in parts when it is large: as many
  // tables as asked.
  const auto pull = [&](int ps, const PullRowsRequest& request, absl::Time deadline) {
    PullRowsResponse whole;
    std::vector<PullRowsRequest> parts =
        SplitRowPull(request, widths, kMaxIdsPerRowCall, kRowCallBytes);
    if (parts.empty()) parts.push_back(request);  // it fits
    for (const PullRowsRequest& part : parts) {
      auto pulled = servers_.server(ps).PullRows(part, deadline);
      if (!pulled.ok()) return pulled.status();
      if (pulled->tables_size() != part.tables_size()) {
        return absl::DataLossError(absl::StrCat("pull of rows answered ", pulled->tables_size(),
                                                " tables of ", part.tables_size()));
      }
      AppendRows(*std::move(pulled), &whole);
    }
    responses[ps] = std::move(whole);
    return absl::OkStatus();
  };
  std::vector<bool> recovered;
  absl::Status status = servers_.ForEachServerRecovering(
      involved, "pull rows",
      [&](int ps, absl::Time deadline) { return pull(ps, requests[ps], deadline); },
      [&](int ps, absl::Time deadline) {
        PullRowsRequest again = requests[ps];
        again.set_incarnation(servers_.incarnation(ps));
        for (TableRows& part : *again.mutable_tables()) part.set_version(0);
        return pull(ps, again, deadline);
      },
      &recovered);
  if (!status.ok()) return status;
  for (size_t i = 0; i < lookups.size(); ++i) {
    const int64_t width = *TableWidth(lookups[i].table);
    const RoutedIds& r = (*routed)[i];
    std::vector<float> unique_rows(r.unique.size() * width);
    for (int ps = 0; ps < servers_.size(); ++ps) {
      if (!involved[ps]) continue;
      const TableRows& part = responses[ps].tables(static_cast<int>(i));
      if (part.values_size() != static_cast<int64_t>(r.by_server[ps].size()) * width) {
        return absl::DataLossError(absl::StrCat("ps ", ps, ": embedding table '", lookups[i].table,
                                                "' answered ", part.values_size(), " floats for ",
                                                r.by_server[ps].size(), " ids of width ", width));
      }
      for (size_t k = 0; k < r.by_server[ps].size(); ++k) {
        std::copy_n(part.values().data() + k * width, width,
                    unique_rows.begin() + r.by_server[ps][k] * width);
      }
      table_state_[{lookups[i].table, ps}].pulled_version = part.version();
    }
    ScatterRows(r, unique_rows, width, out[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<PushStats> RowCalls::PushRows(const std::vector<TableIds>& lookups,
                                             const std::vector<absl::Span<const float>>& grads) {
  std::vector<size_t> row_floats;
  for (absl::Span<const float> rows : grads) row_floats.push_back(rows.size());
  auto routed = RouteLookups(lookups, row_floats, "gradient");
  if (!routed.ok()) return routed.status();
  std::vector<PushRowsRequest> requests(servers_.size());
  std::vector<bool> involved(servers_.size());
  const uint64_t push_id = servers_.NewPushId();
  for (int ps = 0; ps < servers_.size(); ++ps) {
    involved[ps] = servers_.EveryPushReaches(ps);
    requests[ps].set_worker_id(servers_.options().worker_id);
    requests[ps].set_incarnation(servers_.incarnation(ps));
    requests[ps].set_push_id(push_id);
  }
  for (size_t i = 0; i < lookups.size(); ++i) {
    const int64_t width = *TableWidth(lookups[i].table);
    const RoutedIds& r = (*routed)[i];
    const std::vector<float> sums = SumRowsPerId(r, grads[i], width);
    for (int ps = 0; ps < servers_.size(); ++ps) {
      if (r.by_server[ps].empty() && !servers_.EveryPushReaches(ps)) continue;
      TableRows* part = requests[ps].add_tables();
      part->set_table(lookups[i].table);
      auto it = table_state_.find({lookups[i].table, ps});
      part->set_version(it == table_state_.end() ? 0 : it->second.pulled_version);
      part->mutable_ids()->Reserve(static_cast<int>(r.by_server[ps].size()));
      part->mutable_values()->Reserve(static_cast<int>(r.by_server[ps].size() * width));
      for (int32_t u : r.by_server[ps]) {
        part->add_ids(r.unique[u]);
        part->mutable_values()->Add(sums.begin() + u * width, sums.begin() + (u + 1) * width);
      }
      involved[ps] = true;
    }
  }
  std::vector<PushRowsResponse> responses(servers_.size());
  std::vector<bool> recovered;
  absl::Status status = servers_.ForEachServerRecovering(
      involved, "push rows",
      [&](int ps, absl::Time deadline) {
        // One message, or a stream of parts that applies as one push.
        std::vector<PushRowsRequest> parts =
            SplitRowPush(requests[ps], kMaxIdsPerRowCall, kRowCallBytes);
        return Keep(parts.empty() ? servers_.server(ps).PushRows(requests[ps], deadline)
                                  : servers_.server(ps).PushRowsInParts(parts, deadline),
                    &responses[ps]);
      },
      nullptr, &recovered);
  if (!status.ok()) return status;
  PushStats stats;
  for (int ps = 0; ps < servers_.size(); ++ps) {
    stats = AddPushResults(responses[ps].results(), stats);
    if (recovered[ps]) {
      stats.lost += requests[ps].tables_size();
      continue;
    }
    for (const TableRows& part : requests[ps].tables()) {
      ShardVersions& state = table_state_[{part.table(), ps}];
      state.min_version = servers_.policy().MinVersionAfterPush(state.pulled_version);
    }
  }
  return stats;
}

void RowCalls::ForgetVersions(const std::vector<bool>& recovered) {
  for (auto& [key, state] : table_state_) {
    if (recovered[key.second]) state = ShardVersions();
  }
}

absl::Status RowCalls::ReadTable(
    const std::string& table, bool slots,
    absl::FunctionRef<absl::Status(const ReadRowsResponse& page)> visit) {
  for (int ps = 0; ps < servers_.size(); ++ps) {
    std::vector<bool> involved(servers_.size(), false);
    involved[ps] = true;
    ReadRowsRequest request;
    request.set_table(table);
    request.set_slots(slots);
    request.set_incarnation(servers_.incarnation(ps));
    for (bool more = true; more;) {
      ReadRowsResponse page;
      absl::Status s = servers_.ForEachServer(
          involved, absl::StrCat("read of table '", table, "'"),
          [&](int server, absl::Time deadline) {
            return Keep(servers_.server(server).ReadRows(request, deadline), &page);
          });
      if (!s.ok()) return s;
      if (absl::Status v = visit(page); !v.ok()) return v;
      // The server's start the dump began on: a restart since is ABORTED.
      request.set_incarnation(page.incarnation());
      more = page.next() < page.rows() && page.ids_size() > 0;
      request.set_start(page.next());
    }
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
