#include "worker/data/dealing.h"

#include <algorithm>
#include <random>

namespace fulcrum {

std::vector<int64_t> DealtExamples(int64_t num_examples, const Dealing& dealing, int64_t epoch,
                                   uint64_t seed, int64_t batch_size) {
  std::vector<int64_t> share;
  for (int64_t i = dealing.shard_index; i < num_examples; i += dealing.num_shards) {
    share.push_back(i);
  }
  // The same permutation on every run with this seed, a different one each epoch.
  std::mt19937_64 gen(seed * 1000003 + epoch * 7919 + dealing.shard_index);
  std::shuffle(share.begin(), share.end(), gen);
  share.resize(StepsPerEpoch(num_examples, dealing.num_shards, batch_size) * batch_size);
  return share;
}

Dealing DealOverWorkersLeft(const std::vector<DescribeResponse>& servers, int worker,
                            int num_workers, std::vector<int>* gone) {
  gone->clear();
  std::vector<int> left;
  for (int w = 0; w < num_workers; ++w) {
    bool is_gone = w != worker;
    for (const DescribeResponse& server : servers) {
      if (w >= server.workers_size()) {
        is_gone = false;
        break;
      }
      const WorkerInfo& info = server.workers(w);
      is_gone = is_gone && !info.live() && !info.finished() && !info.awaited();
    }
    (is_gone ? *gone : left).push_back(w);
  }
  if (gone->empty()) return Dealing{worker, num_workers};
  const int rank = static_cast<int>(std::find(left.begin(), left.end(), worker) - left.begin());
  return Dealing{rank, static_cast<int>(left.size())};
}

}  // namespace fulcrum
