#include "client/transport/tracing_ps_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

int64_t RowBytes(const google::protobuf::RepeatedPtrField<TableRows>& tables) {
  int64_t bytes = 0;
  for (const TableRows& rows : tables) {
    bytes += static_cast<int64_t>(rows.ids_size() * sizeof(int64_t) +
                                  rows.values_size() * sizeof(float));
  }
  return bytes;
}

}  // namespace

void TracingPsTransport::Record(const char* name, absl::Time start, int64_t bytes, bool traced,
                                uint64_t push_id) const {
  TraceSpan span{absl::StrCat("ps ", ps_), name, start, absl::Now()};
  span.args = {{"server", address()}, {"bytes sent", absl::StrCat(bytes)}};
  if (push_id != 0) span.args.emplace_back("push_id", absl::StrCat(absl::Hex(push_id)));
  if (traced) {
    span.flow_end = TraceSpan::kFrom;
    span.flow = FlowId(push_id, ps_);
  }
  trace_->Add(span);
}

absl::StatusOr<PullResponse> TracingPsTransport::Pull(const PullRequest& request,
                                                      int64_t response_bytes, absl::Time deadline,
                                                      SlicePlacer* sink) {
  if (!trace_->recording())
    return ForwardingPsTransport::Pull(request, response_bytes, deadline, sink);
  const absl::Time start = absl::Now();
  auto pulled = ForwardingPsTransport::Pull(request, response_bytes, deadline, sink);
  Record("pull", start, 0);
  return pulled;
}

absl::StatusOr<PushResponse> TracingPsTransport::Push(std::shared_ptr<const OutgoingPush> request,
                                                      absl::Time deadline) {
  if (!trace_->recording()) return ForwardingPsTransport::Push(std::move(request), deadline);
  const absl::Time start = absl::Now();
  const int64_t bytes = request->TensorBytes();
  const bool traced = request->request.trace();
  const uint64_t push_id = request->request.push_id();
  auto pushed = ForwardingPsTransport::Push(std::move(request), deadline);
  Record("push", start, bytes, traced, push_id);
  return pushed;
}

absl::StatusOr<PullResponse> TracingPsTransport::PushPull(std::shared_ptr<const OutgoingPush> push,
                                                          const PullRequest& pull,
                                                          int64_t response_bytes,
                                                          absl::Time deadline, SlicePlacer* sink) {
  if (!trace_->recording()) {
    return ForwardingPsTransport::PushPull(std::move(push), pull, response_bytes, deadline, sink);
  }
  const absl::Time start = absl::Now();
  const int64_t bytes = push->TensorBytes();
  const bool traced = push->request.trace();
  const uint64_t push_id = push->request.push_id();
  auto pulled =
      ForwardingPsTransport::PushPull(std::move(push), pull, response_bytes, deadline, sink);
  Record("push-pull", start, bytes, traced, push_id);
  return pulled;
}

absl::StatusOr<PullRowsResponse> TracingPsTransport::PullRows(const PullRowsRequest& request,
                                                              absl::Time deadline) {
  if (!trace_->recording()) return ForwardingPsTransport::PullRows(request, deadline);
  const absl::Time start = absl::Now();
  auto pulled = ForwardingPsTransport::PullRows(request, deadline);
  Record("pull rows", start, 0);
  return pulled;
}

absl::StatusOr<PushRowsResponse> TracingPsTransport::PushRows(const PushRowsRequest& request,
                                                              absl::Time deadline) {
  if (!trace_->recording()) return ForwardingPsTransport::PushRows(request, deadline);
  const absl::Time start = absl::Now();
  auto pushed = ForwardingPsTransport::PushRows(request, deadline);
  Record("push rows", start, RowBytes(request.tables()), request.trace(), request.push_id());
  return pushed;
}

absl::StatusOr<PushRowsResponse> TracingPsTransport::PushRowsInParts(
    const std::vector<PushRowsRequest>& parts, absl::Time deadline) {
  if (!trace_->recording() || parts.empty()) {
    return ForwardingPsTransport::PushRowsInParts(parts, deadline);
  }
  const absl::Time start = absl::Now();
  auto pushed = ForwardingPsTransport::PushRowsInParts(parts, deadline);
  int64_t bytes = 0;
  for (const PushRowsRequest& part : parts) bytes += RowBytes(part.tables());
  Record("push rows", start, bytes, parts.front().trace(), parts.front().push_id());
  return pushed;
}

}  // namespace fulcrum
