#include "common/placement.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fulcrum {
namespace {

PlacedCopy* FindCopy(PlacedUnit& unit, int32_t server) {
  for (PlacedCopy& copy : *unit.mutable_copies()) {
    if (copy.server() == server) return &copy;
  }
  return nullptr;
}

int ServerPosition(const Placement& placement, int32_t id) {
  for (int i = 0; i < placement.servers_size(); ++i) {
    if (placement.servers(i).id() == id) return i;
  }
  return -1;
}

// Whether some catching-up copy of `unit` is to replace the copy on `server`.
bool BeingReplaced(const PlacedUnit& unit, int32_t server) {
  return std::any_of(unit.copies().begin(), unit.copies().end(), [&](const PlacedCopy& c) {
    return c.has_replaces() && c.replaces() == server;
  });
}

// Bytes of the copies each server holds, all and primaries only, by
// position in the table. A copy being replaced counts as gone.
struct Loads {
  std::vector<int64_t> bytes, primary_bytes;

  explicit Loads(const Placement& placement)
      : bytes(placement.servers_size(), 0), primary_bytes(placement.servers_size(), 0) {
    std::map<int32_t, int> position;
    for (int i = 0; i < placement.servers_size(); ++i) position[placement.servers(i).id()] = i;
    for (const PlacedUnit& unit : placement.units()) {
      for (int c = 0; c < unit.copies_size(); ++c) {
        const int32_t server = unit.copies(c).server();
        if (BeingReplaced(unit, server)) continue;
        // A primary's replacement will be the primary.
        const bool primary = c == 0 || (unit.copies(c).has_replaces() &&
                                        unit.copies(c).replaces() == unit.copies(0).server());
        Add(position.at(server), unit.bytes(), primary);
      }
    }
  }

  void Add(int position, int64_t unit_bytes, bool primary) {
    bytes[position] += unit_bytes;
    if (primary) primary_bytes[position] += unit_bytes;
  }
};

// Chooses servers for new copies by the rule in the header; one cursor
// for primaries and one for backups carry the round-robin across calls.
class Chooser {
 public:
  explicit Chooser(const Placement& placement) : placement_(placement), loads_(placement) {}

  // The position of the server for a new copy of `unit` (whose copy on
  // `leaving`, if any, is not counted as one of its zones), or -1 when no
  // server may take it. Counts the copy in the loads.
  int Choose(const PlacedUnit& unit, bool primary, int32_t leaving = -1) {
    std::set<std::string> zones;
    for (const PlacedCopy& copy : unit.copies()) {
      if (copy.server() == leaving) continue;
      const std::string& zone =
          placement_.servers(ServerPosition(placement_, copy.server())).zone();
      if (!zone.empty()) zones.insert(zone);
    }
    const int n = placement_.servers_size();
    int& cursor = primary ? primary_cursor_ : backup_cursor_;
    const std::vector<int64_t>& load = primary ? loads_.primary_bytes : loads_.bytes;
    int best = -1;
    bool best_preferred = false;
    for (int k = 0; k < n; ++k) {
      const int i = (cursor + k) % n;
      const PlacedServer& server = placement_.servers(i);
      if (server.draining() ||
          std::any_of(unit.copies().begin(), unit.copies().end(),
                      [&](const PlacedCopy& c) { return c.server() == server.id(); })) {
        continue;
      }
      const bool preferred = server.zone().empty() || zones.count(server.zone()) == 0;
      if (best < 0 || (preferred && !best_preferred) ||
          (preferred == best_preferred && load[i] < load[best])) {
        best = i;
        best_preferred = preferred;
      }
    }
    if (best >= 0) {
      loads_.Add(best, unit.bytes(), primary);
      cursor = (best + 1) % n;
    }
    return best;
  }

