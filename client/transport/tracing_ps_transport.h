// A PsTransport that records the data calls to one server in a trace file
// (common/trace.h) while the file records: a span each on the track
// "ps <index>", a traced push's with an arrow to the server's handling
// of it (the server records that in its own file). What --trace_file
// shows of a worker's exchanges with each server.
#ifndef FULCRUM_CLIENT_TRANSPORT_TRACING_PS_TRANSPORT_H_
#define FULCRUM_CLIENT_TRANSPORT_TRACING_PS_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "client/transport/forwarding_ps_transport.h"
#include "common/trace.h"

namespace fulcrum {

class TracingPsTransport final : public ForwardingPsTransport {
 public:
  // `trace` must outlive the transport; `ps` is the server's index.
  TracingPsTransport(std::unique_ptr<PsTransport> inner, TraceFile* trace, int ps)
      : ForwardingPsTransport(std::move(inner)), trace_(trace), ps_(ps) {}

  absl::StatusOr<PullResponse> Pull(const PullRequest& request, int64_t response_bytes,
                                    absl::Time deadline, SlicePlacer* sink) override;
  absl::StatusOr<PushResponse> Push(std::shared_ptr<const OutgoingPush> request,
                                    absl::Time deadline) override;
  absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const OutgoingPush> push,
                                        const PullRequest& pull, int64_t response_bytes,
                                        absl::Time deadline, SlicePlacer* sink) override;
  absl::StatusOr<PullRowsResponse> PullRows(const PullRowsRequest& request,
                                            absl::Time deadline) override;
  absl::StatusOr<PushRowsResponse> PushRows(const PushRowsRequest& request,
                                            absl::Time deadline) override;
  absl::StatusOr<PushRowsResponse> PushRowsInParts(const std::vector<PushRowsRequest>& parts,
                                                   absl::Time deadline) override;

 private:
  // Records call `name` from `start` to now, if the file records; a push
  // the server traces too (`traced`) gets the arrow of `push_id`.
  void Record(const char* name, absl::Time start, int64_t bytes, bool traced = false,
              uint64_t push_id = 0) const;

  TraceFile* const trace_;
  const int ps_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_TRANSPORT_TRACING_PS_TRANSPORT_H_
