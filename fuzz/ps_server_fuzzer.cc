// Fuzz target: a parameter server and the calls a hostile peer makes to
// it (ps_calls.proto), each as the gRPC server hands it over -- pushes
// parsed from gRPC's buffers by ParseReceivedPush. Every call must answer
// (an error is fine) and the server must keep to its memory budget.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "common/rpc/tensor_bytes.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/ps_calls.pb.h"
#include "ps_server/parameter_server.h"

namespace fulcrum::fuzz {
namespace {

constexpr int64_t kMaxMemoryBytes = 16 << 20;

PsServerConfig Config(ConsistencyMode mode) {
  PsServerConfig config;
  config.set_mode(mode == MODE_UNSPECIFIED || !ConsistencyMode_IsValid(mode) ? ASYNC : mode);
  config.set_num_replicas(2);
  config.set_replicas_to_aggregate(2);
  config.set_max_staleness(-1);
  config.set_staleness_bound(1);
  config.set_lease_timeout_ms(60000);
  config.set_startup_timeout_ms(0);
  config.set_max_message_bytes(4 << 20);
  config.set_max_memory_bytes(kMaxMemoryBytes);
  return config;
}

// `push` as the server receives it: serialised, then parsed from gRPC's
// buffers, its float data left there.
PushRequest Received(const PushRequest& push, ReceivedBytes* received) {
  grpc::ByteBuffer buffer = AsReceived(push.SerializeAsString());
  PushRequest parsed;
  Check(ParseReceivedPush(&buffer, &parsed, received).ok(), "a serialised push did not parse");
  return parsed;
}

void Call(ParameterServer& ps, const PsCall& call) {
  switch (call.call_case()) {
    case PsCall::kCreateShards:
      (void)ps.CreateShards(call.create_shards());
      break;
    case PsCall::kPull:
      (void)ps.Pull(call.pull(), absl::Now());
      (void)ps.PullLending(call.pull(), absl::Now(), SmallCallLimits());
      break;
    case PsCall::kPush: {
      ReceivedBytes received;
      const PushRequest push = Received(call.push(), &received);
      (void)ps.Push(push, SmallCallLimits(), received);
      break;
    }
    case PsCall::kPushParts: {
      ParameterServer::IncomingPush push(&ps, StreamedCallLimits());
      bool ok = true;
      for (const PushRequest& part : call.push_parts().parts()) {
        ReceivedBytes received;
        PushRequest parsed = Received(part, &received);
        ok = push.Add(&parsed, std::move(received)).ok();
        if (!ok) break;
      }
      if (ok) (void)push.Finish();
      break;
    }
    case PsCall::kPullRows:
      (void)ps.PullRows(call.pull_rows(), absl::Now());
      break;
    case PsCall::kPushRows:
      (void)ps.PushRows(call.push_rows());
      break;
    case PsCall::kPushRowsParts:
      (void)ps.PushRows(std::vector<PushRowsRequest>(call.push_rows_parts().parts().begin(),
                                                     call.push_rows_parts().parts().end()));
      break;
    case PsCall::kReadRows:
      (void)ps.ReadRows(call.read_rows());
      break;
    case PsCall::kReplicate:
      (void)ps.Replicate(call.replicate());
      break;
    case PsCall::kHeartbeat:
      (void)ps.Heartbeat(call.heartbeat());
      break;
    case PsCall::kDescribe:
    case PsCall::CALL_NOT_SET:
      break;
  }
  const DescribeResponse described = ps.Describe();
  Check(described.memory_bytes() >= 0 && described.memory_bytes() <= kMaxMemoryBytes,
        "memory past the budget");
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fulcrum;  // NOLINT(google-build-using-namespace)
  fuzz::PsCalls calls;
  if (!calls.ParseFromArray(data, static_cast<int>(size))) return 0;
  ParameterServer ps(fuzz::Config(calls.mode()));
  for (const fuzz::PsCall& call : calls.calls()) fuzz::Call(ps, call);
  return 0;
}
