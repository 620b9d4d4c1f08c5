// One parameter server over several transports to it -- over gRPC, several
// channels, each its own TCP connection -- with each large pull, push and
// push-pull split by shard across them and sent side by side. Where one
// connection is the limit (its one byte stream, and the one server thread
// that reads it), a server's shards travel in parallel. Thread-safe.
//
// Which shards go together: a request's shards are dealt to the transports
// round-robin, in the order it names them (a push-pull's pulled shards
// first, and each pushed shard with its own pull), so a variable split into
// equal shards (the MAX_SIZE or FIXED_SHARDS partitioner) spreads evenly; a
// request with one shard, or with at most min_split_bytes of tensor data
// (small calls are cheaper whole), goes whole over the first transport.
//
// What splitting changes: a server applies each part as a push of its own,
// as it does the parts of one push that go to different servers. So an
// error in one part (a NaN gradient, say) rejects that part's shards while
// the others apply; and where one part fails UNAVAILABLE while the others
// got through, PsClient retries the whole push: the shards that got
// through answer DUPLICATE (the retry carries the push's push_id), so
// nothing applies twice.
#ifndef FULCRUM_CLIENT_TRANSPORT_PARALLEL_PS_TRANSPORT_H_
#define FULCRUM_CLIENT_TRANSPORT_PARALLEL_PS_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/transport/ps_transport.h"
#include "common/thread_pool.h"

namespace fulcrum {

class ParallelPsTransport final : public PsTransport {
 public:
  // `lanes` (at least one) all reach one server; the calls that carry no
  // tensors use the first.
  ParallelPsTransport(std::vector<std::unique_ptr<PsTransport>> lanes, int64_t min_split_bytes);

  int lanes() const { return static_cast<int>(lanes_.size()); }

  std::string address() const override { return lanes_[0]->address(); }
  void FailFast() override {
    for (const auto& lane : lanes_) lane->FailFast();
  }
  absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request,
                                                    absl::Time deadline) override;
  // Each part is told the whole's response_bytes, a bound on its own.
  absl::StatusOr<PullResponse> Pull(const PullRequest& request, int64_t response_bytes,
                                    absl::Time deadline, SlicePlacer* sink) override;
  absl::StatusOr<PushResponse> Push(std::shared_ptr<const OutgoingPush> request,
                                    absl::Time deadline) override;
  absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const OutgoingPush> push,
                                        const PullRequest& pull, int64_t response_bytes,
                                        absl::Time deadline, SlicePlacer* sink) override;
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request,
                                              absl::Time deadline) override;
  absl::StatusOr<DescribeResponse> Describe(absl::Time deadline) override;
  absl::StatusOr<PushRowsResponse> PushRowsInParts(const std::vector<PushRowsRequest>& parts,
                                                   absl::Time deadline) override;
  absl::StatusOr<ReadRowsResponse> ReadRows(const ReadRowsRequest& request,
                                            absl::Time deadline) override;
  absl::StatusOr<PullRowsResponse> PullRows(const PullRowsRequest& request,
                                            absl::Time deadline) override;
  absl::StatusOr<PushRowsResponse> PushRows(const PushRowsRequest& request,
                                            absl::Time deadline) override;
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& request,
                                                        absl::Time deadline) override;
  absl::Status JobDone(const std::string& reason, absl::Time deadline) override;

 private:
  // Runs call(lane, part) for each part on its own transport, in parallel,
  // with the caller's placer of pulled values (common/rpc/tensor_bytes.h), and
  // merges the results in part order; the first error, if any.
  template <typename Response, typename Part, typename Call, typename Merge>
  absl::StatusOr<Response> RunParts(const std::vector<Part>& parts, Call call, Merge merge);

  const std::vector<std::unique_ptr<PsTransport>> lanes_;
  const int64_t min_split_bytes_;
  ThreadPool pool_;  // one thread per lane beyond the caller's
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_TRANSPORT_PARALLEL_PS_TRANSPORT_H_
