#include "client/row_calls.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/logging.h"
#include "common/placement.h"
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

absl::Status RowCalls::CreateTables(const std::vector<EmbeddingTableSpec>& given) {
  std::vector<EmbeddingTableSpec> specs = given;
  for (EmbeddingTableSpec& spec : specs) {
    // Dealt among the servers there are now, for as long as the table lives.
    if (spec.partitions() == 0) spec.set_partitions(servers_.size());
  }
  std::vector<PlacementUnitSpec> units;
  for (const EmbeddingTableSpec& spec : specs) {
    for (int p = 0; p < spec.partitions(); ++p) {
      // Its bytes at most, for balancing (unbounded: as one of a row).
      units.push_back(
          {TableKey(spec.name(), p), std::max<int64_t>(spec.max_rows(), 1) * spec.width() *
                                         static_cast<int64_t>(sizeof(float))});
    }
  }
  // Of the ranges' copies; none unreplicated.
  absl::StatusOr<Placement> table = servers_.PlaceCopies(units);
  if (!table.ok()) return table.status();
  std::vector<CreateShardsRequest> requests(servers_.size());
  // Range `partition` of `spec` on server `ps`, as `copy` of it.
  auto add = [&](int ps, const EmbeddingTableSpec& spec, int partition, const ShardCopy& copy) {
    CreateShardsRequest& request = requests[ps];
    if (request.tables_size() == 0 || request.tables().rbegin()->name() != spec.name()) {
      *request.add_tables() = spec;
    }
    TableRange* range = request.add_ranges();
    range->set_table(spec.name());
    range->set_partition(partition);
    *range->mutable_copy() = copy;
  };
  int unit = 0;
  for (const EmbeddingTableSpec& spec : specs) {
    for (int p = 0; p < spec.partitions(); ++p) {
      if (table->units_size() == 0) {
        add(p % servers_.size(), spec, p, ShardCopy());
        continue;
      }
      for (const auto& [ps, copy] : servers_.CopiesOf(table->units(unit++))) {
        add(ps, spec, p, copy);
      }
    }
  }
  absl::StatusOr<std::vector<uint64_t>> incarnations =
      servers_.CreateEverywhere(&requests, *table, "create tables");
  if (!incarnations.ok()) return incarnations.status();
  for (const EmbeddingTableSpec& spec : specs) tables_.emplace(spec.name(), spec);
  servers_.RememberTables(requests, *incarnations);
  Route();
  return absl::OkStatus();
}

void RowCalls::Route() {
  const Placement table = servers_.placement();
  routed_epoch_ = table.epoch();
  std::map<int32_t, std::string> addresses;  // of each server id
  for (const PlacedServer& server : table.servers()) addresses[server.id()] = server.address();
  std::map<std::string, int32_t> primaries;  // by unit key: its primary's id
  for (const PlacedUnit& unit : table.units()) primaries[unit.key()] = unit.copies(0).server();
  for (const auto& [name, spec] : tables_) {
    std::vector<int>& servers = range_servers_[name];
    const bool routed_before = !servers.empty();
    servers.resize(spec.partitions());
    for (int p = 0; p < spec.partitions(); ++p) {
      const auto found = primaries.find(TableKey(name, p));
      // Unreplicated, range p is on server p (of the servers at creation).
      const int ps =
          found == primaries.end() ? p % servers_.size() : servers_.Add(addresses[found->second]);
      if (ps < 0) {
        LOG_ERROR(
            "{}: its primary in the placement table (epoch {}) is {}, a server this client "
            "cannot reach",
            TableKey(name, p), table.epoch(), addresses[found->second]);
        continue;
      }
      if (servers[p] != ps && routed_before) {
        LOG_INFO("{}: its primary is now ps {} ({}), placement epoch {}", TableKey(name, p), ps,
                 servers_.address(ps), table.epoch());
      }
      servers[p] = ps;
    }
  }
}

