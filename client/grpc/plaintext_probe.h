// Why a plaintext channel could not connect: a probe of the server's
// address, made only after a call failed, so that the error can say what
// to change. A server that wants TLS closes a connection that opens with
// HTTP/2's plaintext preface without a word; a plaintext gRPC server
// answers it with its settings.
#ifndef FULCRUM_CLIENT_GRPC_PLAINTEXT_PROBE_H_
#define FULCRUM_CLIENT_GRPC_PLAINTEXT_PROBE_H_

#include <string>

#include "absl/time/time.h"

namespace fulcrum {

enum class PlaintextAnswer {
  kNoAnswer,         // nothing listens, or nothing was learned in time
  kClosedAtPreface,  // it listens but hung up on the preface: TLS, likely
  kAnswered,         // it answered: it speaks plaintext
};

// Connects to `address` ("host:port"), sends the preface and waits for the
// first bytes back, all within `timeout`. Blocking; thread-safe.
PlaintextAnswer ProbePlaintext(const std::string& address, absl::Duration timeout);

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_GRPC_PLAINTEXT_PROBE_H_
