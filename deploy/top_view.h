// fulcrumctl top's screen: the cluster at one moment as its servers
// describe it, with rates over the time since the sample before. Rendered
// as plain text; the command redraws it in place (top's way).
#ifndef FULCRUM_DEPLOY_TOP_VIEW_H_
#define FULCRUM_DEPLOY_TOP_VIEW_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// The servers' Describe answers (in the order of `hosts`) at `at`.
struct TopSample {
  absl::Time at;
  std::vector<DescribeResponse> servers;
};

// The screen for `now`: one line per server (shards and ranges, primaries
// and backups, updates and stale drops per second, memory against its
// budget), one per worker (its state as the servers see it, its clock,
// its lease), one per table (ranges, rows, evictions per second). Rates
// need `before` (the previous sample of the same servers): "-" without.
std::string RenderTop(const std::vector<std::string>& hosts, const TopSample& now,
                      const TopSample* before);

}  // namespace fulcrum

#endif  // FULCRUM_DEPLOY_TOP_VIEW_H_
