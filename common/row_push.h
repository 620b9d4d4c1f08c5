// A push of row gradients (PushRowsRequest) larger than one message: the
// client cuts it into parts that the servers' PushRowsStream takes as one
// push, merged before anything applies, so a step's rows apply once
// whatever their number. Shared by the client that splits and the server
// that merges; pulls too large for one answer are cut the same way.
// Pure functions; thread-safe.
#ifndef FULCRUM_COMMON_ROW_PUSH_H_
#define FULCRUM_COMMON_ROW_PUSH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/embedding.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// Most ids one push of rows may carry to one server, in all its parts.
constexpr int64_t kMaxIdsPerRowPush = 8 * kMaxIdsPerRowCall;

// A pull of rows whose answer is larger than one message, cut the same way
// into pulls of at most `max_ids` ids and about `max_bytes` of rows (tables
// of `widths`), each naming all the tables; none when it fits.
std::vector<PullRowsRequest> SplitRowPull(const PullRowsRequest& pull,
                                          const std::vector<int64_t>& widths, int64_t max_ids,
                                          int64_t max_bytes);

// `push` cut, in order, into parts of at most `max_ids` ids and about
// `max_bytes` of ids and gradients (at least one id each), every part
// naming all its tables (with their versions) as `push` does; none when
// it fits as it is (saving the copy).
std::vector<PushRowsRequest> SplitRowPush(const PushRowsRequest& push, int64_t max_ids,
                                          int64_t max_bytes);

// The parts of one push merged back: INVALID_ARGUMENT when they disagree
// on the worker, the push's id, the incarnation or the tables they name
// (in order), or when there are none.
absl::StatusOr<PushRowsRequest> MergeRowPush(std::vector<PushRowsRequest> parts);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_ROW_PUSH_H_