 private:
  const Placement& placement_;
  Loads loads_;
  int primary_cursor_ = 0;
  int backup_cursor_ = 0;
};

Placement NextEpoch(Placement placement) {
  placement.set_epoch(placement.epoch() + 1);
  return placement;
}

void AddCatchingUp(PlacedUnit& unit, int32_t server, int32_t replaces = -1) {
  PlacedCopy* copy = unit.add_copies();
  copy->set_server(server);
  copy->set_catching_up(true);
  if (replaces >= 0) copy->set_replaces(replaces);
}

// Removes the server at `position` when it is draining and holds nothing.
void DropIfDrained(Placement& placement, int position) {
  const PlacedServer& server = placement.servers(position);
  if (!server.draining()) return;
  for (const PlacedUnit& unit : placement.units()) {
    for (const PlacedCopy& copy : unit.copies()) {
      if (copy.server() == server.id()) return;
    }
  }
  placement.mutable_servers()->DeleteSubrange(position, 1);
}

// Moves copies onto the server at `target` from the servers holding the
// most bytes, as Balanced says; whether any moved.
bool MoveOnto(Placement& next, int target) {
  const PlacedServer& server = next.servers(target);
  const int32_t id = server.id();
  int takers = 0;
  int64_t total = 0;
  Loads loads(next);
  for (int i = 0; i < next.servers_size(); ++i) {
    if (!next.servers(i).draining()) ++takers;
    total += loads.bytes[i];
  }
  const int64_t mean = total / takers;
  // Units by bytes, largest first (by key among equals), moved from the
  // most loaded server holding a copy that may move to the new one.
  std::vector<PlacedUnit*> units;
  for (PlacedUnit& unit : *next.mutable_units()) units.push_back(&unit);
  std::stable_sort(units.begin(), units.end(), [](const PlacedUnit* a, const PlacedUnit* b) {
    return a->bytes() != b->bytes() ? a->bytes() > b->bytes() : a->key() < b->key();
  });
  bool moved = false;
  for (PlacedUnit* unit : units) {
    if (loads.bytes[target] + unit->bytes() > mean || unit->bytes() == 0) continue;
    if (std::any_of(unit->copies().begin(), unit->copies().end(),
                    [&](const PlacedCopy& c) { return c.server() == id; })) {
      continue;  // it has a copy already
    }
    std::set<std::string> zones;
    for (const PlacedCopy& copy : unit->copies()) {
      zones.insert(next.servers(ServerPosition(next, copy.server())).zone());
    }
    int from = -1;
    for (const PlacedCopy& copy : unit->copies()) {
      const int position = ServerPosition(next, copy.server());
      if (copy.catching_up() || BeingReplaced(*unit, copy.server()) ||
          loads.bytes[position] - unit->bytes() < loads.bytes[target] + unit->bytes()) {
        continue;  // moving it would not even the two out
      }
      // The new server's zone must not repeat one of the other copies'.
      const std::string& own = next.servers(position).zone();
      const bool zone_ok =
          server.zone().empty() || server.zone() == own || zones.count(server.zone()) == 0;
      if (zone_ok && (from < 0 || loads.bytes[position] > loads.bytes[from])) from = position;
    }
    if (from < 0) continue;
    const bool primary = unit->copies(0).server() == next.servers(from).id();
    AddCatchingUp(*unit, id, next.servers(from).id());
    loads.bytes[from] -= unit->bytes();
    loads.Add(target, unit->bytes(), primary);
    if (primary) loads.primary_bytes[from] -= unit->bytes();
    moved = true;
  }
  return moved;
}

absl::Status NotFound(const Placement& placement, int32_t id) {
  return absl::NotFoundError(absl::StrCat("server ", id, " is not in the placement table (epoch ",
                                          placement.epoch(), ")"));
}

}  // namespace