bool RowCalls::Reroute(const absl::Status& failed) {
  if (!servers_.PlacementMovedOn(failed, routed_epoch_)) return false;
  Route();
  return true;
}

absl::StatusOr<const EmbeddingTableSpec*> RowCalls::Table(const std::string& table) const {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::NotFoundError(
        absl::StrCat("embedding table '", table, "' was not created by this client"));
  }
  return &it->second;
}

absl::StatusOr<const std::vector<RoutedIds>*> RowCalls::RouteLookups(
    const std::vector<TableIds>& lookups, const std::vector<size_t>& row_floats,
    const std::string& what) {
  if (row_floats.size() != lookups.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rows of embedding tables: ", lookups.size(),
                                                   " lookups with ", row_floats.size(), " ", what,
                                                   " buffers"));
  }
  absl::InlinedVector<const EmbeddingTableSpec*, 32> specs;
  for (size_t i = 0; i < lookups.size(); ++i) {
    absl::StatusOr<const EmbeddingTableSpec*> spec = Table(lookups[i].table);
    if (!spec.ok()) return spec.status();
    specs.push_back(*spec);
    const int64_t width = (*spec)->width();
    if (row_floats[i] != lookups[i].ids.size() * width) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding table '", lookups[i].table, "': ", row_floats[i], " ", what,
                       " floats for ", lookups[i].ids.size(), " ids of width ", width));
    }
  }
  const auto same = [](const TableIds& a, const TableIds& b) {
    return a.table == b.table && a.ids == b.ids;
  };
  if (!std::equal(lookups.begin(), lookups.end(), routed_lookups_.begin(), routed_lookups_.end(),
                  same)) {
    routed_.clear();
    for (size_t i = 0; i < lookups.size(); ++i) {
      routed_.push_back(RouteIds(lookups[i].ids, specs[i]->partitions()));
    }
    routed_lookups_ = lookups;
  }
  return &routed_;
}

