// What a server's Describe says, in words, for fulcrumctl status and the
// status page alike; and whether a client's Describe asked it at all.
#ifndef FULCRUM_COMMON_DESCRIBE_TEXT_H_
#define FULCRUM_COMMON_DESCRIBE_TEXT_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// Whether this entry of a client's Describe is a server's answer: a server
// lost for good (out of the cluster's placement table) is not asked, and
// its entry stays empty; a running server's incarnation is never 0.
inline bool WasAsked(const DescribeResponse& d) { return d.incarnation() != 0; }

// Which copy of a shard or a table's range a server holds (ShardInfo,
// TableInfo): "" when it is the only one, else "backup of A", "primary,
// backed up on B, C", and ", filling a copy on D" for copies catching up.
template <typename Info>
std::string CopyOf(const Info& unit) {
  std::string copy = !unit.primary().empty()   ? absl::StrCat("backup of ", unit.primary())
                     : !unit.backups().empty() ? absl::StrCat("primary, backed up on ",
                                                              absl::StrJoin(unit.backups(), ", "))
                                               : "";
  if (!unit.catching_up().empty()) {
    absl::StrAppend(&copy, copy.empty() ? "primary" : "", ", filling a copy on ",
                    absl::StrJoin(unit.catching_up(), ", "));
  }
  return copy;
}

// A worker as a server sees it: "live", "awaited (not started yet)",
// "dead" (seen, its lease run out) or "never came"; " finished" added when
// it said it has finished.
inline std::string WorkerState(const WorkerInfo& w) {
  const char* state = w.live()      ? "live"
                      : w.awaited() ? "awaited (not started yet)"
                      : w.seen()    ? "dead"
                                    : "never came";
  return absl::StrCat(state, w.finished() ? " finished" : "");
}

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DESCRIBE_TEXT_H_