absl::Status ValidatePlacement(const Placement& placement) {
  if (placement.replication() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: replication must be at least 1, got ", placement.replication()));
  }
  std::set<int32_t> ids;
  std::set<std::string> addresses;
  for (const PlacedServer& server : placement.servers()) {
    if (server.id() < 0 || server.id() >= placement.next_server_id()) {
      return absl::InvalidArgumentError(absl::StrCat("placement: server id ", server.id(),
                                                     " is outside [0, next_server_id ",
                                                     placement.next_server_id(), ")"));
    }
    if (!ids.insert(server.id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: server id ", server.id(), " is listed twice"));
    }
    if (!server.address().empty() && !addresses.insert(server.address()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: address ", server.address(), " is listed twice"));
    }
  }
  std::set<std::string> keys;
  for (const PlacedUnit& unit : placement.units()) {
    const std::string what = absl::StrCat("placement: unit '", unit.key(), "'");
    if (unit.key().empty() || !keys.insert(unit.key()).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is empty or listed twice"));
    }
    if (unit.bytes() < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative bytes"));
    if (unit.copies_size() == 0 || unit.copies(0).catching_up()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has no ready primary"));
    }
    std::set<int32_t> holders;
    for (const PlacedCopy& copy : unit.copies()) {
      if (ids.count(copy.server()) == 0 || !holders.insert(copy.server()).second) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": its copy on server ", copy.server(),
                                                       " is on no server or on one twice"));
      }
    }
    for (const PlacedCopy& copy : unit.copies()) {
      if (!copy.has_replaces()) continue;
      const auto replaced =
          std::find_if(unit.copies().begin(), unit.copies().end(),
                       [&](const PlacedCopy& c) { return c.server() == copy.replaces(); });
      if (!copy.catching_up() || copy.replaces() == copy.server() ||
          replaced == unit.copies().end() || replaced->catching_up()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": its copy on server ", copy.server(), " replaces ", copy.replaces(),
            ", which only a catching-up copy may do, of another, ready copy"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Placement> InitialPlacement(const std::vector<PlacementServer>& servers,
                                           const std::vector<PlacementUnitSpec>& units,
                                           int replication) {
  if (replication < 1 || replication > static_cast<int>(servers.size())) {
    return absl::InvalidArgumentError(absl::StrCat("replication ", replication,
                                                   " needs between 1 and ", servers.size(),
                                                   " server(s), one per copy"));
  }
  Placement placement;
  placement.set_replication(replication);
  for (const PlacementServer& spec : servers) {
    PlacedServer* server = placement.add_servers();
    server->set_id(placement.next_server_id());
    server->set_address(spec.address);
    server->set_zone(spec.zone);
    placement.set_next_server_id(placement.next_server_id() + 1);
  }
  Chooser chooser(placement);
  for (const PlacementUnitSpec& spec : units) {
    PlacedUnit* unit = placement.add_units();
    unit->set_key(spec.key);
    unit->set_bytes(spec.bytes);
    for (int c = 0; c < replication; ++c) {
      // Never -1: every unit has fewer copies than there are servers.
      const int position = chooser.Choose(*unit, c == 0);
      unit->add_copies()->set_server(placement.servers(position).id());
    }
  }
  if (absl::Status s = ValidatePlacement(placement); !s.ok()) return s;
  return NextEpoch(std::move(placement));
}

absl::StatusOr<Placement> WithUnits(const Placement& placement, const Placement& added) {
  if (absl::Status s = ValidatePlacement(added); !s.ok()) return s;
  if (placement.servers().empty()) return added;
  if (absl::Status s = ValidatePlacement(placement); !s.ok()) return s;
  std::map<std::string, int32_t> ids;  // by address, in `placement`
  for (const PlacedServer& server : placement.servers()) ids[server.address()] = server.id();
  std::map<int32_t, std::string> addresses;  // by id, in `added`
  for (const PlacedServer& server : added.servers()) addresses[server.id()] = server.address();
  std::set<std::string> keys;
  for (const PlacedUnit& unit : placement.units()) keys.insert(unit.key());
  Placement next = NextEpoch(placement);
  bool changed = false;
  for (const PlacedUnit& unit : added.units()) {
    if (keys.count(unit.key()) > 0) continue;
    PlacedUnit* copy = next.add_units();
    *copy = unit;
    for (PlacedCopy& placed : *copy->mutable_copies()) {
      const std::string& address = addresses[placed.server()];
      const auto id = ids.find(address);
      if (address.empty() || id == ids.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "unit ", unit.key(), " has a copy on server '", address,
            "', which the cluster's table (epoch ", placement.epoch(), ") does not have"));
      }
      if (placed.has_replaces()) placed.set_replaces(ids[addresses[placed.replaces()]]);
      placed.set_server(id->second);
    }
    changed = true;
  }
  if (!changed) return placement;
  return next;
}

absl::StatusOr<Placement> WithoutServer(const Placement& placement, int32_t id) {
  const int position = ServerPosition(placement, id);
  if (position < 0) return NotFound(placement, id);
  Placement next = NextEpoch(placement);
  std::vector<std::string> lost;
  for (PlacedUnit& unit : *next.mutable_units()) {
    auto& copies = *unit.mutable_copies();
    for (PlacedCopy& copy : copies) {
      if (copy.has_replaces() && copy.replaces() == id) copy.clear_replaces();
    }
    const auto gone = std::find_if(copies.begin(), copies.end(),
                                   [&](const PlacedCopy& c) { return c.server() == id; });
    if (gone == copies.end()) continue;
    copies.erase(gone);
    const auto ready = std::find_if(copies.begin(), copies.end(),
                                    [](const PlacedCopy& c) { return !c.catching_up(); });
    if (ready == copies.end()) {
      lost.push_back(unit.key());
      continue;
    }
    // The first ready backup is promoted; the others keep their order.
    std::rotate(copies.begin(), ready, ready + 1);
  }
  if (!lost.empty()) {
    return absl::DataLossError(absl::StrCat(
        "losing server ", id, " loses every ready copy of ", lost.size(), " unit(s): ",
        absl::StrJoin(lost.begin(), lost.begin() + std::min<size_t>(lost.size(), 8), ", "),
        lost.size() > 8 ? ", ..." : ""));
  }
  next.mutable_servers()->DeleteSubrange(position, 1);
  return next;
}

Placement Repaired(const Placement& placement) {
  Placement next = placement;
  Chooser chooser(next);
  bool changed = false;
  for (PlacedUnit& unit : *next.mutable_units()) {
    int staying = 0;
    for (const PlacedCopy& copy : unit.copies())
      staying += BeingReplaced(unit, copy.server()) ? 0 : 1;
    for (; staying < next.replication(); ++staying) {
      const int position = chooser.Choose(unit, /*primary=*/false);
      if (position < 0) break;
      AddCatchingUp(unit, next.servers(position).id());
      changed = true;
    }
  }
  return changed ? NextEpoch(std::move(next)) : placement;
}

absl::StatusOr<Placement> WithServer(const Placement& placement, const PlacementServer& server,
                                     bool balance) {
  for (const PlacedServer& s : placement.servers()) {
    if (!server.address.empty() && s.address() == server.address) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server ", server.address, " is in the placement table already, as id ", s.id()));
    }
  }
  Placement next = NextEpoch(placement);
  const int32_t id = next.next_server_id();
  next.set_next_server_id(id + 1);
  PlacedServer* added = next.add_servers();
  added->set_id(id);
  added->set_address(server.address);
  added->set_zone(server.zone);
  if (balance) MoveOnto(next, next.servers_size() - 1);
  return next;
}

absl::StatusOr<Placement> Balanced(const Placement& placement, int32_t id) {
  const int position = ServerPosition(placement, id);
  if (position < 0) return NotFound(placement, id);
  if (placement.servers(position).draining()) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", id, " is draining: it takes no copies"));
  }
  Placement next = placement;
  if (!MoveOnto(next, position)) return placement;
  return NextEpoch(std::move(next));
}