absl::Status RowCalls::PullRows(const std::vector<TableIds>& lookups,
                                std::vector<std::vector<float>>* rows) {
  rows->resize(lookups.size());
  std::vector<absl::Span<float>> out;
  for (size_t i = 0; i < lookups.size(); ++i) {
    absl::StatusOr<const EmbeddingTableSpec*> spec = Table(lookups[i].table);
    if (!spec.ok()) return spec.status();
    (*rows)[i].resize(lookups[i].ids.size() * (*spec)->width());
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
  const std::vector<RoutedIds>& routing = **routed;
  for (;;) {
    absl::Status pulled = PullOnce(lookups, routing, out);
    if (pulled.ok() || !Reroute(pulled)) return pulled;
    LOG_WARN("pull of rows: {}; made again with the placement table of epoch {}", pulled.message(),
             routed_epoch_);
  }
}

absl::Status RowCalls::PullOnce(const std::vector<TableIds>& lookups,
                                const std::vector<RoutedIds>& routed,
                                const std::vector<absl::Span<float>>& out) {
  const PsClientOptions& options = servers_.options();
  std::vector<PullRowsRequest> requests(servers_.size());
  std::vector<std::vector<Part>> parts(servers_.size());  // of each request's tables
  std::vector<bool> involved(servers_.size());
  for (int ps = 0; ps < servers_.size(); ++ps) {
    PullRowsRequest& request = requests[ps];
    if (options.worker_id >= 0) request.set_worker_id(options.worker_id);
    if (servers_.policy().CarriesClock() && options.worker_id >= 0) {
      request.set_clock(servers_.clock());
    }
    request.set_incarnation(servers_.incarnation(ps));
    request.set_placement_epoch(routed_epoch_);
  }
  for (size_t i = 0; i < lookups.size(); ++i) {
    const std::vector<int>& servers = range_servers_[lookups[i].table];
    for (size_t p = 0; p < routed[i].by_range.size(); ++p) {
      if (routed[i].by_range[p].empty()) continue;
      const int ps = servers[p];
      TableRows* part = requests[ps].add_tables();
      part->set_table(lookups[i].table);
      part->set_partition(static_cast<int>(p));
      for (int32_t u : routed[i].by_range[p]) part->add_ids(routed[i].unique[u]);
      auto it = table_state_.find({lookups[i].table, static_cast<int>(p)});
      if (it != table_state_.end()) part->set_version(it->second.min_version);
      parts[ps].push_back({i, static_cast<int>(p)});
      involved[ps] = true;
    }
  }
  std::vector<PullRowsResponse> responses(servers_.size());
  // The answer of `ps` to `request`, in parts when it is large: as many
  // tables as asked.
  const auto pull = [&](int ps, const PullRowsRequest& request, absl::Time deadline) {
    std::vector<int64_t> widths;
    for (const Part& part : parts[ps])
      widths.push_back(tables_.at(lookups[part.lookup].table).width());
    PullRowsResponse whole;
    std::vector<PullRowsRequest> pieces =
        SplitRowPull(request, widths, kMaxIdsPerRowCall, kRowCallBytes);
    if (pieces.empty()) pieces.push_back(request);  // it fits
    for (const PullRowsRequest& piece : pieces) {
      auto pulled = servers_.server(ps).PullRows(piece, deadline);
      if (!pulled.ok()) return pulled.status();
      if (pulled->tables_size() != piece.tables_size()) {
        return absl::DataLossError(absl::StrCat("pull of rows answered ", pulled->tables_size(),
                                                " tables of ", piece.tables_size()));
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
  std::vector<std::vector<float>> unique_rows(lookups.size());
  for (size_t i = 0; i < lookups.size(); ++i) {
    unique_rows[i].resize(routed[i].unique.size() * tables_.at(lookups[i].table).width());
  }
  for (int ps = 0; ps < servers_.size(); ++ps) {
    for (size_t k = 0; k < parts[ps].size(); ++k) {
      const auto [i, p] = parts[ps][k];
      const int64_t width = tables_.at(lookups[i].table).width();
      const std::vector<int32_t>& ids = routed[i].by_range[p];
      const TableRows& part = responses[ps].tables(static_cast<int>(k));
      if (part.values_size() != static_cast<int64_t>(ids.size()) * width) {
        return absl::DataLossError(absl::StrCat(
            "ps ", ps, ": embedding table '", lookups[i].table, "' range ", p, " answered ",
            part.values_size(), " floats for ", ids.size(), " ids of width ", width));
      }
      for (size_t u = 0; u < ids.size(); ++u) {
        std::copy_n(part.values().data() + u * width, width,
                    unique_rows[i].begin() + ids[u] * width);
      }
      table_state_[{lookups[i].table, p}].pulled_version = part.version();
    }
  }
  for (size_t i = 0; i < lookups.size(); ++i) {
    ScatterRows(routed[i], unique_rows[i], tables_.at(lookups[i].table).width(), out[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<PushStats> RowCalls::PushRows(const std::vector<TableIds>& lookups,
                                             const std::vector<absl::Span<const float>>& grads) {
  std::vector<size_t> row_floats;
  for (absl::Span<const float> rows : grads) row_floats.push_back(rows.size());
  auto routed = RouteLookups(lookups, row_floats, "gradient");
  if (!routed.ok()) return routed.status();
  const std::vector<RoutedIds>& routing = **routed;
  std::vector<std::vector<float>> sums;
  for (size_t i = 0; i < lookups.size(); ++i) {
    sums.push_back(SumRowsPerId(routing[i], grads[i], tables_.at(lookups[i].table).width()));
  }
  // The same id on every attempt: a range an attempt applied answers the
  // next DUPLICATE.
  const uint64_t push_id = servers_.NewPushId();
  for (;;) {
    absl::StatusOr<PushStats> pushed = PushOnce(lookups, routing, sums, push_id);
    if (pushed.ok() || !Reroute(pushed.status())) return pushed;
    LOG_WARN("push of rows: {}; made again with the placement table of epoch {}",
             pushed.status().message(), routed_epoch_);
  }
}

absl::StatusOr<PushStats> RowCalls::PushOnce(const std::vector<TableIds>& lookups,
                                             const std::vector<RoutedIds>& routed,
                                             const std::vector<std::vector<float>>& sums,
                                             uint64_t push_id) {
  std::vector<PushRowsRequest> requests(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (int ps = 0; ps < servers_.size(); ++ps) {
    involved[ps] = servers_.EveryPushReaches(ps);
    requests[ps].set_worker_id(servers_.options().worker_id);
    requests[ps].set_incarnation(servers_.incarnation(ps));
    requests[ps].set_push_id(push_id);
    requests[ps].set_placement_epoch(routed_epoch_);
    requests[ps].set_trace(servers_.Tracing());
  }
  for (size_t i = 0; i < lookups.size(); ++i) {
    const int64_t width = tables_.at(lookups[i].table).width();
    const std::vector<int>& servers = range_servers_[lookups[i].table];
    for (size_t p = 0; p < routed[i].by_range.size(); ++p) {
      const std::vector<int32_t>& ids = routed[i].by_range[p];
      const int ps = servers[p];
      // Sync and ssp: every range hears of every push (its step, a clock).
      if (ids.empty() && !servers_.EveryPushReaches(ps)) continue;
      TableRows* part = requests[ps].add_tables();
      part->set_table(lookups[i].table);
      part->set_partition(static_cast<int>(p));
      auto it = table_state_.find({lookups[i].table, static_cast<int>(p)});
      part->set_version(it == table_state_.end() ? 0 : it->second.pulled_version);
      part->mutable_ids()->Reserve(static_cast<int>(ids.size()));
      part->mutable_values()->Reserve(static_cast<int>(ids.size() * width));
      for (int32_t u : ids) {
        part->add_ids(routed[i].unique[u]);
        part->mutable_values()->Add(sums[i].begin() + u * width, sums[i].begin() + (u + 1) * width);
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
      ShardVersions& state = table_state_[{part.table(), part.partition()}];
      state.min_version = servers_.policy().MinVersionAfterPush(state.pulled_version);
    }
  }
  return stats;
}

void RowCalls::ForgetVersions(const std::vector<bool>& recovered) {
  for (auto& [key, state] : table_state_) {
    const std::vector<int>& servers = range_servers_[key.first];
    const int ps = key.second < static_cast<int>(servers.size()) ? servers[key.second] : -1;
    if (ps >= 0 && ps < static_cast<int>(recovered.size()) && recovered[ps]) {
      state = ShardVersions();
    }
  }
}

absl::Status RowCalls::ReadTable(
    const std::string& table, bool slots,
    absl::FunctionRef<absl::Status(const ReadRowsResponse& page)> visit) {
  absl::StatusOr<const EmbeddingTableSpec*> spec = Table(table);
  if (!spec.ok()) return spec.status();
  for (int p = 0; p < (*spec)->partitions(); ++p) {
    ReadRowsRequest request;
    request.set_table(table);
    request.set_partition(p);
    request.set_slots(slots);
    bool first = true;  // page of the range
    for (bool more = true; more;) {
      const int ps = range_servers_[table][p];
      if (first) request.set_incarnation(servers_.incarnation(ps));
      std::vector<bool> involved(servers_.size(), false);
      involved[ps] = true;
      ReadRowsResponse page;
      absl::Status s = servers_.ForEachServer(
          involved, absl::StrCat("read of table '", table, "' range ", p),
          [&](int server, absl::Time deadline) {
            return Keep(servers_.server(server).ReadRows(request, deadline), &page);
          });
      // A range that moved before its first page is read where it is now.
      if (!s.ok() && first && Reroute(s)) continue;
      if (!s.ok()) return s;
      first = false;
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
