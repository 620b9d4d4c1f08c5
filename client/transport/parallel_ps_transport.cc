#include "client/transport/parallel_ps_transport.h"

#include <algorithm>
#include <map>
#include <utility>

#include "common/logging.h"
#include "common/slices.h"

namespace fulcrum {
namespace {

// Deals shards to lanes round-robin, each shard to one lane, in the order
// they are first seen.
class Dealer {
 public:
  explicit Dealer(int lanes) : lanes_(lanes) {}

  // The lane of each of `items` (ShardRefs or ShardSlices), by its shard.
  template <typename Items>
  std::vector<int> Deal(const Items& items) {
    std::vector<int> lanes;
    lanes.reserve(items.size());
    for (const auto& item : items) {
      auto [it, added] =
          lane_of_.try_emplace({item.variable(), item.shard()}, lane_of_.size() % lanes_);
      lanes.push_back(it->second);
    }
    return lanes;
  }

  // Lanes with a shard so far: the first `used()`.
  int used() const { return static_cast<int>(std::min<size_t>(lanes_, lane_of_.size())); }

 private:
  const size_t lanes_;
  std::map<std::pair<std::string, int>, int> lane_of_;
};

// `whole`'s shards split into `used` pulls by `lane_of`.
std::vector<PullRequest> PullParts(const PullRequest& whole, const std::vector<int>& lane_of,
                                   int used) {
  PullRequest header = whole;
  header.clear_shards();
  std::vector<PullRequest> parts(used, header);
  for (int i = 0; i < whole.shards_size(); ++i) *parts[lane_of[i]].add_shards() = whole.shards(i);
  return parts;
}

// `whole`'s slices split into `used` pushes by `lane_of`, borrowed.
std::vector<std::shared_ptr<const OutgoingPush>> PushParts(
    const std::shared_ptr<const OutgoingPush>& whole, const std::vector<int>& lane_of, int used) {
  std::vector<std::vector<int>> slices(used);
  for (int i = 0; i < whole->request.gradients_size(); ++i) slices[lane_of[i]].push_back(i);
  std::vector<std::shared_ptr<const OutgoingPush>> parts;
  for (const std::vector<int>& part : slices) parts.push_back(PushPart(whole, part));
  return parts;
}

void MergePush(PushResponse& part, PushResponse* merged) {
  for (ShardPushResult& result : *part.mutable_results()) {
    *merged->add_results() = std::move(result);
  }
}

}  // namespace

ParallelPsTransport::ParallelPsTransport(std::vector<std::unique_ptr<PsTransport>> lanes,
                                         int64_t min_split_bytes)
    : lanes_(std::move(lanes)),
      min_split_bytes_(min_split_bytes),
      pool_(static_cast<int>(lanes_.size()) - 1) {
  CHECK(!lanes_.empty());
}

template <typename Response, typename Part, typename Call, typename Merge>
absl::StatusOr<Response> ParallelPsTransport::RunParts(const std::vector<Part>& parts, Call call,
                                                       Merge merge) {
  std::vector<absl::StatusOr<Response>> results(parts.size(), absl::UnknownError("not run"));
  ParallelFor(pool_, static_cast<int>(parts.size()),
              [&](int i) { results[i] = call(*lanes_[i], parts[i]); });
  Response merged;
  for (absl::StatusOr<Response>& result : results) {
    if (!result.ok()) return result.status();
    merge(*result, &merged);
  }
  return merged;
}

absl::StatusOr<PullResponse> ParallelPsTransport::Pull(const PullRequest& request,
                                                       int64_t response_bytes, absl::Time deadline,
                                                       SlicePlacer* sink) {
  // Small calls skip the dealing too: they are most calls.
  if (response_bytes <= min_split_bytes_) {
    return lanes_[0]->Pull(request, response_bytes, deadline, sink);
  }
  Dealer dealer(lanes());
  const std::vector<int> lane_of = dealer.Deal(request.shards());
  if (dealer.used() < 2) return lanes_[0]->Pull(request, response_bytes, deadline, sink);
  return RunParts<PullResponse>(
      PullParts(request, lane_of, dealer.used()),
      [&](PsTransport& lane, const PullRequest& part) {
        return lane.Pull(part, response_bytes, deadline, sink);
      },
      AppendPullResponse);
}

absl::StatusOr<PushResponse> ParallelPsTransport::Push(std::shared_ptr<const OutgoingPush> request,
                                                       absl::Time deadline) {
  if (request->TensorBytes() <= min_split_bytes_) {
    return lanes_[0]->Push(std::move(request), deadline);
  }
  Dealer dealer(lanes());
  const std::vector<int> lane_of = dealer.Deal(request->request.gradients());
  if (dealer.used() < 2) return lanes_[0]->Push(std::move(request), deadline);
  return RunParts<PushResponse>(
      PushParts(request, lane_of, dealer.used()),
      [&](PsTransport& lane, const std::shared_ptr<const OutgoingPush>& part) {
        return lane.Push(part, deadline);
      },
      MergePush);
}

absl::StatusOr<PullResponse> ParallelPsTransport::PushPull(std::shared_ptr<const OutgoingPush> push,
                                                           const PullRequest& pull,
                                                           int64_t response_bytes,
                                                           absl::Time deadline, SlicePlacer* sink) {
  if (std::max(push->TensorBytes(), response_bytes) <= min_split_bytes_) {
    return lanes_[0]->PushPull(std::move(push), pull, response_bytes, deadline, sink);
  }
  // The pulled shards first: a pushed shard goes with its own pull.
  Dealer dealer(lanes());
  const std::vector<int> pull_lane_of = dealer.Deal(pull.shards());
  const std::vector<int> push_lane_of = dealer.Deal(push->request.gradients());
  if (dealer.used() < 2) {
    return lanes_[0]->PushPull(std::move(push), pull, response_bytes, deadline, sink);
  }
  const std::vector<PullRequest> pulls = PullParts(pull, pull_lane_of, dealer.used());
  const auto pushes = PushParts(push, push_lane_of, dealer.used());
  std::vector<int> parts(dealer.used());
  for (int i = 0; i < dealer.used(); ++i) parts[i] = i;
  return RunParts<PullResponse>(
      parts,
      [&](PsTransport& lane, int part) {
        return lane.PushPull(pushes[part], pulls[part], response_bytes, deadline, sink);
      },
      AppendPullResponse);
}

absl::StatusOr<CreateShardsResponse> ParallelPsTransport::CreateShards(
    const CreateShardsRequest& request, absl::Time deadline) {
  return lanes_[0]->CreateShards(request, deadline);
}

absl::StatusOr<HeartbeatResponse> ParallelPsTransport::Heartbeat(const HeartbeatRequest& request,
                                                                 absl::Time deadline) {
  return lanes_[0]->Heartbeat(request, deadline);
}

// Rows travel on the first lane: a table's request is small beside a dense
// push (a batch's distinct ids), and one unary call.
absl::StatusOr<PullRowsResponse> ParallelPsTransport::PullRows(const PullRowsRequest& request,
                                                               absl::Time deadline) {
  return lanes_[0]->PullRows(request, deadline);
}

absl::StatusOr<PushRowsResponse> ParallelPsTransport::PushRows(const PushRowsRequest& request,
                                                               absl::Time deadline) {
  return lanes_[0]->PushRows(request, deadline);
}

absl::StatusOr<PushRowsResponse> ParallelPsTransport::PushRowsInParts(
    const std::vector<PushRowsRequest>& parts, absl::Time deadline) {
  return lanes_[0]->PushRowsInParts(parts, deadline);
}

absl::StatusOr<ReadRowsResponse> ParallelPsTransport::ReadRows(const ReadRowsRequest& request,
                                                               absl::Time deadline) {
  return lanes_[0]->ReadRows(request, deadline);
}

absl::StatusOr<DescribeResponse> ParallelPsTransport::Describe(absl::Time deadline) {
  return lanes_[0]->Describe(deadline);
}

absl::StatusOr<SaveCheckpointResponse> ParallelPsTransport::SaveCheckpoint(
    const SaveCheckpointRequest& request, absl::Time deadline) {
  return lanes_[0]->SaveCheckpoint(request, deadline);
}

absl::Status ParallelPsTransport::JobDone(const std::string& reason, absl::Time deadline) {
  return lanes_[0]->JobDone(reason, deadline);
}

}  // namespace fulcrum