absl::StatusOr<Placement> Draining(const Placement& placement, int32_t id) {
  const int position = ServerPosition(placement, id);
  if (position < 0) return NotFound(placement, id);
  Placement next = NextEpoch(placement);
  next.mutable_servers(position)->set_draining(true);
  Chooser chooser(next);
  for (PlacedUnit& unit : *next.mutable_units()) {
    auto& copies = *unit.mutable_copies();
    const auto copy = std::find_if(copies.begin(), copies.end(),
                                   [&](const PlacedCopy& c) { return c.server() == id; });
    if (copy == copies.end() || BeingReplaced(unit, id)) continue;
    if (copy->catching_up()) {  // a copy not made yet: not worth making
      copies.erase(copy);
      continue;
    }
    const int to = chooser.Choose(unit, unit.copies(0).server() == id, id);
    if (to < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", id, " cannot leave: no other server may take unit '", unit.key(), "'"));
    }
    AddCatchingUp(unit, next.servers(to).id(), id);
  }
  DropIfDrained(next, position);
  return next;
}

absl::StatusOr<Placement> CaughtUp(const Placement& placement, absl::string_view key, int32_t id) {
  Placement next = NextEpoch(placement);
  const auto unit = std::find_if(next.mutable_units()->begin(), next.mutable_units()->end(),
                                 [&](const PlacedUnit& u) { return u.key() == key; });
  PlacedCopy* copy = unit == next.mutable_units()->end() ? nullptr : FindCopy(*unit, id);
  if (copy == nullptr) {
    return absl::NotFoundError(absl::StrCat("unit '", key, "' has no copy on server ", id));
  }
  if (!copy->catching_up()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the copy of unit '", key, "' on server ", id, " is not catching up"));
  }
  copy->set_catching_up(false);
  if (!copy->has_replaces()) return next;
  const int32_t replaced = copy->replaces();
  copy->clear_replaces();
  auto& copies = *unit->mutable_copies();
  const auto old = std::find_if(copies.begin(), copies.end(),
                                [&](const PlacedCopy& c) { return c.server() == replaced; });
  const auto now = std::find_if(copies.begin(), copies.end(),
                                [&](const PlacedCopy& c) { return c.server() == id; });
  std::iter_swap(old, now);  // the new copy takes the old one's place
  copies.erase(now);
  DropIfDrained(next, ServerPosition(next, replaced));
  return next;
}

int CopiesMoving(const Placement& placement, absl::string_view address, bool off) {
  const auto server = std::find_if(placement.servers().begin(), placement.servers().end(),
                                   [&](const PlacedServer& s) { return s.address() == address; });
  if (server == placement.servers().end()) return -1;
  int moving = 0;
  for (const PlacedUnit& unit : placement.units()) {
    for (const PlacedCopy& copy : unit.copies()) {
      if (off ? copy.has_replaces() && copy.replaces() == server->id()
              : copy.catching_up() && copy.server() == server->id()) {
        ++moving;
      }
    }
  }
  return moving;
}

}  // namespace fulcrum
